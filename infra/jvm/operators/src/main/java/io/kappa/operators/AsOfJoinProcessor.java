package io.kappa.operators;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.streaming.MapState;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.StatefulProcessor;
import org.apache.spark.sql.streaming.StatefulProcessorHandle;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.streaming.TimerValues;
import org.apache.spark.sql.streaming.ValueState;
import org.apache.spark.sql.types.StructType;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Spark's side of the as-of join, keyed by Kafka partition (Samza's layout): one partition's rows of a batch,
 * in log order. Each key's (user's) rows go through {@link AsOfRule} with the key's state, kept under the
 * partition; the partition's clock (the latest event time among its events so far, in offset order) stamps
 * each event with the clock just before it, and each event emitted with the clock at the batch's start.
 *
 * <p>The stamp rides with the event through the rule (the last string of its payload), so a re-emission keeps
 * its event's stamp. The clock is a function of the log, the same in every run; the batch's start is not, and
 * may only free state downstream (docs/bounded_view_state.md).
 */
final class AsOfJoinProcessor extends StatefulProcessor<Integer, Row, Row> {
  private static final long serialVersionUID = 1L;

  private static final int SIDE_OUT = AsOfJoin.OUTPUT.fieldIndex("side_kind");
  private static final int WIDTH = AsOfJoin.OUTPUT.size();

  private final SideRows.Columns common;
  // Positions of the rule's columns in the input (AsOfJoin.INPUT's, in the order the query gives them).
  private final int key, isEntity, eventId, eventTime, version, validFrom, published, payload;
  private final long latenessMs;
  private final long disorderMs;
  private final String lateKind;
  private transient ValueState<Long> clock;
  private transient Stores stores;

  /** A partition's state beside its clock: each key's rule state, held events and their index. */
  interface Stores {
    byte[] state(String key); // null for a key seen the first time

    void putState(String key, byte[] value);

    BytesByLong buckets(String key);

    LongById index(String key);
  }

  AsOfJoinProcessor(StructType input, long latenessMs, long disorderMs, String lateKind) {
    common = new SideRows.Columns(input);
    key = input.fieldIndex("key");
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
  public void init(OutputMode outputMode, TimeMode timeMode) {
    StatefulProcessorHandle handle = getHandle();
    clock = handle.getValueState("clock", Encoders.LONG(), TTLConfig.NONE());
    MapState<String, byte[]> states = handle.getMapState("states", Encoders.STRING(), Encoders.BINARY(), TTLConfig.NONE());
    MapState<String, byte[]> held = handle.getMapState("held", Encoders.STRING(), Encoders.BINARY(), TTLConfig.NONE());
    MapState<String, Long> heldIndex = handle.getMapState("heldIndex", Encoders.STRING(), Encoders.LONG(), TTLConfig.NONE());
    stores =
        new Stores() {
          @Override
          public byte[] state(String key) {
            return states.getValue(key);
          }

          @Override
          public void putState(String key, byte[] value) {
            states.updateValue(key, value);
          }

          @Override
          public BytesByLong buckets(String key) {
            return BytesByLong.under(held, key);
          }

          @Override
          public LongById index(String key) {
            return LongById.under(heldIndex, key);
          }
        };
  }

  @Override
  public scala.collection.Iterator<Row> handleInputRows(
      Integer key, scala.collection.Iterator<Row> rows, TimerValues timerValues) {
    List<Row> out = new ArrayList<>();
    Long start = clock.exists() ? clock.get() : null;
    Long end = handle(AsOfJoin.partitionOf(key), CollectionConverters.asJava(rows), start, stores, out);
    if (end != null && !end.equals(start)) {
      clock.update(end);
    }
    return CollectionConverters.asScala(out.iterator());
  }

  /** An event row and the partition's clock just before it (null: the partition's first event). */
  private record Stamped(Row row, Long stampMs) {}

  /**
   * One partition's rows of a batch: dead letters pass through to {@code out}, the others go through the rule
   * key by key, in log order. {@code start} is the partition's clock before the batch; returns it after.
   */
  Long handle(int partition, Iterator<Row> rows, Long start, Stores stores, List<Row> out) {
    List<Row> ruled = common.ruled(rows, out, WIDTH, SIDE_OUT);
    // stable: rows at the same position keep Spark's order, as numpy's lexsort does
    ruled.sort(common::compareInLog);
    Long latest = start;
    Map<String, List<Stamped>> byKey = new LinkedHashMap<>(); // keys in their first row's order
    for (Row r : ruled) {
      Long stamp = null;
      if (!r.getBoolean(isEntity)) {
        stamp = latest;
        long t = r.getLong(eventTime);
        latest = latest == null ? t : Math.max(latest, t);
      }
      byKey.computeIfAbsent(r.getString(key), k -> new ArrayList<>()).add(new Stamped(r, stamp));
    }
    for (Map.Entry<String, List<Stamped>> e : byKey.entrySet()) {
      String k = e.getKey();
      stores.putState(k, apply(partition, k, stores.state(k), e.getValue(), start, stores, out));
    }
    return latest;
  }

  private byte[] apply(
      int partition, String k, byte[] stored, List<Stamped> rows, Long start, Stores stores, List<Row> out) {
    List<AsOfRule.Version> versions = new ArrayList<>();
    Map<Long, Row> firstRowOf = new HashMap<>();
    List<AsOfRule.Event> events = new ArrayList<>();
    for (Stamped s : rows) {
      Row r = s.row();
      if (r.getBoolean(isEntity)) {
        long v = r.getLong(version);
        versions.add(new AsOfRule.Version(v, r.getLong(validFrom), r.getLong(published), payload(r, false, null)));
        firstRowOf.putIfAbsent(v, r);
      } else {
        events.add(new AsOfRule.Event(r.getString(eventId), r.getLong(eventTime), payload(r, true, s.stampMs())));
      }
    }
    AsOfRule.State current = stored == null ? new AsOfRule.State() : AsOfRule.deserialize(stored).state();
    AsOfRule.Changes changes =
        AsOfRule.apply(current, stores.buckets(k), stores.index(k), versions, events, latenessMs, disorderMs);
    for (AsOfRule.Answer a : changes.emit()) {
      AsOfRule.Version v = a.version();
      String[] stamped = a.event().payload();
      String stamp = stamped[stamped.length - 1];
      Object[] values = new Object[WIDTH];
      values[0] = "event";
      values[1] = k;
      values[2] = a.event().id();
      values[3] = a.event().timeMs();
      values[4] = v == null ? null : v.version();
      values[5] = java.util.Arrays.copyOf(stamped, stamped.length - 1);
      values[6] = v == null ? null : v.payload();
      values[7] = partition;
      values[8] = stamp == null ? null : Long.parseLong(stamp);
      values[9] = start;
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
      Object[] values = new Object[WIDTH];
      values[0] = "late";
      values[1] = k;
      common.late(values, SIDE_OUT, lateKind, firstRowOf.get(v.version()));
      out.add(RowFactory.create(values));
    }
    return AsOfRule.serialize(current);
  }

  /** The row's payload strings; an event's end with its stamp (so that the rule's held events keep it). */
  private String[] payload(Row r, boolean stamped, Long stampMs) {
    List<String> values = new ArrayList<>(r.<String>getList(payload));
    if (stamped) {
      values.add(stampMs == null ? null : Long.toString(stampMs));
    }
    return values.toArray(new String[0]);
  }
}
