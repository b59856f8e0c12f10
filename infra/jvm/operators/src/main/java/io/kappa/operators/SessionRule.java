package io.kappa.operators;

import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Comparator;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;

/**
 * The sessionization rule of jobs/sessionize/logic.py for one key, step for step: that file is the
 * specification (lateness from log order, gap, merges into the session created first, stable ids,
 * corrections, what state may forget). This class knows nothing of Spark; {@link SessionsProcessor} feeds
 * it one key's events of a batch in log order. The sessions' event ids (logic.py's {@code event_ids}) are
 * kept beside the key's value, in buckets by id ({@link SessionIds}).
 */
final class SessionRule {
  private SessionRule() {}

  record Event(String id, long timeMs, String page, String segment) {}

  static final class Session {
    String sessionId;
    long startMs;
    long endMs;
    int clicks;
    Set<String> pages = new HashSet<>();
    String entryPage;
    String exitPage;
    long createdSeq; // position in the key's log of the event that created it: merge order
    String segment; // the segment at the session's first click
    String firstEventId; // the session's first click (by event time)

    void absorb(Event e) {
      boolean first = e.timeMs() < startMs;
      boolean last = e.timeMs() >= endMs;
      startMs = Math.min(startMs, e.timeMs());
      endMs = Math.max(endMs, e.timeMs());
      clicks += 1;
      pages.add(e.page());
      if (first) {
        entryPage = e.page();
        segment = e.segment();
        firstEventId = e.id();
      }
      if (last) {
        exitPage = e.page();
      }
    }

    void merge(Session other) {
      Session first = startMs <= other.startMs ? this : other;
      Session latest = endMs >= other.endMs ? this : other;
      String entry = first.entryPage;
      String seg = first.segment;
      String firstId = first.firstEventId;
      String exit = latest.exitPage;
      startMs = first.startMs;
      endMs = latest.endMs;
      clicks += other.clicks;
      pages.addAll(other.pages);
      entryPage = entry;
      exitPage = exit;
      segment = seg;
      firstEventId = firstId;
    }
  }

  /** What is kept per key between batches. */
  static final class State {
    Long latestMs;
    long seen; // events of this key processed so far (log position)
    final LinkedHashMap<String, Session> open = new LinkedHashMap<>();
    long idCount; // the ids SessionIds keeps
    int idBuckets = 1; // in this many buckets
    Long earliestIdMs; // no id is kept at an earlier time (null: none kept)
  }

  /** What a batch emits for one key; {@code finals}: the sessions it forgot, written once more as final. */
  record Changes(List<Session> upserts, List<String> retractions, List<Event> late, List<Session> finals) {}

  /**
   * Apply one key's next events (in log order) to its state and its sessions' event ids ({@code idBuckets}: see
   * {@link SessionIds}); what to emit. Mutates {@code state} and writes the ids.
   */
  static Changes apply(
      String key, State state, BytesByLong idBuckets, List<Event> events, long gapMs, long latenessMs) {
    SessionIds ids = ids(state, idBuckets);
    LinkedHashMap<String, Session> changed = new LinkedHashMap<>();
    List<String> retracted = new ArrayList<>();
    List<Event> late = new ArrayList<>();
    for (Event e : events) {
      Long countedAt = ids.timeOf(e.id());
      // a correction of a click counted within A of the latest time (an older one is judged as a new event)
      if (countedAt != null && state.latestMs != null && countedAt >= state.latestMs - latenessMs) {
        for (Session s : state.open.values()) { // only a session's first click sets its segment
          if (Objects.equals(e.id(), s.firstEventId) && !Objects.equals(s.segment, e.segment())) {
            s.segment = e.segment();
            changed.put(s.sessionId, s);
          }
        }
        continue;
      }
      long seq = state.seen;
      state.seen += 1;
      if (state.latestMs != null && e.timeMs() < state.latestMs - latenessMs) {
        late.add(e);
        continue;
      }
      state.latestMs = state.latestMs == null ? e.timeMs() : Math.max(state.latestMs, e.timeMs());
      List<Session> touching = new ArrayList<>();
      for (Session s : state.open.values()) {
        if (s.startMs - gapMs <= e.timeMs() && e.timeMs() <= s.endMs + gapMs) {
          touching.add(s);
        }
      }
      touching.sort(Comparator.comparingLong(s -> s.createdSeq));
      Session session;
      if (touching.isEmpty()) {
        session = new Session();
        session.sessionId = key + ":" + e.id();
        session.startMs = e.timeMs();
        session.endMs = e.timeMs();
        session.clicks = 1;
        session.pages.add(e.page());
        session.entryPage = e.page();
        session.exitPage = e.page();
        session.createdSeq = seq;
        session.segment = e.segment();
        session.firstEventId = e.id();
      } else {
        session = touching.get(0);
        session.absorb(e);
        for (Session other : touching.subList(1, touching.size())) {
          session.merge(other);
          state.open.remove(other.sessionId);
          changed.remove(other.sessionId);
          retracted.add(other.sessionId);
        }
      }
      ids.add(e.id(), e.timeMs());
      state.open.put(session.sessionId, session);
      changed.put(session.sessionId, session);
    }
    List<Session> finals = forgetSettled(state, gapMs, latenessMs);
    flush(ids, state, gapMs, latenessMs);
    List<String> retractions = new ArrayList<>();
    for (String id : retracted) {
      if (!state.open.containsKey(id)) {
        retractions.add(id);
      }
    }
    List<Session> upserts = new ArrayList<>();
    for (Session s : changed.values()) {
      if (state.open.containsKey(s.sessionId)) { // a session forgotten is written as final instead
        upserts.add(s);
      }
    }
    upserts.sort(Comparator.comparingLong(s -> s.createdSeq));
    return new Changes(upserts, retractions, late, finals);
  }

