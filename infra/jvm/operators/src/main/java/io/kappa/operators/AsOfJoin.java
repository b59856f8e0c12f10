package io.kappa.operators;

import java.util.List;
import org.apache.spark.api.java.function.MapFunction;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.hash.Murmur3_x86_32;

/**
 * The as-of join as a Spark operator: events joined per key with the entity version visible at their event
 * time, corrections re-emitted, late versions set aside (the rule: {@link AsOfRule}), each event stamped with
 * its partition's clock ({@link AsOfJoinProcessor}). Called from Python by
 * kappa.operators.as_of_join, which shapes the rows into {@link #INPUT} and back from {@link #OUTPUT}.
 *
 * <p>Rows whose {@code side_kind} is set (the inputs' dead letters) pass through unchanged, so a job's one
 * query carries them without a second read of its inputs.
 */
public final class AsOfJoin {
  private AsOfJoin() {}

  /** One row per event or entity version, in any order (the columns too); the log order is (kafka_partition, kafka_offset). */
  public static final StructType INPUT =
      SideRows.withSide(
          List.of(
              SideRows.field("key", DataTypes.StringType),
              SideRows.field("is_entity", DataTypes.BooleanType),
              SideRows.field("kafka_topic", DataTypes.StringType),
              SideRows.field("kafka_partition", DataTypes.IntegerType),
              SideRows.field("kafka_offset", DataTypes.LongType),
              SideRows.field("raw_value", DataTypes.BinaryType),
              SideRows.field("event_id", DataTypes.StringType),
              SideRows.field("event_time_ms", DataTypes.LongType),
              SideRows.field("entity_version", DataTypes.LongType),
              SideRows.field("valid_from_ms", DataTypes.LongType),
              SideRows.field("published_ms", DataTypes.LongType),
              SideRows.field("payload", DataTypes.createArrayType(DataTypes.StringType))));

  /** kind: "event" (an event with its answer; entity columns null when no version is visible), "late"
   * (a version set aside, in the side columns), or null (a dead letter passed through). An event also has its
   * Kafka partition and its stamp (the partition's latest event time just before it, in offset order: null for
   * the partition's first). A batch's rows leave with its events' first emissions in offset order. */
  public static final StructType OUTPUT =
      SideRows.withSide(
          List.of(
              SideRows.field("kind", DataTypes.StringType),
              SideRows.field("key", DataTypes.StringType),
              SideRows.field("event_id", DataTypes.StringType),
              SideRows.field("event_time_ms", DataTypes.LongType),
              SideRows.field("entity_version", DataTypes.LongType),
              SideRows.field("event_payload", DataTypes.createArrayType(DataTypes.StringType)),
              SideRows.field("entity_payload", DataTypes.createArrayType(DataTypes.StringType)),
              SideRows.field("partition", DataTypes.IntegerType),
              SideRows.field("stamp_ms", DataTypes.LongType)));

  private static final int SPREAD = 64; // the shuffle partition counts spread evenly: those dividing it
  private static final int[] SPREAD_KEYS = new int[1024];

  /**
   * The state key of Kafka partition {@code partition}: an int that Spark's hash partitioning (Murmur3, seed 42,
   * modulo the shuffle partitions) sends to shuffle partition {@code partition % n} for every n dividing 64,
   * so that a topic's few partitions spread evenly over the tasks (Spark's hash of the ints 0 to 3 sends three
   * of them to one of two tasks), as Flink's key groups do. A fixed function of the partition, so a checkpoint's
   * state keeps its keys: the first such int from {@code partition * 65536}, and {@link #partitionOf} inverts it.
   */
  public static int spreadKey(int partition) {
    if (partition < SPREAD_KEYS.length && SPREAD_KEYS[partition] != 0) {
      return SPREAD_KEYS[partition];
    }
    int first = partition << 16;
    for (int key = first; key < first + (1 << 16); key++) {
      if (Math.floorMod(Murmur3_x86_32.hashInt(key, 42), SPREAD) == partition % SPREAD) {
        if (partition < SPREAD_KEYS.length) {
          SPREAD_KEYS[partition] = key; // racing threads write the same value
        }
        return key;
      }
    }
    throw new IllegalStateException("no spread key for partition " + partition); // 65,536 misses: never
  }

  /** The Kafka partition of a {@link #spreadKey}. */
  public static int partitionOf(int key) {
    return key >>> 16;
  }

  /**
   * @param latenessMs L: how long after its valid-from a version may be published and still apply from it
   * @param disorderMs D: how far out of time order a key's events and versions may arrive
   * @param lateKind the side_kind of a late version (the dead-letter header)
   */
  public static Dataset<Row> apply(
      Dataset<Row> inputs, long latenessMs, long disorderMs, String lateKind) {
    StructType input = inputs.schema();
    SideRows.check("as_of_join", INPUT, input);
    int partition = input.fieldIndex("kafka_partition");
    // Keyed by Kafka partition: a partition's clock and its keys' states in one call (the rows' keys must be
    // placed by partition, which the Python side checks before the shuffle).
    return inputs
        .groupByKey(
            (MapFunction<Row, Integer>) row -> row.isNullAt(partition) ? -1 : spreadKey(row.getInt(partition)),
            Encoders.INT())
        .transformWithState(
            new AsOfJoinProcessor(input, latenessMs, disorderMs, lateKind),
            TimeMode.None(),
            OutputMode.Update(),
            Encoders.row(OUTPUT));
  }
}
