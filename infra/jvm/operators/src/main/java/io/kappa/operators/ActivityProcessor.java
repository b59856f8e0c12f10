package io.kappa.operators;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.streaming.MapState;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.StatefulProcessor;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.streaming.TimerValues;
import org.apache.spark.sql.streaming.ValueState;
import scala.Tuple2;
import scala.jdk.javaapi.CollectionConverters;

/**
 * user_activity's second step, per user: the user's live sessions (set and taken away by
 * {@link SessionOwnersProcessor}) and the activity over them: how many, their clicks, the earliest start, the
 * latest end, and the segment of the latest session (by start time, then session id). The counts and sums
 * follow each change; the earliest, latest and the latest session's segment too, unless a change takes away
 * or moves back the session that holds one: then, only then, the user's sessions are read again. A final
 * session (its last record: nothing changes it any more) leaves the user's map of sessions for a summary of
 * the final ones, so the state per user stays bounded by their open sessions.
 */
final class ActivityProcessor extends StatefulProcessor<String, Row, Row> {
  private static final long serialVersionUID = 1L;

  // Positions in UserActivity.CHANGES and UserActivity.OUTPUT.
  private static final int SESSION_ID = 1, LIVE = 2, START = 3, END = 4, CLICKS = 5, SEGMENT = 6, FINAL = 7;
  private static final int SIDE_IN = SessionOwnersProcessor.SIDE_OUT, SIDE_OUT = 7;

  private transient ValueState<byte[]> summary;
  private transient MapState<String, byte[]> sessions;

