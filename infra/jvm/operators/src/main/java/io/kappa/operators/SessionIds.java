package io.kappa.operators;

import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;

/**
 * One key's event ids in its sessions ({@link SessionRule}: an id seen again is a correction), kept in the
 * state store by event-time minute with an index from id to time, so that a batch writes the ids it adds and
 * the minutes it drops, not every open session's ids (a session open for an hour holds 1,800 of a user who
 * clicks every 2 s, and the rule's value was rewritten whole by each batch that touched the user).
 *
 * <p>An id's time is enough to tell whether its session is still open. Sessions in state never overlap in
 * time (an event within G of two merges them), and the horizon that forgets a session is one for all of a
 * key's sessions and only moves forward, so a forgotten session ended before every session open with or after
 * it starts (a later one starts past the forgotten one's end plus G, or its event would have been late). So an
 * id is in an open session exactly when it is indexed at a time at or after the earliest open session's start:
 * the minutes before that start can be dropped whole, and a minute that holds the start keeps harmless ids
 * until it is dropped in turn. (This needs G >= 0, which {@link Sessions#apply} checks.)
 */
final class SessionIds {
  static final long BUCKET_MS = 60_000;
  private static final int FORMAT = 1;

  private record Id(String id, long timeMs) {}

  private final BytesByLong byMinute; // minute -> its ids and their times
  private final LongById index; // id -> its time
  private final TreeSet<Long> minutes; // the head's: the minutes the store holds ids in
  // This batch's ids (id -> time, and by minute), written by flush(); and the index entries it read.
  private final Map<String, Long> added = new HashMap<>();
  private final TreeMap<Long, List<Id>> addedByMinute = new TreeMap<>();
  private final Map<String, Long> indexRead = new HashMap<>();

  SessionIds(BytesByLong byMinute, LongById index, TreeSet<Long> minutes) {
    this.byMinute = byMinute;
    this.index = index;
    this.minutes = minutes;
  }

  static long minuteOf(long timeMs) {
    return Math.floorDiv(timeMs, BUCKET_MS);
  }

  /** The time {@code id} was added at, or null if it never was or its minute was dropped. */
  Long timeOf(String id) {
    if (id == null) { // the state store keys by id: none is no key (the input's contract makes it required)
      throw new IllegalStateException("sessions: an event without an event_id cannot be told from its repeats");
    }
    Long time = added.get(id);
    if (time != null || minutes.isEmpty()) { // no minute in the store: no index read (a key's first batch)
      return time;
    }
    if (!indexRead.containsKey(id)) {
      indexRead.put(id, index.get(id));
    }
    return indexRead.get(id);
  }

  /** An event of a session: its id is kept until the minute of {@code timeMs} is dropped. */
  void add(String id, long timeMs) {
    added.put(id, timeMs);
    addedByMinute.computeIfAbsent(minuteOf(timeMs), m -> new ArrayList<>()).add(new Id(id, timeMs));
  }

  /**
   * Drops the minutes before the minute of {@code earliestOpenStartMs} (all of them when it is null: no
   * session open), then writes this batch's ids: an id added and dropped in one batch (a replay's) costs nothing.
   */
  void flush(Long earliestOpenStartMs) {
    long keepFrom = earliestOpenStartMs == null ? Long.MAX_VALUE : minuteOf(earliestOpenStartMs);
    for (List<Id> ids : addedByMinute.headMap(keepFrom).values()) {
      ids.forEach(id -> added.remove(id.id()));
    }
    addedByMinute.headMap(keepFrom).clear();
    for (long minute : new ArrayList<>(minutes.headSet(keepFrom))) {
      for (Id dropped : decode(byMinute.get(minute))) {
        Long indexed = timeOf(dropped.id());
        // the index may hold the id at a later time since (an id seen again after its session was forgotten)
        if (indexed != null && minuteOf(indexed) == minute && !added.containsKey(dropped.id())) {
          index.remove(dropped.id());
        }
      }
      byMinute.remove(minute);
      minutes.remove(minute);
    }
    for (Map.Entry<Long, List<Id>> e : addedByMinute.entrySet()) {
      long minute = e.getKey();
      List<Id> ids = minutes.contains(minute) ? decode(byMinute.get(minute)) : new ArrayList<>();
      ids.addAll(e.getValue());
      byMinute.put(minute, encode(ids));
      minutes.add(minute);
      for (Id id : e.getValue()) {
        index.put(id.id(), id.timeMs());
      }
    }
    added.clear(); // flushed once a batch; cleared so that a second flush writes nothing again
    addedByMinute.clear();
    indexRead.clear();
  }

  private static byte[] encode(List<Id> ids) {
    ByteArrayOutputStream bytes = new ByteArrayOutputStream(48 * ids.size());
    try (DataOutputStream out = new DataOutputStream(bytes)) {
      out.writeByte(FORMAT);
      out.writeInt(ids.size());
      for (Id id : ids) {
        Bytes.writeString(out, id.id());
        out.writeLong(id.timeMs());
      }
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return bytes.toByteArray();
  }

  private static List<Id> decode(byte[] stored) {
    if (stored == null) {
      throw new IllegalStateException("sessions: the head names a minute of event ids the store does not hold");
    }
    return Bytes.decode("sessions' event ids", FORMAT, stored, SessionIds::readIds);
  }

  private static List<Id> readIds(DataInputStream in) throws IOException {
    int n = in.readInt();
    if (n < 0 || n > in.available() / 12) { // each id takes at least its 4-byte length and 8-byte time
      throw new EOFException();
    }
    List<Id> ids = new ArrayList<>(n);
    for (int i = 0; i < n; i++) {
      ids.add(new Id(Bytes.readString(in), in.readLong()));
    }
    return ids;
  }
}
