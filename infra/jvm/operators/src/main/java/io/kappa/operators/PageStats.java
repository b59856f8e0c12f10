package io.kappa.operators;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.NoSuchElementException;
import java.util.Set;
import org.apache.spark.api.java.function.MapFunction;
import org.apache.spark.api.java.function.MapPartitionsFunction;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

/**
 * page_stats as a Spark operator: per page and event-time hour, the views, distinct users and exact median time
 * on page of the clicks that count, each batch emitting only the rows it changed. The rule is
 * jobs/page_stats/logic.py (the specification); this operator keeps what it needs in the state store instead of
 * recomputing from every click:
 *
 * <ol>
 *   <li>per user ({@link ClickGapsProcessor}, {@link ClickGaps}): the user's clicks by event time, each with its
 *       time on page; a batch's records change their own and their predecessors' times, and each changed click's
 *       contribution to its (page, hour) is retracted and added again;
 *   <li>per (page, hour) ({@link GroupStatsProcessor}): the views, each user's clicks (distinct users) and
 *       the multiset of times on page (its exact median), under those contributions.
 * </ol>
 *
 * <p>With a lateness (bounded), each record carries its partition stamp (enrich_clicks'
 * {@code partition_time_before}, over {@code stampPartitions} clicks partitions): a record beyond the lateness is
 * set aside, the users' step forgets clicks no record that counts can reach, and a clock ({@link
 * SettlingClock}) under a key of the first step, fed by a few rows per task that a narrow step before the shuffle
 * adds ({@link ClockRows}), tells the second step which groups are settled: their state goes, and a marker
 * stays. Without one, every click is kept for ever (the unbounded rule: page_stats v1).
 *
 * <p>A batch costs what it changes, not what the log holds. Called from Python by kappa.operators.page_stats,
 * which shapes the rows into {@link #CLICKS} and back from {@link #OUTPUT}. Rows whose {@code side_kind} is set
 * (the input's dead letters) pass through both steps unchanged.
 */
public final class PageStats {
  private PageStats() {}

  /** One row per enriched click, in any order (the columns too); the log order is (kafka_partition, kafka_offset).
   * kafka_topic and raw_value are what a record set aside carries; stamp_ms and stamp_partition its stamp. */
  public static final StructType CLICKS =
      SideRows.withSide(
          List.of(
              SideRows.field("key", DataTypes.StringType), // the user
              SideRows.field("kafka_topic", DataTypes.StringType),
              SideRows.field("kafka_partition", DataTypes.IntegerType),
              SideRows.field("kafka_offset", DataTypes.LongType),
              SideRows.field("raw_value", DataTypes.BinaryType),
              SideRows.field("event_id", DataTypes.StringType),
              SideRows.field("event_time_ms", DataTypes.LongType),
              SideRows.field("page", DataTypes.StringType),
              SideRows.field("stamp_ms", DataTypes.LongType),
              SideRows.field("stamp_partition", DataTypes.IntegerType)));

  /** The column ClockRows adds: null on a click or dead letter; on a clock row, what it tells. */
  static final String CLOCK = "clock";
  static final int CLOCK_STAMP = 1; // stamp_partition's largest stamp in the task: stamp_ms
  static final int CLOCK_GROUP = 2; // a (page, hour) the task's clicks fall in: page, event_time_ms (the hour)
  /** The clock's key in the first step. The clock keeps its own state variables, apart from a user's, so it would
   * share nothing with a user of this id (the contracts want one character at least). */
  static final String CLOCK_KEY = "";

