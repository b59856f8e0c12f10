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
 * page_stats as a Spark operator: per page and event-time hour, the views, distinct users and exact median time
 * on page of the clicks read so far, each batch emitting only the rows it changed. The rule is
 * jobs/page_stats/transforms.py's {@code page_stats_of} over the whole log (the specification); this operator
 * keeps what it needs in the state store instead of recomputing from every click:
 *
 * <ol>
 *   <li>per user ({@link ClickGapsProcessor}): the user's clicks by event time, each with its time on page (the
 *       gap to the user's next click, when at most the session gap); a batch's clicks, late ones and clicks sent
 *       again included, change their own and their predecessors' times, and each changed click's contribution
 *       to its (page, hour) is retracted and added again;
 *   <li>per (page, hour) ({@link GroupStatsProcessor}): the views, each user's clicks (distinct users) and
 *       the multiset of times on page (its exact median), under those contributions.
 * </ol>
 *
 * A batch costs what it changes, not what the log holds. Called from Python by kappa.operators.page_stats,
 * which shapes the rows into {@link #CLICKS} and back from {@link #OUTPUT}. Rows whose {@code side_kind} is set
 * (the input's dead letters) pass through both steps unchanged.
 */
public final class PageStats {
  private PageStats() {}

  /** One row per enriched click, in any order (the columns too); the log order is (kafka_partition, kafka_offset). */
  public static final StructType CLICKS =
      SideRows.withSide(
          List.of(
              SideRows.field("key", DataTypes.StringType), // the user
              SideRows.field("kafka_partition", DataTypes.IntegerType),
              SideRows.field("kafka_offset", DataTypes.LongType),
              SideRows.field("event_id", DataTypes.StringType),
              SideRows.field("event_time_ms", DataTypes.LongType),
              SideRows.field("page", DataTypes.StringType)));

  /** A click's contribution to its (page, hour), added (+1) or retracted (-1). */
  static final StructType CONTRIBUTIONS =
      SideRows.withSide(
          List.of(
              SideRows.field("sign", DataTypes.IntegerType),
              SideRows.field("page", DataTypes.StringType),
              SideRows.field("hour_ms", DataTypes.LongType),
              SideRows.field("user", DataTypes.StringType),
              SideRows.field("time_on_page_ms", DataTypes.LongType)));

  /** One row per (page, hour) the batch changed: its new values, or {@code deleted} when no click counts in it. */
  public static final StructType OUTPUT =
      SideRows.withSide(
          List.of(
              SideRows.field("page", DataTypes.StringType),
              SideRows.field("hour_ms", DataTypes.LongType),
              SideRows.field("views", DataTypes.LongType),
              SideRows.field("distinct_users", DataTypes.LongType),
              SideRows.field("median_time_on_page_ms", DataTypes.LongType),
              SideRows.field("deleted", DataTypes.BooleanType)));

  /**
   * @param gapMs a next click later than this is not time on the page
   * @param hourMs the width of a group's time window (an hour: 3,600,000)
   */
  public static Dataset<Row> apply(Dataset<Row> clicks, long gapMs, long hourMs) {
    StructType input = clicks.schema();
    SideRows.check("page statistics", CLICKS, input);
    int key = input.fieldIndex("key");
    Dataset<Row> contributions =
        clicks
            .groupByKey((MapFunction<Row, String>) row -> row.getString(key), Encoders.STRING())
            .transformWithState(
                new ClickGapsProcessor(input, gapMs, hourMs),
                TimeMode.None(),
                OutputMode.Update(),
                Encoders.row(CONTRIBUTIONS));
    return contributions
        .groupByKey((MapFunction<Row, String>) PageStats::groupKey, Encoders.STRING())
        .transformWithState(
            new GroupStatsProcessor(), TimeMode.None(), OutputMode.Update(), Encoders.row(OUTPUT));
  }

  /** (page, hour) as one key: the hour, then the page (a null page has no slash); null for a dead letter. */
  static String groupKey(Row contribution) {
    if (!contribution.isNullAt(ClickGapsProcessor.SIDE_OUT + SideRows.KIND)) {
      return null;
    }
    long hour = contribution.getLong(2);
    return contribution.isNullAt(1) ? Long.toString(hour) : hour + "/" + contribution.getString(1);
  }
}