  /** Forgets the sessions no event that counts can reach any more; returns them, by creation. */
  private static List<Session> forgetSettled(State state, long gapMs, long latenessMs) {
    List<Session> forgotten = new ArrayList<>();
    if (state.latestMs == null) {
      return forgotten;
    }
    long horizon = state.latestMs - latenessMs - gapMs;
    state.open.values().removeIf(s -> s.endMs < horizon && forgotten.add(s));
    forgotten.sort(Comparator.comparingLong(s -> s.createdSeq));
    return forgotten;
  }

  private static SessionIds ids(State state, BytesByLong idBuckets) {
    return new SessionIds(idBuckets, state.idCount, state.idBuckets, state.earliestIdMs);
  }

  /**
   * Writes the batch's ids and drops those no repeat corrects any more (more than A behind the latest time), a
   * gap's worth at a time: the batch that forgets a session drops its ids (they are more than A + G behind), and a
   * session that never ends reads its ids once per G of event time, not every batch.
   */
  private static void flush(SessionIds ids, State state, long gapMs, long latenessMs) {
    ids.flush(state.latestMs == null ? null : state.latestMs - latenessMs, gapMs);
    state.idCount = ids.count();
    state.idBuckets = ids.buckets();
    state.earliestIdMs = ids.earliestMs();
  }

  /**
   * Brings a value of an earlier layout to today's, once, on its key's next batch: the event ids a format-1 value
   * carried in its sessions, and those a format-2 value kept in an index by id ({@code byId}, with lists by
   * minute beside it, {@code byMinute}), move into {@link SessionIds}' buckets, and the old entries are removed.
   * A format-1 value kept no click's time: its ids take their session's end, the latest their times can be, so
   * that a repeat of one is a correction at least as long as the rule says (never a click counted twice), and for
   * at most its session's span longer.
   */
  static void upgrade(
      Stored read, BytesByLong byMinute, LongById byId, BytesByLong idBuckets, long gapMs, long latenessMs) {
    State state = read.state();
    if (read.format() == FORMAT) {
      return;
    }
    SessionIds ids = ids(state, idBuckets);
    read.inline().forEach((sessionId, eventIds) -> {
      for (String id : eventIds) {
        ids.add(id, state.open.get(sessionId).endMs);
      }
    });
    if (read.format() == BY_MINUTE_FORMAT) {
      byId.forEach(ids::add); // the ids of forgotten sessions too: flush removes them
      byId.clear();
      read.idMinutes().forEach(byMinute::remove);
    }
    flush(ids, state, gapMs, latenessMs);
  }

  // The state as bytes (one value per key in Spark's state store): a versioned, compact layout. Format 1
  // carried each session's event ids in the value, rewritten whole by each batch that touched the key; format 2
  // kept them beside the value in an index by id (an entry a state store write) and in lists by minute. Either
  // is read once and brought to today's layout (upgrade).

  private static final int FIRST_FORMAT = 1;
  private static final int BY_MINUTE_FORMAT = 2;
  private static final int FORMAT = 4; // 3 was a layout of ec77239's that no release wrote

