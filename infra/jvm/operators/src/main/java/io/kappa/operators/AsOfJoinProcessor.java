package io.kappa.operators;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
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

/** Spark's side of the as-of join: one key's rows of a batch, in log order, through {@link AsOfRule}. */
final class AsOfJoinProcessor extends StatefulProcessor<String, Row, Row> {
  private static final long serialVersionUID = 1L;

  // Positions in AsOfJoin.INPUT and AsOfJoin.OUTPUT.
  private static final int IS_ENTITY = 1, TOPIC = 2, PARTITION = 3, OFFSET = 4, RAW = 5;
  private static final int EVENT_ID = 6, EVENT_TIME = 7, VERSION = 8, VALID_FROM = 9, PUBLISHED = 10;
  private static final int PAYLOAD = 11, SIDE_IN = 12, SIDE_OUT = 7;
  private static final Comparator<Row> LOG_ORDER =
      Comparator.<Row>comparingInt(r -> r.getInt(PARTITION)).thenComparingLong(r -> r.getLong(OFFSET));

  private final long latenessMs;
  private final long disorderMs;
  private final String lateKind;
  private transient ValueState<byte[]> state;

  AsOfJoinProcessor(long latenessMs, long disorderMs, String lateKind) {
    this.latenessMs = latenessMs;
    this.disorderMs = disorderMs;
    this.lateKind = lateKind;
  }

  @Override
  public void init(OutputMode outputMode, TimeMode timeMode) {
    state = getHandle().getValueState("as_of", Encoders.BINARY(), TTLConfig.NONE());
  }

  @Override
  public scala.collection.Iterator<Row> handleInputRows(
      String key, scala.collection.Iterator<Row> rows, TimerValues timerValues) {
    List<Row> out = new ArrayList<>();
    List<Row> ruled = new ArrayList<>();
    while (rows.hasNext()) {
      Row row = rows.next();
      if (row.isNullAt(SIDE_IN)) {
        ruled.add(row);
      } else {
        // a dead letter of an input (only the null key has them)
        out.add(SideRows.passThrough(row, SIDE_IN, AsOfJoin.OUTPUT.size(), SIDE_OUT));
      }
    }
    if (!ruled.isEmpty()) {
      apply(key, ruled, out);
    }
    return CollectionConverters.asScala(out.iterator());
  }

  private void apply(String key, List<Row> rows, List<Row> out) {
    rows.sort(LOG_ORDER); // stable: rows at the same position keep Spark's order, as numpy's lexsort does
    List<AsOfRule.Version> versions = new ArrayList<>();
    Map<Long, Row> firstRowOf = new HashMap<>();
    List<AsOfRule.Event> events = new ArrayList<>();
    for (Row r : rows) {
      if (r.getBoolean(IS_ENTITY)) {
        long version = r.getLong(VERSION);
        versions.add(
            new AsOfRule.Version(version, r.getLong(VALID_FROM), r.getLong(PUBLISHED), payload(r)));
        firstRowOf.putIfAbsent(version, r);
      } else {
        events.add(new AsOfRule.Event(r.getString(EVENT_ID), r.getLong(EVENT_TIME), payload(r)));
      }
    }
    AsOfRule.State current = state.exists() ? AsOfRule.deserialize(state.get()) : new AsOfRule.State();
    AsOfRule.Changes changes = AsOfRule.apply(current, versions, events, latenessMs, disorderMs);
    state.update(AsOfRule.serialize(current));
    for (AsOfRule.Answer a : changes.emit()) {
      AsOfRule.Version v = a.version();
      Object[] values = new Object[AsOfJoin.OUTPUT.size()];
      values[0] = "event";
      values[1] = key;
      values[2] = a.event().id();
      values[3] = a.event().timeMs();
      values[4] = v == null ? null : v.version();
      values[5] = a.event().payload();
      values[6] = v == null ? null : v.payload();
      out.add(RowFactory.create(values));
    }
    Set<Long> late = new HashSet<>();
    for (AsOfRule.Version v : changes.late()) {
      late.add(v.version());
    }
    for (AsOfRule.Version v : versions) { // in log order, once per version, from its first row
      if (!late.remove(v.version())) {
        continue;
      }
      Row r = firstRowOf.get(v.version());
      Object[] values = new Object[AsOfJoin.OUTPUT.size()];
      values[0] = "late";
      values[1] = key;
      SideRows.late(values, SIDE_OUT, lateKind, r.get(RAW), r.getString(TOPIC), r.getInt(PARTITION), r.getLong(OFFSET));
      out.add(RowFactory.create(values));
    }
  }

  private static String[] payload(Row r) {
    List<String> values = r.getList(PAYLOAD);
    return values.toArray(new String[0]);
  }
}
