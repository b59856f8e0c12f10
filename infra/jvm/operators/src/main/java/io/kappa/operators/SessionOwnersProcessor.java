package io.kappa.operators;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Objects;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.StatefulProcessor;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.streaming.TimerValues;
import org.apache.spark.sql.streaming.ValueState;
import scala.jdk.javaapi.CollectionConverters;

/**
 * user_activity's first step, per session id: the session's latest value in log order (a record without a
 * user keeps the one it had), so that its user learns of each change and of its tombstone, which carries only
 * the key. A tombstone of a session never seen changes nothing; a tombstoned session is forgotten.
 */
final class SessionOwnersProcessor extends StatefulProcessor<String, Row, Row> {
  private static final long serialVersionUID = 1L;

  // Positions in UserActivity.SESSIONS and UserActivity.CHANGES.
  private static final int PARTITION = 1, OFFSET = 2, DELETED = 3, USER = 4, START = 5, END = 6, CLICKS = 7;
  private static final int SEGMENT = 8, SIDE_IN = 9;
  static final int SIDE_OUT = 7;

  private transient ValueState<byte[]> state;

  /** A live session's value. */
  record Session(String user, Long startMs, Long endMs, Long clicks, String segment) {
    byte[] write() {
      ByteArrayOutputStream bytes = new ByteArrayOutputStream(64);
      try (DataOutputStream out = new DataOutputStream(bytes)) {
        Bytes.writeString(out, user);
        Bytes.writeLong(out, startMs);
        Bytes.writeLong(out, endMs);
        Bytes.writeLong(out, clicks);
        Bytes.writeString(out, segment);
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
      return bytes.toByteArray();
    }

    static Session read(byte[] stored) {
      try (DataInputStream in = new DataInputStream(new ByteArrayInputStream(stored))) {
        return new Session(
            Bytes.readString(in), Bytes.readLong(in), Bytes.readLong(in), Bytes.readLong(in), Bytes.readString(in));
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    }
  }

  @Override
  public void init(OutputMode outputMode, TimeMode timeMode) {
    state = getHandle().getValueState("session", Encoders.BINARY(), TTLConfig.NONE());
  }

  @Override
  public scala.collection.Iterator<Row> handleInputRows(
      String sessionId, scala.collection.Iterator<Row> rows, TimerValues timerValues) {
    List<Row> out = new ArrayList<>();
    Row last = null;
    while (rows.hasNext()) {
      Row row = rows.next();
      if (!row.isNullAt(SIDE_IN)) {
        out.add(SideRows.passThrough(row, SIDE_IN, UserActivity.CHANGES.size(), SIDE_OUT));
      } else if (last == null || LOG_ORDER.compare(row, last) > 0) {
        last = row;
      }
    }
    if (last != null) {
      Session was = state.exists() ? Session.read(state.get()) : null;
      Session now = null;
      if (!last.getBoolean(DELETED)) {
        String user = last.isNullAt(USER) ? (was == null ? null : was.user()) : last.getString(USER);
        now =
            user == null
                ? was // a record that names no user, of a session never seen: nothing to count it for
                : new Session(user, nullable(last, START), nullable(last, END), nullable(last, CLICKS),
                    last.isNullAt(SEGMENT) ? null : last.getString(SEGMENT));
      }
      if (was != null && (now == null || !was.user().equals(now.user()))) {
        out.add(change(sessionId, was, false));
      }
      if (now != null && !now.equals(was)) {
        out.add(change(sessionId, now, true));
      }
      if (now == null) {
        state.clear();
      } else {
        state.update(now.write());
      }
    }
    return CollectionConverters.asScala(out.iterator());
  }

  private static final Comparator<Row> LOG_ORDER =
      Comparator.<Row>comparingInt(r -> r.getInt(PARTITION)).thenComparingLong(r -> r.getLong(OFFSET));

  private static Long nullable(Row row, int field) {
    return row.isNullAt(field) ? null : row.getLong(field);
  }

  private static Row change(String sessionId, Session s, boolean live) {
    Object[] values = new Object[UserActivity.CHANGES.size()];
    values[0] = Objects.requireNonNull(s.user());
    values[1] = sessionId;
    values[2] = live;
    values[3] = s.startMs();
    values[4] = s.endMs();
    values[5] = s.clicks();
    values[6] = s.segment();
    return RowFactory.create(values);
  }
}
