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
 * user_activity as a Spark operator: per user, over the user's live sessions, the sessions, clicks, first and
 * last seen and the segment of the latest session, each batch emitting only the rows it changed. The rule is
 * jobs/user_activity/transforms.py's {@code user_activity_of} over the whole `sessions` log (the specification):
 *
 * <ol>
 *   <li>per session ({@link SessionOwnersProcessor}): the session's latest value, so that a tombstone (which
 *       carries only its key) is known to retract a session of its user;
 *   <li>per user ({@link ActivityProcessor}): the user's open sessions, the final ones folded into a summary,
 *       and the activity over both.
 * </ol>
 *
 * A batch costs what it changes, not what the log holds. Called from Python by kappa.operators.user_activity,
 * which shapes the rows into {@link #SESSIONS} and back from {@link #OUTPUT}. Rows whose {@code side_kind} is set
 * (the input's dead letters) pass through both steps unchanged.
 */
public final class UserActivity {
  private UserActivity() {}

  /** One row per `sessions` change (a record, or a tombstone: {@code deleted}, values null), in any order (the
   * columns too). */
  public static final StructType SESSIONS =
      SideRows.withSide(
          List.of(
              SideRows.field("key", DataTypes.StringType), // the session id
              SideRows.field("kafka_partition", DataTypes.IntegerType),
              SideRows.field("kafka_offset", DataTypes.LongType),
              SideRows.field("deleted", DataTypes.BooleanType),
              SideRows.field("final", DataTypes.BooleanType), // the session's last record
              SideRows.field("user", DataTypes.StringType),
              SideRows.field("start_ms", DataTypes.LongType),
              SideRows.field("end_ms", DataTypes.LongType),
              SideRows.field("clicks", DataTypes.LongType),
              SideRows.field("segment", DataTypes.StringType)));

  /** A session of a user set to a value ({@code live}) or taken away; {@code final}: set for good. */
  static final StructType CHANGES =
      SideRows.withSide(
          List.of(
              SideRows.field("user", DataTypes.StringType),
              SideRows.field("session_id", DataTypes.StringType),
              SideRows.field("live", DataTypes.BooleanType),
              SideRows.field("start_ms", DataTypes.LongType),
              SideRows.field("end_ms", DataTypes.LongType),
              SideRows.field("clicks", DataTypes.LongType),
              SideRows.field("segment", DataTypes.StringType),
              SideRows.field("final", DataTypes.BooleanType)));

  /** One row per user the batch changed: the new activity, or {@code deleted} when no live session is left. */
  public static final StructType OUTPUT =
      SideRows.withSide(
          List.of(
              SideRows.field("user_id", DataTypes.StringType),
              SideRows.field("sessions", DataTypes.LongType),
              SideRows.field("clicks", DataTypes.LongType),
              SideRows.field("first_seen_ms", DataTypes.LongType),
              SideRows.field("last_seen_ms", DataTypes.LongType),
              SideRows.field("segment", DataTypes.StringType),
              SideRows.field("deleted", DataTypes.BooleanType)));

  public static Dataset<Row> apply(Dataset<Row> sessions) {
    StructType input = sessions.schema();
    SideRows.check("user activity", SESSIONS, input);
    int key = input.fieldIndex("key");
    Dataset<Row> changes =
        sessions
            .groupByKey((MapFunction<Row, String>) row -> row.getString(key), Encoders.STRING())
            .transformWithState(
                new SessionOwnersProcessor(input), TimeMode.None(), OutputMode.Update(), Encoders.row(CHANGES));
    return changes
        .groupByKey(
            (MapFunction<Row, String>)
                row -> row.isNullAt(SessionOwnersProcessor.SIDE_OUT) ? row.getString(0) : null,
            Encoders.STRING())
        .transformWithState(
            new ActivityProcessor(), TimeMode.None(), OutputMode.Update(), Encoders.row(OUTPUT));
  }
}
