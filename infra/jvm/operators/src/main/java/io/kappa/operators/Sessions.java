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
 * Sessionization as a Spark operator: each key's events in log order joined into sessions by gap, merged,
 * corrected, late events set aside (the rule: {@link SessionRule}). Called from Python by
 * kappa.operators.sessions, which shapes the rows into {@link #INPUT} and back from {@link #OUTPUT}.
 * Rows whose {@code side_kind} is set (the input's dead letters) pass through unchanged.
 */
public final class Sessions {
  private Sessions() {}

  /** One row per event, in any order (the columns too); the log order is (kafka_partition, kafka_offset). */
  public static final StructType INPUT =
      SideRows.withSide(
          List.of(
              SideRows.field("key", DataTypes.StringType),
              SideRows.field("kafka_topic", DataTypes.StringType),
              SideRows.field("kafka_partition", DataTypes.IntegerType),
              SideRows.field("kafka_offset", DataTypes.LongType),
              SideRows.field("raw_value", DataTypes.BinaryType),
              SideRows.field("event_id", DataTypes.StringType),
              SideRows.field("event_time_ms", DataTypes.LongType),
              SideRows.field("page", DataTypes.StringType),
              SideRows.field("segment", DataTypes.StringType)));

  /** kind: "upsert" (a session created or changed), "retract" (merged away: a tombstone), "late" (an event
   * set aside, in the side columns), or null (a dead letter passed through). */
  public static final StructType OUTPUT =
      SideRows.withSide(
          List.of(
              SideRows.field("kind", DataTypes.StringType),
              SideRows.field("session_id", DataTypes.StringType),
              SideRows.field("key", DataTypes.StringType),
              SideRows.field("start_ms", DataTypes.LongType),
              SideRows.field("end_ms", DataTypes.LongType),
              SideRows.field("clicks", DataTypes.IntegerType),
              SideRows.field("distinct_pages", DataTypes.IntegerType),
              SideRows.field("entry_page", DataTypes.StringType),
              SideRows.field("exit_page", DataTypes.StringType),
              SideRows.field("segment", DataTypes.StringType)));

  /**
   * @param gapMs G: events within G of a session join it
   * @param latenessMs A: an event more than A behind the key's latest event time is late
   * @param lateKind the side_kind of a late event (the dead-letter header)
   */
  public static Dataset<Row> apply(Dataset<Row> inputs, long gapMs, long latenessMs, String lateKind) {
    requireSettings(gapMs, latenessMs);
    StructType input = inputs.schema();
    SideRows.check("sessions", INPUT, input);
    int key = input.fieldIndex("key");
    return inputs
        .groupByKey((MapFunction<Row, String>) row -> row.getString(key), Encoders.STRING())
        .transformWithState(
            new SessionsProcessor(input, gapMs, latenessMs, lateKind),
            TimeMode.None(),
            OutputMode.Update(),
            Encoders.row(OUTPUT));
  }

  /** SessionIds' reasoning needs sessions that never overlap, so a gap of 0 or more; a lateness too. */
  static void requireSettings(long gapMs, long latenessMs) {
    if (gapMs < 0 || latenessMs < 0) {
      throw new IllegalArgumentException(
          "sessions: the gap and the lateness must be 0 or more (gap " + gapMs + " ms, lateness " + latenessMs
              + " ms)");
    }
  }
}
