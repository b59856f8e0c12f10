package io.kappa.operators;

import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * One key's counted clicks' event ids ({@link SessionRule}: an id seen again may be a correction), each with its
 * event time, kept in the state store beside the key's value in buckets by the id's hash: a batch reads and
 * writes the buckets its ids fall in, not every open session's ids (a session open for an hour holds 1,800 of a
 * user who clicks every 2 s, and the rule's value was rewritten whole by each batch that touched the user), and
 * a replay's batch, tens of a user's events, writes a few buckets instead of an entry per id (a state store
 * write costs microseconds however small it is).
 *
 * <p>An id's time is all the rule needs: a repeat is a correction only while the click's time is within A of the
 * key's latest time, which only moves forward, so an entry more than A behind can be removed at any time without
 * changing an answer (a session forgotten ended more than A + G behind: its ids are among them). Removing reads
 * every bucket, so it waits until the earliest entry is a slack (G: {@link SessionRule}) past that bound: a key
 * keeps at most A + slack of ids, and a session that never ends is read whole once per slack of event time.
 *
 * <p>The buckets hold {@link #MIN_PER_BUCKET} to {@link #MAX_PER_BUCKET} entries each (a key with fewer than
 * the minimum has one): their number doubles or halves, every entry moved, when the count leaves that range.
 * The key's value keeps the count, the number of buckets and the earliest time kept, so that finding an id's
 * bucket, and knowing that nothing is to be removed, cost nothing.
 */
final class SessionIds {
  static final int MIN_PER_BUCKET = 4;
  static final int MAX_PER_BUCKET = 32;
  static final int MAX_BUCKETS = 1 << 24; // 500 million ids of one key: a broken value, not a user
  private static final int FORMAT = 1;

  private final WriteBack<Map<String, Long>> kept; // the buckets this batch read or changed: number -> ids, times
  private long count; // entries in the buckets
  private int buckets; // a power of two (1 when the key keeps fewer than 2 * MIN_PER_BUCKET)
  private Long earliestMs; // no entry is earlier (null: none)
  private final Map<String, Long> added = new HashMap<>(); // this batch's ids and their times
  private final boolean noneStored; // the key kept no id before this batch: no bucket to read (its first batch)

  SessionIds(BytesByLong store, long count, int buckets, Long earliestMs) {
    this.kept = new WriteBack<>(store, SessionIds::decode, SessionIds::encode, Map::isEmpty);
    this.count = count;
    this.buckets = buckets;
    this.earliestMs = earliestMs;
    this.noneStored = count == 0; // a flush that keeps none removes every bucket it empties
  }

  long count() {
    return count;
  }

  int buckets() {
    return buckets;
  }

  /** No entry is earlier than this after {@link #flush}; null when none is left. */
  Long earliestMs() {
    return earliestMs;
  }

  /** The time {@code id} was added at, or null if it never was or its entry was removed. */
  Long timeOf(String id) {
    if (id == null) { // a null id cannot be told from its repeats (the input's contract makes it required)
      throw new IllegalStateException("sessions: an event without an event_id cannot be told from its repeats");
    }
    Long time = added.get(id);
    if (time != null || count == 0) { // nothing kept: no read (a key's first batch)
      return time;
    }
    return bucket(bucketOf(id, buckets)).get(id);
  }

  /** An event of a session, looked up first ({@link #timeOf}): its id is kept until its session is forgotten. */
  void add(String id, long timeMs) {
    added.put(id, timeMs);
  }

