package io.kappa.operators;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Supplier;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.junit.jupiter.api.Test;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The processors find their input columns by name, once, from the schema the query gives them: the same rows
 * in another column order give the same output. Runs without a SparkSession: only Spark's Row and type
 * classes (spark-sql-api), fed to a processor's {@code handle}, the part of handleInputRows around the state
 * store. G = 10 and A = 100 for sessions, L = 50 and D = 10 for the as-of join.
 */
class ColumnsByNameTest {

  private static StructType reversed(StructType schema) {
    List<StructField> fields = new ArrayList<>(Arrays.asList(schema.fields()));
    Collections.reverse(fields);
    return DataTypes.createStructType(fields);
  }

  /** A row of {@code schema} from values by column name (absent: null). */
  private static Row row(StructType schema, Map<String, Object> values) {
    Object[] cells = new Object[schema.size()];
    values.forEach((name, value) -> cells[schema.fieldIndex(name)] = value);
    return RowFactory.create(cells);
  }

  private static Map<String, Object> values(Object... namesAndValues) {
    Map<String, Object> m = new HashMap<>();
    for (int i = 0; i < namesAndValues.length; i += 2) {
      m.put((String) namesAndValues[i], namesAndValues[i + 1]);
    }
    return m;
  }

  /** An output row as name=value text, arrays spelled out. */
  private static List<String> plain(StructType output, List<Row> rows) {
    List<String> out = new ArrayList<>();
    for (Row r : rows) {
      List<String> cells = new ArrayList<>();
      for (int i = 0; i < output.size(); i++) {
        Object v = r.get(i);
        if (v == null) {
          continue;
        }
        String text =
            v instanceof byte[] b ? Arrays.toString(b) : v instanceof Object[] a ? Arrays.toString(a) : v.toString();
        cells.add(output.fields()[i].name() + "=" + text);
      }
      out.add(String.join(" ", cells));
    }
    return out;
  }

  /** What a processor's {@code handle} gave for one key's rows: the new state and the rows out, as text. */
  private record Batch(byte[] state, List<String> out) {}

  private static Batch handle(
      KeyedRuleProcessor processor, StructType output, String key, List<Row> rows, Supplier<byte[]> stored) {
    List<Row> out = new ArrayList<>();
    byte[] state = processor.handle(key, rows.iterator(), stored, out);
    return new Batch(state, plain(output, out));
  }

  // ---- sessions

  private static SessionsProcessor sessionsProcessor(StructType schema) {
    MapStore store = new MapStore();
    return new SessionsProcessor(schema, 10, 100, "late_event").useStores(new MapBytesByLong(), store, store);
  }

  private static List<Row> clicks(StructType schema) {
    return List.of(
        row(schema, values("key", "u", "kafka_topic", "clicks", "kafka_partition", 0, "kafka_offset", 5L,
            "raw_value", new byte[] {1}, "event_id", "e1", "event_time_ms", 100L, "page", "/a", "segment", "GOLD")),
        row(schema, values("side_kind", "broken", "side_message", "bad avro", "side_value", new byte[] {9},
            "side_topic", "clicks", "side_partition", 0, "side_offset", 9L, "side_timestamp_us", 123L)),
        row(schema, values("key", "u", "kafka_topic", "clicks", "kafka_partition", 0, "kafka_offset", 7L,
            "raw_value", new byte[] {3}, "event_id", "e3", "event_time_ms", -1000L, "page", "/c", "segment", "X")),
        row(schema, values("key", "u", "kafka_topic", "clicks", "kafka_partition", 0, "kafka_offset", 3L,
            "raw_value", new byte[] {2}, "event_id", "e2", "event_time_ms", 105L, "page", "/b", "segment", "SILVER")));
  }

  private static List<String> sessions(StructType schema) {
    Batch batch = handle(sessionsProcessor(schema), Sessions.OUTPUT, "u", clicks(schema), () -> null);
    assertTrue(batch.state().length > 0);
    return batch.out();
  }

  @Test
  void theSessionsOperatorReadsItsColumnsByName() {
    List<String> expected =
        List.of(
            // the dead letter passes through with its side values
            "side_kind=broken side_message=bad avro side_value=[9] side_topic=clicks side_partition=0 side_offset=9"
                + " side_timestamp_us=123",
            // log order: e2 (offset 3) opens the session, e1 (offset 5, 5 earlier) joins it as its entry
            "kind=upsert session_id=u:e2 key=u start_ms=100 end_ms=105 clicks=2 distinct_pages=2 entry_page=/a"
                + " exit_page=/b segment=GOLD",
            // e3 is more than A behind 105: late, with its own bytes and position
            "kind=late session_id= key=u side_kind=late_event side_value=[3] side_topic=clicks side_partition=0"
                + " side_offset=7");
    assertEquals(expected, sessions(Sessions.INPUT));
    assertEquals(expected, sessions(reversed(Sessions.INPUT)));
  }

  @Test
  void aBatchOfDeadLettersOnlyNeitherReadsNorWritesTheState() {
    StructType schema = reversed(Sessions.INPUT);
    Row dead = row(schema, values("side_kind", "broken", "side_offset", 1L));
    Batch batch =
        handle(sessionsProcessor(schema), Sessions.OUTPUT, null, List.of(dead),
            () -> { throw new AssertionError("state read"); });
    assertNull(batch.state());
    assertEquals(List.of("side_kind=broken side_offset=1"), batch.out());
  }

  // ---- as-of join

