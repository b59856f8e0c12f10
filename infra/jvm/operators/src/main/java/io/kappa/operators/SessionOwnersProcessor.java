package io.kappa.operators;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
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
import org.apache.spark.sql.types.StructType;
import scala.jdk.javaapi.CollectionConverters;

/**
 * user_activity's first step, per session id: the session's latest value in log order (a record without a
 * user keeps the one it had), so that its user learns of each change and of its tombstone, which carries only
 * the key. A tombstone of a session never seen changes nothing; a tombstoned session is forgotten. So is a
 * session on its final record (sessionize writes nothing of it after that one): the user learns its last
 * value, marked final, and keeps it from then on.
 */
final class SessionOwnersProcessor extends StatefulProcessor<String, Row, Row> {
  private static final long serialVersionUID = 1L;

  static final int SIDE_OUT = UserActivity.CHANGES.fieldIndex("side_kind");

  // Positions of the rule's columns in the input (UserActivity.SESSIONS', in the order the query gives them).
  private final int deleted, isFinal, user, start, end, clicks, segment;
  private final SideRows.Columns common; // the log and SIDE columns
  private transient ValueState<byte[]> state;

  SessionOwnersProcessor(StructType input) {
    common = new SideRows.Columns(input);
    deleted = input.fieldIndex("deleted");
    isFinal = input.fieldIndex("final");
    user = input.fieldIndex("user");
    start = input.fieldIndex("start_ms");
    end = input.fieldIndex("end_ms");
    clicks = input.fieldIndex("clicks");
    segment = input.fieldIndex("segment");
  }

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
      if (common.isSetAside(row)) {
        out.add(common.passThrough(row, UserActivity.CHANGES.size(), SIDE_OUT));
      } else if (last == null || common.compareInLog(last, row) < 0) {
        last = row;
      }
    }
    if (last != null) {
      Session was = state.exists() ? Session.read(state.get()) : null;
      Session now = null;
      if (!last.getBoolean(deleted)) {
        String owner = last.isNullAt(user) ? (was == null ? null : was.user()) : last.getString(user);
        now =
            owner == null
                ? was // a record that names no user, of a session never seen: nothing to count it for
                : new Session(owner, nullable(last, start), nullable(last, end), nullable(last, clicks),
                    last.isNullAt(segment) ? null : last.getString(segment));
      }
      boolean settles = now != null && !last.getBoolean(deleted) && last.getBoolean(isFinal);
      if (was != null && (now == null || !was.user().equals(now.user()))) {
        out.add(change(sessionId, was, false, false));
      }
      if (now != null && (settles || !now.equals(was))) {
        out.add(change(sessionId, now, true, settles));
      }
      if (now == null || settles) {
        state.clear();
      } else {
        state.update(now.write());
      }
    }
    return CollectionConverters.asScala(out.iterator());
  }

  private static Long nullable(Row row, int field) {
    return row.isNullAt(field) ? null : row.getLong(field);
  }

  private static Row change(String sessionId, Session s, boolean live, boolean settles) {
    Object[] values = new Object[UserActivity.CHANGES.size()];
    values[0] = Objects.requireNonNull(s.user());
    values[1] = sessionId;
    values[2] = live;
    values[3] = s.startMs();
    values[4] = s.endMs();
    values[5] = s.clicks();
    values[6] = s.segment();
    values[7] = settles;
    return RowFactory.create(values);
  }
}
