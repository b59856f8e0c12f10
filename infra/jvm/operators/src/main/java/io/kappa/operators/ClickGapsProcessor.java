package io.kappa.operators;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.StatefulProcessor;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.streaming.TimerValues;
import org.apache.spark.sql.streaming.ValueState;
import org.apache.spark.sql.types.StructType;
import scala.jdk.javaapi.CollectionConverters;

/**
 * page_stats' first step, per user ({@link ClickGaps}: which records count, each click's time on page, the
 * contributions to (page, hour) a batch changes) and, bounded, the clock ({@link SettlingClock}) under a key of
 * its own, which tells the second step which groups are settled. Its rows: the contributions, then the records
 * it set aside (late, or settled: a re-emission of a click forgotten) with their bytes, then the settle rows.
 */
final class ClickGapsProcessor extends StatefulProcessor<String, Row, Row> {
  private static final long serialVersionUID = 1L;

  static final int SIDE_OUT = PageStats.CONTRIBUTIONS.fieldIndex("side_kind");

  // Positions of the rule's columns in the input (PageStats.CLICKS' and the clock column, in the query's order).
  private final int eventId, eventTime, page, stamp, stampPartition, clock;
  private final SideRows.Columns common; // the log and SIDE columns
  private final ClickGaps rule;
  private final SettlingClock settling; // null: unbounded
  private final String lateKind, settledKind;
  private transient ValueState<byte[]> user;
  private transient BytesByLong buckets;
  private transient LongById times;
  private transient ValueState<byte[]> clockState;
  private transient BytesByLong clockPages;

  ClickGapsProcessor(
      StructType input, ClickGaps rule, SettlingClock settling, String lateKind, String settledKind) {
    common = new SideRows.Columns(input);
    eventId = input.fieldIndex("event_id");
    eventTime = input.fieldIndex("event_time_ms");
    page = input.fieldIndex("page");
    stamp = input.fieldIndex("stamp_ms");
    stampPartition = input.fieldIndex("stamp_partition");
    clock = input.fieldIndex(PageStats.CLOCK);
    this.rule = rule;
    this.settling = settling;
    this.lateKind = lateKind;
    this.settledKind = settledKind;
  }

  @Override
  public void init(OutputMode outputMode, TimeMode timeMode) {
    user = getHandle().getValueState("user", Encoders.BINARY(), TTLConfig.NONE());
    buckets = BytesByLong.of(getHandle().getMapState("buckets", Encoders.LONG(), Encoders.BINARY(), TTLConfig.NONE()));
    times = LongById.of(getHandle().getMapState("times", Encoders.STRING(), Encoders.LONG(), TTLConfig.NONE()));
    clockState = getHandle().getValueState("clock", Encoders.BINARY(), TTLConfig.NONE());
    clockPages =
        BytesByLong.of(getHandle().getMapState("clockPages", Encoders.LONG(), Encoders.BINARY(), TTLConfig.NONE()));
  }

  @Override
  public scala.collection.Iterator<Row> handleInputRows(
      String key, scala.collection.Iterator<Row> rows, TimerValues timerValues) {
    List<Row> out = new ArrayList<>();
    List<Row> clicks = new ArrayList<>();
    List<Row> clockRows = new ArrayList<>();
    for (Row row : common.ruled(CollectionConverters.asJava(rows), out, PageStats.CONTRIBUTIONS.size(), SIDE_OUT)) {
      (row.isNullAt(clock) ? clicks : clockRows).add(row); // the clock's rows come under its key only
    }
    if (!clicks.isEmpty()) {
      applyRule(key, clicks, out);
    }
    if (!clockRows.isEmpty()) {
      tick(clockRows, out);
    }
    return CollectionConverters.asScala(out.iterator());
  }

  private void applyRule(String key, List<Row> rows, List<Row> out) {
    rows.sort(common::compareInLog);
    List<ClickGaps.Record> records = new ArrayList<>(rows.size());
    for (Row r : rows) {
      records.add(
          new ClickGaps.Record(
              r.getString(eventId), r.getLong(eventTime), r.isNullAt(page) ? null : r.getString(page),
              r.isNullAt(stamp) ? null : r.getLong(stamp)));
    }
    ClickGaps.Head head = user.exists() ? ClickGaps.Head.read(user.get()) : new ClickGaps.Head();
    ClickGaps.Outcome outcome = rule.apply(head, buckets, times, records);
    if (head.buckets.isEmpty() && head.largestStampMs == null) {
      user.clear();
    } else {
      user.update(head.write());
    }
    for (ClickGaps.Change change : outcome.changes()) {
      ClickGaps.Contribution c = change.contribution();
      out.add(row(change.sign(), c.page(), c.hourMs(), key, c.gap(), false));
    }
    for (int i : outcome.late()) {
      out.add(setAside(lateKind, rows.get(i)));
    }
    for (int i : outcome.settled()) {
      out.add(setAside(settledKind, rows.get(i)));
    }
  }

  private Row setAside(String kind, Row r) {
    Object[] values = new Object[PageStats.CONTRIBUTIONS.size()];
    common.late(values, SIDE_OUT, kind, r);
    return RowFactory.create(values);
  }

  private void tick(List<Row> rows, List<Row> out) {
    if (settling == null) {
      throw new IllegalStateException("page_stats: clock rows reached an operator without a lateness");
    }
    Map<Integer, Long> stamps = new HashMap<>();
    Map<Long, LinkedHashSet<String>> groups = new HashMap<>();
    for (Row r : rows) {
      if (r.getInt(clock) == PageStats.CLOCK_STAMP) {
        stamps.merge(r.getInt(stampPartition), r.getLong(stamp), Math::max);
      } else {
        groups.computeIfAbsent(r.getLong(eventTime), h -> new LinkedHashSet<>())
            .add(r.isNullAt(page) ? null : r.getString(page));
      }
    }
    SettlingClock.State state =
        clockState.exists() ? SettlingClock.State.read(clockState.get()) : new SettlingClock.State();
    for (SettlingClock.Group g : settling.advance(state, clockPages, stamps, groups)) {
      out.add(row(0, g.page(), g.hourMs(), null, null, true));
    }
    clockState.update(state.write());
  }

  private static Row row(int sign, String page, long hourMs, String user, Long gap, boolean settle) {
    Object[] values = new Object[PageStats.CONTRIBUTIONS.size()];
    values[0] = sign;
    values[1] = page;
    values[2] = hourMs;
    values[3] = user;
    values[4] = gap;
    values[5] = settle;
    return RowFactory.create(values);
  }
}