  /** A click's contribution to its (page, hour), added (+1) or retracted (-1); or, {@code settle}, the clock's word
   * that the (page, hour) is settled. */
  static final StructType CONTRIBUTIONS =
      SideRows.withSide(
          List.of(
              SideRows.field("sign", DataTypes.IntegerType),
              SideRows.field("page", DataTypes.StringType),
              SideRows.field("hour_ms", DataTypes.LongType),
              SideRows.field("user", DataTypes.StringType),
              SideRows.field("time_on_page_ms", DataTypes.LongType),
              SideRows.field("settle", DataTypes.BooleanType)));

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
   * @param latenessMs L (null: unbounded, every stamp ignored)
   * @param stampPartitions how many clicks partitions the stamps come from (bounded)
   * @param lateKind, settledKind the side kinds of a record beyond the lateness and of a copy, which changes
   *     nothing (a record stamped below an earlier one of its user)
   */
  public static Dataset<Row> apply(
      Dataset<Row> clicks, long gapMs, long hourMs, Long latenessMs, int stampPartitions, String lateKind,
      String settledKind) {
    StructType input = clicks.schema();
    SideRows.check("page statistics", CLICKS, input);
    if (latenessMs != null && latenessMs < 0) {
      throw new IllegalArgumentException("page statistics: the lateness is never negative, got " + latenessMs);
    }
    SettlingClock settling =
        latenessMs == null ? null : new SettlingClock(stampPartitions, latenessMs, gapMs, hourMs);
    StructType ticked = input.add(CLOCK, DataTypes.IntegerType, true);
    Dataset<Row> rows = clicks.mapPartitions(new ClockRows(input, hourMs, settling != null), Encoders.row(ticked));
    int key = ticked.fieldIndex("key");
    Dataset<Row> contributions =
        rows.groupByKey((MapFunction<Row, String>) row -> row.getString(key), Encoders.STRING())
            .transformWithState(
                new ClickGapsProcessor(
                    rows.schema(), new ClickGaps(gapMs, hourMs, latenessMs), settling, lateKind, settledKind),
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

  /**
   * The narrow step before the shuffle: each row passes with the clock column null, and (bounded) at the end of
   * the task's rows come its clock rows, under the clock's key: the largest stamp it saw per clicks partition
   * and each (page, hour) its clicks fall in. A few hundred rows a task, so the clock never sees every click.
   */
  static final class ClockRows implements MapPartitionsFunction<Row, Row> {
    private static final long serialVersionUID = 1L;

    private final int width, key, kind, eventTime, page, stamp, stampPartition;
    private final long hourMs;
    private final boolean ticks; // false (unbounded): the rows pass, with no clock rows after them

    ClockRows(StructType input, long hourMs, boolean ticks) {
      this.ticks = ticks;
      width = input.size() + 1;
      key = input.fieldIndex("key");
      kind = input.fieldIndex("side_kind");
      eventTime = input.fieldIndex("event_time_ms");
      page = input.fieldIndex("page");
      stamp = input.fieldIndex("stamp_ms");
      stampPartition = input.fieldIndex("stamp_partition");
      this.hourMs = hourMs;
    }

    @Override
    public Iterator<Row> call(Iterator<Row> rows) {
      Map<Integer, Long> stamps = new HashMap<>();
      Map<Long, Set<String>> groups = new HashMap<>();
      return new Iterator<>() {
        private Iterator<Row> tail; // the clock rows, once the task's rows are done

        @Override
        public boolean hasNext() {
          if (tail == null && rows.hasNext()) {
            return true;
          }
          if (tail == null) {
            tail = clockRows(stamps, groups).iterator();
          }
          return tail.hasNext();
        }

        @Override
        public Row next() {
          if (!hasNext()) {
            throw new NoSuchElementException();
          }
          if (tail != null) {
            return tail.next();
          }
          Row r = rows.next();
          if (ticks && r.isNullAt(kind)) {
            if (!r.isNullAt(stamp) && !r.isNullAt(stampPartition)) {
              stamps.merge(r.getInt(stampPartition), r.getLong(stamp), Math::max);
            }
            long hour = Math.floorDiv(r.getLong(eventTime), hourMs) * hourMs;
            groups.computeIfAbsent(hour, h -> new HashSet<>()).add(r.isNullAt(page) ? null : r.getString(page));
          }
          Object[] values = new Object[width];
          for (int i = 0; i < width - 1; i++) {
            values[i] = r.get(i);
          }
          return RowFactory.create(values);
        }
      };
    }

    private List<Row> clockRows(Map<Integer, Long> stamps, Map<Long, Set<String>> groups) {
      List<Row> out = new ArrayList<>();
      stamps.forEach((partition, largest) -> {
        Object[] values = new Object[width];
        values[key] = CLOCK_KEY;
        values[stampPartition] = partition;
        values[stamp] = largest;
        values[width - 1] = CLOCK_STAMP;
        out.add(RowFactory.create(values));
      });
      groups.forEach((hour, pages) -> {
        for (String p : pages) {
          Object[] values = new Object[width];
          values[key] = CLOCK_KEY;
          values[eventTime] = hour;
          values[page] = p;
          values[width - 1] = CLOCK_GROUP;
          out.add(RowFactory.create(values));
        }
      });
      return out;
    }
  }
}