  /**
   * Writes this batch's ids and, once the earliest entry is more than {@code slackMs} before {@code keepFromMs},
   * removes every entry before {@code keepFromMs} (null: every entry, the key counted no click); an id added and
   * already before it (a replay's) costs nothing.
   */
  void flush(Long keepFromMs, long slackMs) {
    long keepFrom = keepFromMs == null ? Long.MAX_VALUE : keepFromMs;
    added.values().removeIf(time -> time < keepFrom);
    if (count > 0 && (keepFromMs == null || earliestMs < keepFromMs - slackMs)) { // the earliest are stale
      Long earliestKept = null;
      long stored = 0;
      long removed = 0;
      for (int b = 0; b < buckets; b++) {
        Map<String, Long> entries = bucket(b);
        int before = entries.size();
        stored += before;
        for (String id : entries.keySet()) { // every bucket read: where the value and the buckets disagree, stop
          if (bucketOf(id, buckets) != b) {
            throw new IllegalStateException("sessions: the event id " + id + " is kept in bucket " + b + " of "
                + buckets + ", not in its hash's");
          }
        }
        entries.values().removeIf(time -> time < keepFrom);
        for (long time : entries.values()) {
          earliestKept = earliestKept == null ? time : Math.min(earliestKept, time);
        }
        if (entries.size() != before) {
          removed += before - entries.size();
          kept.changed(b);
        }
      }
      if (stored != count) {
        throw new IllegalStateException(
            "sessions: the value counts " + count + " event ids, its " + buckets + " buckets hold " + stored);
      }
      count -= removed;
      earliestMs = earliestKept;
    }
    for (Map.Entry<String, Long> entry : added.entrySet()) {
      int b = bucketOf(entry.getKey(), buckets);
      if (bucket(b).put(entry.getKey(), entry.getValue()) == null) {
        count += 1;
      }
      kept.changed(b);
      earliestMs = earliestMs == null ? entry.getValue() : Math.min(earliestMs, entry.getValue());
    }
    resizeIfOutOfRange();
    kept.flush();
    added.clear(); // flushed once a batch; cleared so that a second flush writes nothing again
  }

  /** Doubles or halves the buckets until the count fits them; every entry moves. */
  private void resizeIfOutOfRange() {
    int fitting = buckets;
    while (count > (long) MAX_PER_BUCKET * fitting) {
      if (fitting == MAX_BUCKETS) {
        throw new IllegalStateException("sessions: " + count + " event ids of one key, more than its buckets hold");
      }
      fitting *= 2;
    }
    while (fitting > 1 && count < (long) MIN_PER_BUCKET * fitting) {
      fitting /= 2;
    }
    if (fitting == buckets) {
      return;
    }
    int resized = fitting;
    Map<Integer, Map<String, Long>> moved = new HashMap<>();
    for (int b = 0; b < Math.max(buckets, resized); b++) {
      moved.put(b, new LinkedHashMap<>());
    }
    for (int b = 0; b < buckets; b++) { // every bucket read before any is replaced
      bucket(b).forEach((id, time) -> moved.get(bucketOf(id, resized)).put(id, time));
    }
    moved.forEach(kept::replace); // a bucket past the new number is left empty: removed
    buckets = resized;
  }

  private Map<String, Long> bucket(int b) {
    return noneStored ? kept.getNew(b) : kept.get(b);
  }

  /** A stable choice: String.hashCode is the same in every JVM, so a checkpoint finds its ids after a restart. */
  static int bucketOf(String id, int buckets) {
    return Math.floorMod(id.hashCode(), buckets);
  }

  static byte[] encode(Map<String, Long> entries) {
    ByteArrayOutputStream bytes = new ByteArrayOutputStream(48 * entries.size());
    try (DataOutputStream out = new DataOutputStream(bytes)) {
      out.writeByte(FORMAT);
      out.writeInt(entries.size());
      for (Map.Entry<String, Long> entry : entries.entrySet()) {
        Bytes.writeString(out, entry.getKey());
        out.writeLong(entry.getValue());
      }
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return bytes.toByteArray();
  }

  /** A bucket's entries (none when it is absent). */
  static Map<String, Long> decode(byte[] stored) {
    if (stored == null) {
      return new LinkedHashMap<>();
    }
    return Bytes.decode("sessions' event ids", FORMAT, stored, SessionIds::readEntries);
  }

  private static Map<String, Long> readEntries(DataInputStream in) throws IOException {
    int n = in.readInt();
    if (n < 0 || n > in.available() / 12) { // each entry takes at least its 4-byte length and 8-byte time
      throw new EOFException();
    }
    Map<String, Long> entries = new LinkedHashMap<>();
    for (int i = 0; i < n; i++) {
      String id = Bytes.readString(in);
      if (id == null || entries.put(id, in.readLong()) != null) {
        throw new IllegalStateException(
            "sessions' event ids state holds " + (id == null ? "an entry without an id" : "the id " + id + " twice"));
      }
    }
    return entries;
  }
}
