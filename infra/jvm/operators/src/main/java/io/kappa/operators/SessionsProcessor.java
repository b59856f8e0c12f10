package io.kappa.operators;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;

/** Spark's side of sessionization: one key's rows of a batch, in log order, through {@link SessionRule}. */
final class SessionsProcessor extends KeyedRuleProcessor {
  private static final long serialVersionUID = 1L;

  // Positions in Sessions.INPUT and Sessions.OUTPUT.
  private static final int TOPIC = 1, PARTITION = 2, OFFSET = 3, RAW = 4, EVENT_ID = 5, EVENT_TIME = 6;
  private static final int PAGE = 7, SEGMENT = 8, SIDE_IN = 9, SIDE_OUT = 10;

  private final long gapMs;
  private final long latenessMs;
  private final String lateKind;

  SessionsProcessor(long gapMs, long latenessMs, String lateKind) {
    super(PARTITION, OFFSET, SIDE_IN, Sessions.OUTPUT.size(), SIDE_OUT);
    this.gapMs = gapMs;
    this.latenessMs = latenessMs;
    this.lateKind = lateKind;
  }

  @Override
  byte[] apply(String key, byte[] stored, List<Row> rows, List<Row> out) {
    List<SessionRule.Event> events = new ArrayList<>(rows.size());
    for (Row r : rows) {
      events.add(
          new SessionRule.Event(
              r.getString(EVENT_ID), r.getLong(EVENT_TIME), r.getString(PAGE), r.getString(SEGMENT)));
    }
    SessionRule.State current =
        stored != null ? SessionRule.deserialize(stored) : new SessionRule.State();
    SessionRule.Changes changes = SessionRule.apply(key, current, events, gapMs, latenessMs);
    for (SessionRule.Session s : changes.upserts()) {
      Object[] values = new Object[Sessions.OUTPUT.size()];
      values[0] = "upsert";
      values[1] = s.sessionId;
      values[2] = key;
      values[3] = s.startMs;
      values[4] = s.endMs;
      values[5] = s.clicks;
      values[6] = s.pages.size();
      values[7] = s.entryPage;
      values[8] = s.exitPage;
      values[9] = s.segment;
      out.add(RowFactory.create(values));
    }
    for (String id : changes.retractions()) {
      Object[] values = new Object[Sessions.OUTPUT.size()];
      values[0] = "retract";
      values[1] = id;
      values[2] = key;
      out.add(RowFactory.create(values));
    }
    Set<String> late = new HashSet<>();
    for (SessionRule.Event e : changes.late()) {
      late.add(e.id());
    }
    for (Row r : rows) { // every row of a late event, in log order
      if (!late.contains(r.getString(EVENT_ID))) {
        continue;
      }
      Object[] values = new Object[Sessions.OUTPUT.size()];
      values[0] = "late";
      values[1] = "";
      values[2] = key;
      SideRows.late(values, SIDE_OUT, lateKind, r.get(RAW), r.getString(TOPIC), r.getInt(PARTITION), r.getLong(OFFSET));
      out.add(RowFactory.create(values));
    }
    return SessionRule.serialize(current);
  }
}