  /** One live session as the user's state keeps it. */
  record Session(String id, Long startMs, Long endMs, Long clicks, String segment) {
    byte[] write() {
      ByteArrayOutputStream bytes = new ByteArrayOutputStream(48);
      try (DataOutputStream out = new DataOutputStream(bytes)) {
        Bytes.writeLong(out, startMs);
        Bytes.writeLong(out, endMs);
        Bytes.writeLong(out, clicks);
        Bytes.writeString(out, segment);
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
      return bytes.toByteArray();
    }

    static Session read(String id, byte[] stored) {
      try (DataInputStream in = new DataInputStream(new ByteArrayInputStream(stored))) {
        return new Session(id, Bytes.readLong(in), Bytes.readLong(in), Bytes.readLong(in), Bytes.readString(in));
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    }
  }

  /** What the user's row is made of, and the row last emitted. */
  static final class Summary {
    long sessions;
    long clicks;
    Long firstSeen; // the earliest start (null: no session has one)
    Long lastSeen; // the latest end
    Session latest; // the session with the greatest (start, id): its segment is the user's
    Summary settled; // the same over the final sessions alone (null: none), which the map no longer holds
    boolean emitted;
    long emittedSessions;
    long emittedClicks;
    Long emittedFirst;
    Long emittedLast;
    String emittedSegment;

    /** Counts `s` in: the sessions, the clicks, and the extremes it may hold. */
    void add(Session s) {
      sessions += 1;
      clicks += s.clicks() == null ? 0 : s.clicks();
      extend(s);
    }

    private void extend(Session s) {
      if (s.startMs() != null && (firstSeen == null || s.startMs() < firstSeen)) {
        firstSeen = s.startMs();
      }
      if (s.endMs() != null && (lastSeen == null || s.endMs() > lastSeen)) {
        lastSeen = s.endMs();
      }
      if (latest == null || latest.id().equals(s.id()) || later(s, latest)) {
        latest = s;
      }
    }

    /**
     * Replaces `old` by `now` (null: takes it away). False when an extreme that `old` held may now belong to
     * another session (it was taken away, or moved back): then every session must be read again.
     */
    boolean replace(Session old, Session now) {
      sessions -= 1;
      clicks -= old.clicks() == null ? 0 : old.clicks();
      boolean exact = true;
      if (old.startMs() != null && old.startMs().equals(firstSeen)) {
        exact &= now != null && now.startMs() != null && now.startMs() <= old.startMs();
      }
      if (old.endMs() != null && old.endMs().equals(lastSeen)) {
        exact &= now != null && now.endMs() != null && now.endMs() >= old.endMs();
      }
      if (latest != null && latest.id().equals(old.id())) {
        exact &= now != null && !later(old, now);
      }
      if (now != null) {
        add(now);
      }
      return exact;
    }

    /** Counts a final session in the summary of the final ones (it stays counted in this one). */
    void settle(Session s) {
      if (settled == null) {
        settled = new Summary();
      }
      settled.add(s);
    }

    /** Back to the final sessions alone, before the open ones are counted in again. */
    void restartFromSettled() {
      Summary from = settled == null ? new Summary() : settled;
      sessions = from.sessions;
      clicks = from.clicks;
      firstSeen = from.firstSeen;
      lastSeen = from.lastSeen;
      latest = from.latest;
    }

    byte[] write() {
      ByteArrayOutputStream bytes = new ByteArrayOutputStream(128);
      try (DataOutputStream out = new DataOutputStream(bytes)) {
        out.writeLong(sessions);
        out.writeLong(clicks);
        Bytes.writeLong(out, firstSeen);
        Bytes.writeLong(out, lastSeen);
        out.writeBoolean(latest != null);
        if (latest != null) {
          Bytes.writeString(out, latest.id());
          out.write(latest.write());
        }
        out.writeBoolean(emitted);
        out.writeLong(emittedSessions);
        out.writeLong(emittedClicks);
        Bytes.writeLong(out, emittedFirst);
        Bytes.writeLong(out, emittedLast);
        Bytes.writeString(out, emittedSegment);
        out.writeBoolean(settled != null); // after the fields of the first layout, which had none
        if (settled != null) {
          out.write(settled.write());
        }
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
      return bytes.toByteArray();
    }

    static Summary read(byte[] stored) {
      try (DataInputStream in = new DataInputStream(new ByteArrayInputStream(stored))) {
        return read(in);
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    }

    private static Summary read(DataInputStream in) throws IOException {
      Summary s = new Summary();
      s.sessions = in.readLong();
      s.clicks = in.readLong();
      s.firstSeen = Bytes.readLong(in);
      s.lastSeen = Bytes.readLong(in);
      if (in.readBoolean()) {
        String id = Bytes.readString(in);
        s.latest =
            new Session(id, Bytes.readLong(in), Bytes.readLong(in), Bytes.readLong(in), Bytes.readString(in));
      }
      s.emitted = in.readBoolean();
      s.emittedSessions = in.readLong();
      s.emittedClicks = in.readLong();
      s.emittedFirst = Bytes.readLong(in);
      s.emittedLast = Bytes.readLong(in);
      s.emittedSegment = Bytes.readString(in);
      if (in.available() > 0 && in.readBoolean()) { // a value of the first layout ends before it
        s.settled = read(in);
      }
      return s;
    }
  }

  /** Spark's order of struct(start_time, session_id): nulls first, strings by their UTF-8 bytes. */
  static boolean later(Session a, Session b) {
    int byStart =
        a.startMs() == null
            ? (b.startMs() == null ? 0 : -1)
            : (b.startMs() == null ? 1 : Long.compare(a.startMs(), b.startMs()));
    if (byStart != 0) {
      return byStart > 0;
    }
    return Arrays.compareUnsigned(
            a.id().getBytes(StandardCharsets.UTF_8), b.id().getBytes(StandardCharsets.UTF_8))
        > 0;
  }

  @Override
  public void init(OutputMode outputMode, TimeMode timeMode) {
    summary = getHandle().getValueState("summary", Encoders.BINARY(), TTLConfig.NONE());
    sessions = getHandle().getMapState("sessions", Encoders.STRING(), Encoders.BINARY(), TTLConfig.NONE());
  }

  @Override
  public scala.collection.Iterator<Row> handleInputRows(
      String user, scala.collection.Iterator<Row> rows, TimerValues timerValues) {
    List<Row> out = new ArrayList<>();
    Map<String, Row> changes = new LinkedHashMap<>(); // at most one set or removal per session and batch
    List<Row> removals = new ArrayList<>(); // a session moved from another user arrives as a removal there
    while (rows.hasNext()) {
      Row row = rows.next();
      if (!row.isNullAt(SIDE_IN)) {
        out.add(SideRows.passThrough(row, SIDE_IN, UserActivity.OUTPUT.size(), SIDE_OUT));
      } else if (row.getBoolean(LIVE)) {
        changes.put(row.getString(SESSION_ID), row);
      } else {
        removals.add(row);
      }
    }
    if (changes.isEmpty() && removals.isEmpty()) {
      return CollectionConverters.asScala(out.iterator());
    }
    Summary s = summary.exists() ? Summary.read(summary.get()) : new Summary();
    boolean exact = true;
    for (Row r : removals) {
      String id = r.getString(SESSION_ID);
      byte[] stored = sessions.getValue(id);
      if (stored != null && !changes.containsKey(id)) {
        exact &= s.replace(Session.read(id, stored), null);
        sessions.removeKey(id);
      }
    }
    for (Row r : changes.values()) {
      String id = r.getString(SESSION_ID);
      Session now =
          new Session(id, nullable(r, START), nullable(r, END), nullable(r, CLICKS),
              r.isNullAt(SEGMENT) ? null : r.getString(SEGMENT));
      byte[] stored = sessions.getValue(id);
      if (stored == null) {
        s.add(now);
      } else {
        exact &= s.replace(Session.read(id, stored), now);
      }
      if (r.getBoolean(FINAL)) {
        s.settle(now);
        sessions.removeKey(id);
      } else {
        sessions.updateValue(id, now.write());
      }
    }
    if (!exact) { // an extreme left with a session: find it again among those that remain
      long count = s.sessions;
      long clicks = s.clicks;
      s.restartFromSettled();
      scala.collection.Iterator<Tuple2<String, byte[]>> all = sessions.iterator();
      while (all.hasNext()) {
        Tuple2<String, byte[]> e = all.next();
        s.add(Session.read(e._1(), e._2()));
      }
      if (s.sessions != count || s.clicks != clicks) {
        throw new IllegalStateException("user_activity " + user + ": the counts disagree with the sessions");
      }
    }
    if (s.sessions == 0) {
      if (s.emitted) {
        out.add(row(user, null, true));
      }
      summary.clear();
      sessions.clear();
    } else {
      String segment = s.latest == null ? null : s.latest.segment();
      if (!s.emitted
          || s.emittedSessions != s.sessions
          || s.emittedClicks != s.clicks
          || !Objects.equals(s.emittedFirst, s.firstSeen)
          || !Objects.equals(s.emittedLast, s.lastSeen)
          || !Objects.equals(s.emittedSegment, segment)) {
        out.add(row(user, s, false));
        s.emitted = true;
        s.emittedSessions = s.sessions;
        s.emittedClicks = s.clicks;
        s.emittedFirst = s.firstSeen;
        s.emittedLast = s.lastSeen;
        s.emittedSegment = segment;
      }
      summary.update(s.write());
    }
    return CollectionConverters.asScala(out.iterator());
  }

  private static Long nullable(Row row, int field) {
    return row.isNullAt(field) ? null : row.getLong(field);
  }

  private static Row row(String user, Summary s, boolean deleted) {
    Object[] values = new Object[UserActivity.OUTPUT.size()];
    values[0] = user;
    if (s != null) {
      values[1] = s.sessions;
      values[2] = s.clicks;
      values[3] = s.firstSeen;
      values[4] = s.lastSeen;
      values[5] = s.latest == null ? null : s.latest.segment();
    }
    values[6] = deleted;
    return RowFactory.create(values);
  }
}