  private static scala.collection.Seq<String> seq(String... values) {
    return CollectionConverters.asScala(Arrays.asList(values)).toSeq();
  }

  /** A partition's stores in maps: each key's state value, and its held events in a MapStore of its own. */
  private static final class PartitionMaps implements AsOfJoinProcessor.Stores {
    final Map<String, byte[]> states = new HashMap<>();
    final Map<String, MapStore> held = new HashMap<>();

    @Override
    public byte[] state(String key) {
      return states.get(key);
    }

    @Override
    public void putState(String key, byte[] value) {
      states.put(key, value);
    }

    @Override
    public BytesByLong buckets(String key) {
      return held.computeIfAbsent(key, k -> new MapStore());
    }

    @Override
    public LongById index(String key) {
      return held.computeIfAbsent(key, k -> new MapStore());
    }
  }

  private static Row click(StructType schema, String user, long offset, String id, long time) {
    return row(schema, values("key", user, "is_entity", false, "kafka_topic", "clicks", "kafka_partition", 1,
        "kafka_offset", offset, "event_id", id, "event_time_ms", time, "payload", seq("/p", null)));
  }

  private static List<String> asOf(StructType schema) {
    // Partition 1 of both topics: the version (offset 8 of profiles) reaches the rule before u's clicks; the
    // clock runs over the clicks in offset order whatever the rows' order, and the first emissions leave in it
    // (v's and u's interleaved, not user by user).
    List<Row> first =
        List.of(
            click(schema, "u", 4, "c", 50),
            row(schema, values("key", "u", "is_entity", true, "kafka_topic", "profiles", "kafka_partition", 1,
                "kafka_offset", 8L, "raw_value", new byte[] {7}, "entity_version", 1L, "valid_from_ms", 0L,
                "published_ms", 0L, "payload", seq("GOLD"))),
            click(schema, "u", 6, "g", 80),
            click(schema, "v", 5, "f", 40),
            click(schema, "v", 3, "d", 70));
    PartitionMaps stores = new PartitionMaps();
    AsOfJoinProcessor processor = new AsOfJoinProcessor(schema, 50, 10, "late_profile");
    List<Row> out = new ArrayList<>();
    Long clock = processor.handle(1, first.iterator(), null, stores, out);
    assertEquals(80L, clock);
    AsOfRule.State state = AsOfRule.deserialize(stores.states.get("u"));
    assertEquals(1, state.versions.size());
    assertArrayEquals(new String[] {"GOLD"}, state.versions.get(0).payload());
    // the next batch goes on from the clock
    assertEquals(80L, processor.handle(1, List.of(click(schema, "u", 7, "e", 60)).iterator(), clock, stores, out));
    return plain(AsOfJoin.OUTPUT, out);
  }

  @Test
  void theAsOfOperatorReadsItsColumnsByName() {
    String gold = " entity_version=1 event_payload=[/p, null] entity_payload=[GOLD] partition=1";
    List<String> expected =
        List.of(
            "kind=event key=v event_id=d event_time_ms=70 event_payload=[/p, null] partition=1",
            "kind=event key=u event_id=c event_time_ms=50" + gold + " stamp_ms=70",
            "kind=event key=v event_id=f event_time_ms=40 event_payload=[/p, null] partition=1 stamp_ms=70",
            "kind=event key=u event_id=g event_time_ms=80" + gold + " stamp_ms=70",
            "kind=event key=u event_id=e event_time_ms=60" + gold + " stamp_ms=80");
    assertEquals(expected, asOf(AsOfJoin.INPUT));
    assertEquals(expected, asOf(reversed(AsOfJoin.INPUT)));
  }

  // ---- the check of an input's schema

  @Test
  void anInputInAnyOrderPassesTheCheck() {
    for (StructType input : List.of(AsOfJoin.INPUT, Sessions.INPUT, PageStats.CLICKS, UserActivity.SESSIONS)) {
      SideRows.check("op", input, reversed(input));
      SideRows.check("op", input, input);
    }
  }

  @Test
  void aMissingMistypedUnexpectedOrRepeatedColumnIsNamed() {
    List<StructField> fields = new ArrayList<>(Arrays.asList(Sessions.INPUT.fields()));
    fields.removeIf(f -> f.name().equals("page"));
    fields.replaceAll(f -> f.name().equals("kafka_offset") ? SideRows.field("kafka_offset", DataTypes.IntegerType) : f);
    fields.add(SideRows.field("extra", DataTypes.StringType));
    fields.add(SideRows.field("segment", DataTypes.StringType));
    IllegalArgumentException e =
        assertThrows(
            IllegalArgumentException.class,
            // new StructType: DataTypes.createStructType refuses repeated names, a Dataset's schema may have them
            () -> SideRows.check("sessions", Sessions.INPUT, new StructType(fields.toArray(new StructField[0]))));
    String message = e.getMessage();
    assertTrue(message.startsWith("sessions's input must be "), message);
    assertTrue(message.contains("no column page"), message);
    assertTrue(message.contains("kafka_offset is int, not bigint"), message);
    assertTrue(message.contains("an unexpected column extra"), message);
    assertTrue(message.contains("two columns segment"), message);
  }

  @Test
  void nullabilityIsNotPartOfTheCheck() {
    List<StructField> fields = new ArrayList<>();
    for (StructField f : Sessions.INPUT.fields()) {
      fields.add(DataTypes.createStructField(f.name(), f.dataType(), false));
    }
    SideRows.check("sessions", Sessions.INPUT, DataTypes.createStructType(fields));
  }
}
