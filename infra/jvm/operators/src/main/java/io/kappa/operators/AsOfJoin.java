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
   * (a version set aside, in the side columns), or null (a dead letter passed through). */
  public static final StructType OUTPUT =
      SideRows.withSide(
          List.of(
              SideRows.field("kind", DataTypes.StringType),
              SideRows.field("key", DataTypes.StringType),
              SideRows.field("event_id", DataTypes.StringType),
              SideRows.field("event_time_ms", DataTypes.LongType),
              SideRows.field("entity_version", DataTypes.LongType),
              SideRows.field("event_payload", DataTypes.createArrayType(DataTypes.StringType)),
              SideRows.field("entity_payload", DataTypes.createArrayType(DataTypes.StringType))));

  /**
   * @param latenessMs L: how long after its valid-from a version may be published and still apply from it
   * @param disorderMs D: how far out of time order a key's events and versions may arrive
   * @param lateKind the side_kind of a late version (the dead-letter header)
   */
  public static Dataset<Row> apply(
      Dataset<Row> inputs, long latenessMs, long disorderMs, String lateKind) {
    StructType input = inputs.schema();
    SideRows.check("as_of_join", INPUT, input);
    int key = input.fieldIndex("key");
    return inputs
        .groupByKey((MapFunction<Row, String>) row -> row.getString(key), Encoders.STRING())
        .transformWithState(
            new AsOfJoinProcessor(input, latenessMs, disorderMs, lateKind),
            TimeMode.None(),
            OutputMode.Update(),
            Encoders.row(OUTPUT));
  }
}
