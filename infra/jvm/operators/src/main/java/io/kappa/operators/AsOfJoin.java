package io.kappa.operators;

import java.util.List;
import org.apache.spark.api.java.function.MapFunction;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * The as-of join as a Spark operator: events joined per key with the entity version visible at their event
 * time, corrections re-emitted, late versions set aside (the rule: {@link AsOfRule}). Called from Python by
 * kappa.operators.as_of_join, which shapes the rows into {@link #INPUT} and back from {@link #OUTPUT}.
 *
 * <p>Rows whose {@code side_kind} is set (the inputs' dead letters) pass through unchanged, so a job's one
 * query carries them without a second read of its inputs.
 */
public final class AsOfJoin {
  private AsOfJoin() {}

  private static final StructField[] SIDE = {
    field("side_kind", DataTypes.StringType),
    field("side_message", DataTypes.StringType),
    field("side_key", DataTypes.BinaryType),
    field("side_value", DataTypes.BinaryType),
    field("side_topic", DataTypes.StringType),
    field("side_partition", DataTypes.IntegerType),
    field("side_offset", DataTypes.LongType),
    field("side_timestamp_us", DataTypes.LongType),
    field("side_broken", DataTypes.StringType),
    field("side_suite", DataTypes.StringType),
  };

  /** One row per event or entity version, in any order; the log order is (kafka_partition, kafka_offset). */
  public static final StructType INPUT =
      schema(
          List.of(
              field("key", DataTypes.StringType),
              field("is_entity", DataTypes.BooleanType),
              field("kafka_topic", DataTypes.StringType),
              field("kafka_partition", DataTypes.IntegerType),
              field("kafka_offset", DataTypes.LongType),
              field("raw_value", DataTypes.BinaryType),
              field("event_id", DataTypes.StringType),
              field("event_time_ms", DataTypes.LongType),
              field("entity_version", DataTypes.LongType),
              field("valid_from_ms", DataTypes.LongType),
              field("published_ms", DataTypes.LongType),
              field("payload", DataTypes.createArrayType(DataTypes.StringType))));

  /** kind: "event" (an event with its answer; entity columns null when no version is visible), "late"
   * (a version set aside, in the side columns), or null (a dead letter passed through). */
  public static final StructType OUTPUT =
      schema(
          List.of(
              field("kind", DataTypes.StringType),
              field("key", DataTypes.StringType),
              field("event_id", DataTypes.StringType),
              field("event_time_ms", DataTypes.LongType),
              field("entity_version", DataTypes.LongType),
              field("event_payload", DataTypes.createArrayType(DataTypes.StringType)),
              field("entity_payload", DataTypes.createArrayType(DataTypes.StringType))));

  /**
   * @param latenessMs L: how long after its valid-from a version may be published and still apply from it
   * @param disorderMs D: how far out of time order a key's events and versions may arrive
   * @param lateKind the side_kind of a late version (the dead-letter header)
   */
  public static Dataset<Row> apply(
      Dataset<Row> inputs, long latenessMs, long disorderMs, String lateKind) {
    if (!inputs.schema().sameType(INPUT)) {
      throw new IllegalArgumentException(
          "as_of_join's input must be " + INPUT.toDDL() + ", got " + inputs.schema().toDDL());
    }
    return inputs
        .groupByKey((MapFunction<Row, String>) row -> row.getString(0), Encoders.STRING())
        .transformWithState(
            new AsOfJoinProcessor(latenessMs, disorderMs, lateKind),
            TimeMode.None(),
            OutputMode.Update(),
            Encoders.row(OUTPUT));
  }

  private static StructField field(String name, org.apache.spark.sql.types.DataType type) {
    return DataTypes.createStructField(name, type, true);
  }

  private static StructType schema(List<StructField> fields) {
    StructField[] all = new StructField[fields.size() + SIDE.length];
    fields.toArray(all);
    System.arraycopy(SIDE, 0, all, fields.size(), SIDE.length);
    return DataTypes.createStructType(all);
  }
}
