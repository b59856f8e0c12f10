package io.kappa.operators;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.streaming.StatefulProcessorHandle;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.types.StructType;

/** Spark's side of sessionization: one key's rows of a batch, in log order, through {@link SessionRule}. */
final class SessionsProcessor extends KeyedRuleProcessor {
  private static final long serialVersionUID = 1L;

  private static final int SIDE_OUT = Sessions.OUTPUT.fieldIndex("side_kind");

  // Positions of the rule's columns in the input (Sessions.INPUT's, in the order the query gives them).
  private final int eventId, eventTime, page, segment;
  private final long gapMs;
  private final long latenessMs;
  private final String lateKind;
  // The key's sessions' event ids beside its state value, in buckets; and where a format-2 value kept them, an
  // index by id and lists by minute (declared still, so that its upgrade can move them: SessionRule.upgrade).
  private transient BytesByLong idBuckets;
  private transient BytesByLong formerIdsByMinute;
  private transient LongById formerIdIndex;

  SessionsProcessor(StructType input, long gapMs, long latenessMs, String lateKind) {
    super(input, Sessions.OUTPUT.size(), SIDE_OUT);
    eventId = input.fieldIndex("event_id");
    eventTime = input.fieldIndex("event_time_ms");
    page = input.fieldIndex("page");
    segment = input.fieldIndex("segment");
    this.gapMs = gapMs;
    this.latenessMs = latenessMs;
    this.lateKind = lateKind;
  }

  @Override
  void initMore(StatefulProcessorHandle handle) {
    useStores(
        BytesByLong.of(handle.getMapState("idBuckets", Encoders.LONG(), Encoders.BINARY(), TTLConfig.NONE())),
        BytesByLong.of(handle.getMapState("ids", Encoders.LONG(), Encoders.BINARY(), TTLConfig.NONE())),
        LongById.of(handle.getMapState("idIndex", Encoders.STRING(), Encoders.LONG(), TTLConfig.NONE())));
  }

  /** Where the key's event ids are kept: Spark's state variables (initMore), or a test's maps. */
  SessionsProcessor useStores(BytesByLong idBuckets, BytesByLong formerIdsByMinute, LongById formerIdIndex) {
    this.idBuckets = idBuckets;
    this.formerIdsByMinute = formerIdsByMinute;
    this.formerIdIndex = formerIdIndex;
    return this;
  }

  @Override
  byte[] apply(String key, byte[] stored, List<Row> rows, List<Row> out) {
    List<SessionRule.Event> events = new ArrayList<>(rows.size());
    for (Row r : rows) {
      events.add(
          new SessionRule.Event(
              r.getString(eventId), r.getLong(eventTime), r.getString(page), r.getString(segment)));
    }
    SessionRule.State current = new SessionRule.State();
    if (stored != null) {
      SessionRule.Stored read = SessionRule.deserialize(stored);
      current = read.state();
      // an earlier layout's, once
      SessionRule.upgrade(read, formerIdsByMinute, formerIdIndex, idBuckets, gapMs, latenessMs);
    }
    SessionRule.Changes changes =
        SessionRule.apply(key, current, idBuckets, events, gapMs, latenessMs);
    for (SessionRule.Session s : changes.upserts()) {
      out.add(session("upsert", key, s));
    }
    for (String id : changes.retractions()) {
      Object[] values = new Object[Sessions.OUTPUT.size()];
      values[0] = "retract";
      values[1] = id;
      values[2] = key;
      out.add(RowFactory.create(values));
    }
    for (SessionRule.Session s : changes.finals()) {
      out.add(session("final", key, s));
    }
    Set<String> late = new HashSet<>();
    for (SessionRule.Event e : changes.late()) {
      late.add(e.id());
    }
    for (Row r : rows) { // every row of a late event, in log order
      if (!late.contains(r.getString(eventId))) {
        continue;
      }
      Object[] values = new Object[Sessions.OUTPUT.size()];
      values[0] = "late";
      values[1] = "";
      values[2] = key;
      markLate(values, lateKind, r);
      out.add(RowFactory.create(values));
    }
    return SessionRule.serialize(current);
  }

  private static Row session(String kind, String key, SessionRule.Session s) {
    Object[] values = new Object[Sessions.OUTPUT.size()];
    values[0] = kind;
    values[1] = s.sessionId;
    values[2] = key;
    values[3] = s.startMs;
    values[4] = s.endMs;
    values[5] = s.clicks;
    values[6] = s.pages.size();
    values[7] = s.entryPage;
    values[8] = s.exitPage;
    values[9] = s.segment;
    return RowFactory.create(values);
  }
}
