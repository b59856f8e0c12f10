package io.kappa.operators;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;

/** Spark's side of the as-of join: one key's rows of a batch, in log order, through {@link AsOfRule}. */
final class AsOfJoinProcessor extends KeyedRuleProcessor {
  private static final long serialVersionUID = 1L;

  // Positions in AsOfJoin.INPUT and AsOfJoin.OUTPUT.
  private static final int IS_ENTITY = 1, TOPIC = 2, PARTITION = 3, OFFSET = 4, RAW = 5;
  private static final int EVENT_ID = 6, EVENT_TIME = 7, VERSION = 8, VALID_FROM = 9, PUBLISHED = 10;
  private static final int PAYLOAD = 11, SIDE_IN = 12, SIDE_OUT = 7;

  private final long latenessMs;
  private final long disorderMs;
  private final String lateKind;

  AsOfJoinProcessor(long latenessMs, long disorderMs, String lateKind) {
    super(PARTITION, OFFSET, SIDE_IN, AsOfJoin.OUTPUT.size(), SIDE_OUT);
    this.latenessMs = latenessMs;
    this.disorderMs = disorderMs;
    this.lateKind = lateKind;
  }

  @Override
  byte[] apply(String key, byte[] stored, List<Row> rows, List<Row> out) {
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
    AsOfRule.State current = stored != null ? AsOfRule.deserialize(stored) : new AsOfRule.State();
    AsOfRule.Changes changes = AsOfRule.apply(current, versions, events, latenessMs, disorderMs);
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
    return AsOfRule.serialize(current);
  }

  private static String[] payload(Row r) {
    List<String> values = r.getList(PAYLOAD);
    return values.toArray(new String[0]);
  }
}
