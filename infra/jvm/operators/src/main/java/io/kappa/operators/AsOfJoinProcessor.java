package io.kappa.operators;

import java.util.ArrayList;
import java.util.Comparator;
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
 * each event with the clock just before it: a function of the log, the same in every run. The stamp rides
 * with the event through the rule (the last string of its payload), so a re-emission keeps its event's stamp.
 * The events' first emissions leave in offset order (docs/bounded_view_state.md).
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

  /**
   * A ruled row, as little of it as the rule needs: a partition's whole batch is held at once (250,000 clicks
   * in a replay), so an event keeps its fields, not its Row; a version keeps its Row (its bytes, if it is late).
   */
  private static final class Item {
    final long offset;
    final String key;
    final AsOfRule.Event event; // null for a version
    final Row version; // null for an event
    int slot; // an event's place among the batch's clicks in offset order: where its first emission goes

    Item(long offset, String key, AsOfRule.Event event, Row version) {
      this.offset = offset;
      this.key = key;
      this.event = event;
      this.version = version;
    }
  }

  /**
   * One partition's rows of a batch: dead letters pass through to {@code out}, the others go through the rule
   * key by key, in log order. {@code start} is the partition's clock before the batch; returns it after.
   */
  Long handle(int partition, Iterator<Row> rows, Long start, Stores stores, List<Row> out) {
    List<Item> items = new ArrayList<>();
    while (rows.hasNext()) {
      Row r = rows.next();
      if (common.isSetAside(r)) {
        out.add(common.passThrough(r, WIDTH, SIDE_OUT));
      } else if (r.getBoolean(isEntity)) {
        items.add(new Item(common.offset(r), r.getString(key), null, r));
      } else {
        String[] payload = payload(r, 1); // its last string: the stamp, set below
        AsOfRule.Event e = new AsOfRule.Event(r.getString(eventId), r.getLong(eventTime), payload);
        items.add(new Item(common.offset(r), r.getString(key), e, null));
      }
    }
    // One partition of each topic: log order is offset order (stable: rows at the same offset keep Spark's order,
    // as numpy's lexsort does; a click and a version at equal offsets go to separate lists of the rule).
    items.sort(Comparator.comparingLong(item -> item.offset));
    Long latest = start;
    int clicks = 0;
    Map<String, List<Item>> byKey = new LinkedHashMap<>(); // keys in their first row's order
    for (Item item : items) {
      if (item.event != null) {
        String[] payload = item.event.payload();
        payload[payload.length - 1] = latest == null ? null : Long.toString(latest);
        latest = latest == null ? item.event.timeMs() : Math.max(latest, item.event.timeMs());
        item.slot = clicks++;
      }
      byKey.computeIfAbsent(item.key, k -> new ArrayList<>()).add(item);
    }
    Emitted emitted = new Emitted(clicks);
    for (Map.Entry<String, List<Item>> e : byKey.entrySet()) {
      String k = e.getKey();
      stores.putState(k, apply(partition, k, stores.state(k), e.getValue(), stores, emitted));
    }
    // Each click's first emission in the partition's offset order (a task writes its partitions' rows in order,
    // so along an output partition fed by one input partition the stamps never decrease: what lets a reader
    // settle by the largest stamp seen), then the re-emissions and late versions, each key's in the rule's order.
    for (Row first : emitted.firsts) {
      if (first == null) { // AsOfRule emits every new click once: a click left without its row would be lost
        throw new IllegalStateException("the as-of rule emitted no row for a click of partition " + partition);
      }
      out.add(first);
    }
    out.addAll(emitted.again);
    out.addAll(emitted.late);
    return latest;
  }

  /** A batch's output rows by kind, until they are put in order. */
  private static final class Emitted {
    final Row[] firsts; // by the click's slot: offset order
    final List<Row> again = new ArrayList<>();
    final List<Row> late = new ArrayList<>();

    Emitted(int clicks) {
      firsts = new Row[clicks];
    }
  }

  private byte[] apply(int partition, String k, byte[] stored, List<Item> items, Stores stores, Emitted emitted) {
    List<AsOfRule.Version> versions = new ArrayList<>();
    Map<Long, Row> firstRowOf = new HashMap<>();
    List<AsOfRule.Event> events = new ArrayList<>();
    List<Integer> slots = new ArrayList<>();
    for (Item item : items) {
      if (item.event != null) {
        events.add(item.event);
        slots.add(item.slot);
      } else {
        Row r = item.version;
        long v = r.getLong(version);
        versions.add(new AsOfRule.Version(v, r.getLong(validFrom), r.getLong(published), payload(r, 0)));
        firstRowOf.putIfAbsent(v, r);
      }
    }
    AsOfRule.State current = stored == null ? new AsOfRule.State() : AsOfRule.deserialize(stored);
    AsOfRule.Changes changes =
        AsOfRule.apply(current, stores.buckets(k), stores.index(k), versions, events, latenessMs, disorderMs);
    List<AsOfRule.Answer> answers = changes.emit(); // the new events first, one each, in their order
    for (int i = 0; i < answers.size(); i++) {
      AsOfRule.Answer a = answers.get(i);
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
      Row row = RowFactory.create(values);
      if (i < events.size()) {
        emitted.firsts[slots.get(i)] = row;
      } else {
        emitted.again.add(row);
      }
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
      emitted.late.add(RowFactory.create(values));
    }
    return AsOfRule.serialize(current);
  }

  /** The row's payload strings, with {@code extra} more slots at the end (an event's stamp, so that the rule's
   * held events keep it). */
  private String[] payload(Row r, int extra) {
    List<String> values = r.getList(payload);
    String[] strings = new String[values.size() + extra];
    for (int i = 0; i < values.size(); i++) {
      strings[i] = values.get(i);
    }
    return strings;
  }
}
