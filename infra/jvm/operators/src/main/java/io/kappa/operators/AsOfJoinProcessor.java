package io.kappa.operators;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.streaming.StatefulProcessorHandle;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.types.StructType;

/** Spark's side of the as-of join: one key's rows of a batch, in log order, through {@link AsOfRule}. */
final class AsOfJoinProcessor extends KeyedRuleProcessor {
  private static final long serialVersionUID = 1L;

  private static final int SIDE_OUT = AsOfJoin.OUTPUT.fieldIndex("side_kind");

  // Positions of the rule's columns in the input (AsOfJoin.INPUT's, in the order the query gives them).
  private final int isEntity, eventId, eventTime, version, validFrom, published;
  private final int payload;
  private final long latenessMs;
  private final long disorderMs;
  private final String lateKind;
  // The key's held events beside its state value: by time bucket, and each event's bucket by its id.
  private transient BytesByLong buckets;
  private transient LongById index;

  AsOfJoinProcessor(StructType input, long latenessMs, long disorderMs, String lateKind) {
    super(input, AsOfJoin.OUTPUT.size(), SIDE_OUT);
    isEntity = input.fieldIndex("is_entity");
    eventId = input.fieldIndex("event_id");
    eventTime = input.fieldIndex("event_time_ms");
    version = input.fieldIndex("entity_version");
    validFrom = input.fieldIndex("valid_from_ms");
    published = input.fieldIndex("published_ms");
    payload = input.fieldIndex("payload");
    this.latenessMs = latenessMs;
    this.disorderMs = disorderMs;
    this.lateKind = lateKind;
  }

  @Override
  void initMore(StatefulProcessorHandle handle) {
    useStores(
        BytesByLong.of(handle.getMapState("held", Encoders.LONG(), Encoders.BINARY(), TTLConfig.NONE())),
        LongById.of(handle.getMapState("heldIndex", Encoders.STRING(), Encoders.LONG(), TTLConfig.NONE())));
  }

  /** Where the key's held events are kept: Spark's state variables (initMore), or a test's maps. */
  AsOfJoinProcessor useStores(BytesByLong buckets, LongById index) {
    this.buckets = buckets;
    this.index = index;
    return this;
  }

  @Override
  byte[] apply(String key, byte[] stored, List<Row> rows, List<Row> out) {
    List<AsOfRule.Version> versions = new ArrayList<>();
    Map<Long, Row> firstRowOf = new HashMap<>();
    List<AsOfRule.Event> events = new ArrayList<>();
    for (Row r : rows) {
      if (r.getBoolean(isEntity)) {
        long v = r.getLong(version);
        versions.add(new AsOfRule.Version(v, r.getLong(validFrom), r.getLong(published), payload(r)));
        firstRowOf.putIfAbsent(v, r);
      } else {
        events.add(new AsOfRule.Event(r.getString(eventId), r.getLong(eventTime), payload(r)));
      }
    }
    AsOfRule.State current = new AsOfRule.State();
    if (stored != null) {
      AsOfRule.Stored read = AsOfRule.deserialize(stored);
      current = read.state();
      AsOfRule.moveInline(current, read.inline(), buckets, index); // a first-layout value's events, once
    }
    AsOfRule.Changes changes = AsOfRule.apply(current, buckets, index, versions, events, latenessMs, disorderMs);
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
      Object[] values = new Object[AsOfJoin.OUTPUT.size()];
      values[0] = "late";
      values[1] = key;
      markLate(values, lateKind, firstRowOf.get(v.version()));
      out.add(RowFactory.create(values));
    }
    return AsOfRule.serialize(current);
  }

  private String[] payload(Row r) {
    List<String> values = r.getList(payload);
    return values.toArray(new String[0]);
  }
}