  /**
   * A key's value as read: its format, its state, the event ids a format-1 value carried by session, and the
   * minutes a format-2 value kept lists of ids in (both empty for today's layout).
   */
  record Stored(int format, State state, Map<String, String[]> inline, List<Long> idMinutes) {}

  static byte[] serialize(State state) {
    ByteArrayOutputStream bytes = new ByteArrayOutputStream(256);
    try (DataOutputStream out = new DataOutputStream(bytes)) {
      out.writeByte(FORMAT);
      Bytes.writeLong(out, state.latestMs);
      out.writeLong(state.seen);
      out.writeInt(state.open.size());
      for (Session s : state.open.values()) {
        Bytes.writeString(out, s.sessionId);
        out.writeLong(s.startMs);
        out.writeLong(s.endMs);
        out.writeInt(s.clicks);
        Bytes.writeStrings(out, s.pages.toArray(new String[0]));
        Bytes.writeString(out, s.entryPage);
        Bytes.writeString(out, s.exitPage);
        out.writeLong(s.createdSeq);
        Bytes.writeString(out, s.segment);
        Bytes.writeString(out, s.firstEventId);
      }
      out.writeLong(state.idCount);
      out.writeInt(state.idBuckets);
      Bytes.writeLong(out, state.earliestIdMs);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return bytes.toByteArray();
  }

  static Stored deserialize(byte[] data) {
    int format = data.length > 0 && (data[0] == FIRST_FORMAT || data[0] == BY_MINUTE_FORMAT) ? data[0] : FORMAT;
    boolean first = format == FIRST_FORMAT;
    return Bytes.decode("sessions", format, data, in -> {
      State state = new State();
      Map<String, String[]> inline = new LinkedHashMap<>();
      state.latestMs = Bytes.readLong(in);
      state.seen = in.readLong();
      int open = in.readInt();
      for (int i = 0; i < open; i++) {
        Session s = new Session();
        s.sessionId = Bytes.readString(in);
        s.startMs = in.readLong();
        s.endMs = in.readLong();
        s.clicks = in.readInt();
        Collections.addAll(s.pages, Bytes.readStrings(in));
        s.entryPage = Bytes.readString(in);
        s.exitPage = Bytes.readString(in);
        s.createdSeq = in.readLong();
        s.segment = Bytes.readString(in);
        s.firstEventId = Bytes.readString(in);
        if (first) {
          inline.put(s.sessionId, Bytes.readStrings(in));
        }
        state.open.put(s.sessionId, s);
      }
      List<Long> idMinutes = new ArrayList<>();
      if (format == BY_MINUTE_FORMAT) {
        readRuns(in, idMinutes);
      } else if (format == FORMAT) {
        state.idCount = in.readLong();
        state.idBuckets = in.readInt();
        state.earliestIdMs = Bytes.readLong(in);
        // what every flush leaves (SessionIds): a power of two of buckets that fits the count, an earliest time
        // exactly when an id is kept
        boolean fits = state.idCount >= 0 && state.idBuckets >= 1 && state.idBuckets <= SessionIds.MAX_BUCKETS
            && Integer.bitCount(state.idBuckets) == 1
            && state.idCount <= (long) SessionIds.MAX_PER_BUCKET * state.idBuckets
            && (state.idBuckets == 1 || state.idCount >= (long) SessionIds.MIN_PER_BUCKET * state.idBuckets)
            && (state.idCount == 0) == (state.earliestIdMs == null);
        if (!fits) {
          throw new IllegalStateException("sessions state keeps " + state.idCount + " ids in " + state.idBuckets
              + " buckets, the earliest at " + state.earliestIdMs);
        }
      }
      return new Stored(format, state, inline, idMinutes);
    });
  }

  // A format-2 value's minutes of ids, as runs of consecutive minutes (first, last).

  private static void readRuns(DataInputStream in, List<Long> minutes) throws IOException {
    int runs = in.readInt();
    if (runs < 0 || runs > in.available() / 16) {
      throw new EOFException();
    }
    for (int i = 0; i < runs; i++) {
      long first = in.readLong();
      long last = in.readLong();
      // nineteen years of minutes, or a difference that overflows: a broken value
      if (last < first || last - first < 0 || last - first > 10_000_000) {
        throw new IllegalStateException("sessions state has a run of minutes from " + first + " to " + last);
      }
      for (long minute = first; minute <= last; minute++) {
        minutes.add(minute);
      }
    }
  }
}
