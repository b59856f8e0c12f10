package io.kappa.operators;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.TreeMap;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.streaming.MapState;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.StatefulProcessor;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.streaming.TimerValues;
import org.apache.spark.sql.streaming.ValueState;
import scala.jdk.javaapi.CollectionConverters;

/**
 * page_stats' second step, per (page, hour): views, distinct users and the exact median time on page under the
 * contributions of {@link ClickGapsProcessor} (each added or retracted), emitting the group's row when a batch
 * changed it.
 *
 * <p>State: a summary (views, distinct users, how many times on page fall in each range of {@link
 * GroupTimes#RANGE_MS}, the row last emitted), each user's clicks in the group, and the group's times on page in
 * the levels of {@link GroupTimes}. A batch writes what it changes and reads the median's buckets, never every
 * click of the group. The median is Spark's {@code percentile(x, 0.5)}.
 */
final class GroupStatsProcessor extends StatefulProcessor<String, Row, Row> {
  private static final long serialVersionUID = 1L;

  // Positions in PageStats.CONTRIBUTIONS.
  private static final int SIGN = 0, PAGE = 1, HOUR = 2, USER = 3, GAP = 4, SETTLE = 5;
  private static final int SIDE_IN = ClickGapsProcessor.SIDE_OUT;
  private static final int SIDE_OUT = 6; // in PageStats.OUTPUT

  /** The side kind of a contribution that reached a settled group: no record, a message naming the group. */
  static final String SETTLED_GROUP = "settled-group";

  private transient ValueState<byte[]> summary;
  private transient MapState<String, Long> users;
  private transient MapState<Long, byte[]> ranges; // GroupTimes' levels (the name is the first layout's)
  private transient BytesByLong rangeStore;
  private transient ValueState<Boolean> marker; // what a settled group leaves: its state is gone

  @Override
  public void init(OutputMode outputMode, TimeMode timeMode) {
    summary = getHandle().getValueState("summary", Encoders.BINARY(), TTLConfig.NONE());
    users = getHandle().getMapState("users", Encoders.STRING(), Encoders.LONG(), TTLConfig.NONE());
    ranges = getHandle().getMapState("ranges", Encoders.LONG(), Encoders.BINARY(), TTLConfig.NONE());
    rangeStore = BytesByLong.of(ranges);
    marker = getHandle().getValueState("marker", Encoders.BOOLEAN(), TTLConfig.NONE());
  }

  /** What is kept per group besides the users and the times. */
  static final class Summary {
    // Format 1 starts with this byte. The first layout (no format byte; its times in one value per range)
    // starts with the views, a positive long below 2^56, so with a 0 byte.
    static final int FORMAT = 1;

    long views;
    long distinctUsers;
    TreeMap<Long, Long> rangeCounts = new TreeMap<>(); // range -> how many times on page fall in it
    boolean emitted; // a row of the group was emitted (and not deleted since)
    long emittedViews;
    long emittedUsers;
    Long emittedMedian;
    boolean legacy; // read from the first layout: its times are still to be moved (GroupTimes.migrateLegacy)

    byte[] write() {
      ByteArrayOutputStream bytes = new ByteArrayOutputStream(64 + 16 * rangeCounts.size());
      try (DataOutputStream out = new DataOutputStream(bytes)) {
        out.writeByte(FORMAT);
        out.writeLong(views);
        out.writeLong(distinctUsers);
        out.writeInt(rangeCounts.size());
        for (Map.Entry<Long, Long> e : rangeCounts.entrySet()) {
          out.writeLong(e.getKey());
          out.writeLong(e.getValue());
        }
        out.writeBoolean(emitted);
        out.writeLong(emittedViews);
        out.writeLong(emittedUsers);
        Bytes.writeLong(out, emittedMedian);
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
      return bytes.toByteArray();
    }

    static Summary read(byte[] stored) {
      if (stored.length > 0 && stored[0] == 0) { // the first layout
        try (DataInputStream in = new DataInputStream(new ByteArrayInputStream(stored))) {
          Summary s = readFields(in);
          if (in.available() > 0) {
            throw new IllegalStateException("page_stats group state (first layout) has bytes left over");
          }
          s.legacy = true;
          return s;
        } catch (EOFException e) {
          throw new IllegalStateException("page_stats group state (first layout) truncated or corrupt", e);
        } catch (IOException e) {
          throw new UncheckedIOException(e);
        }
      }
      return Bytes.decode("page_stats group", FORMAT, stored, Summary::readFields);
    }

    private static Summary readFields(DataInputStream in) throws IOException {
      Summary s = new Summary();
      s.views = in.readLong();
      s.distinctUsers = in.readLong();
      int n = in.readInt();
      for (int i = 0; i < n; i++) {
        s.rangeCounts.put(in.readLong(), in.readLong());
      }
      s.emitted = in.readBoolean();
      s.emittedViews = in.readLong();
      s.emittedUsers = in.readLong();
      s.emittedMedian = Bytes.readLong(in);
      return s;
    }
  }

  @Override
  public scala.collection.Iterator<Row> handleInputRows(
      String group, scala.collection.Iterator<Row> rows, TimerValues timerValues) {
    List<Row> out = new ArrayList<>();
    long views = 0;
    Map<String, Long> userDeltas = new HashMap<>();
    TreeMap<Long, Long> valueDeltas = new TreeMap<>();
    Row first = null;
    boolean settleNow = false;
    Boolean marked = null; // read with the first row that is not a dead letter (theirs is the null key)
    while (rows.hasNext()) {
      Row row = rows.next();
      if (!row.isNullAt(SIDE_IN + SideRows.KIND)) {
        out.add(SideRows.passThrough(row, SIDE_IN, PageStats.OUTPUT.size(), SIDE_OUT));
        continue;
      }
      if (marked == null) {
        marked = marker.exists();
      }
      if (!row.isNullAt(SETTLE) && row.getBoolean(SETTLE)) {
        settleNow = true;
        continue;
      }
      if (marked) { // the lateness bound says none can come: set aside, never counted from zero
        out.add(reachedSettled(group, row));
        continue;
      }
      first = first == null ? row : first;
      int sign = row.getInt(SIGN);
      views += sign;
      userDeltas.merge(row.getString(USER), (long) sign, Long::sum);
      if (!row.isNullAt(GAP)) {
        valueDeltas.merge(row.getLong(GAP), (long) sign, Long::sum);
      }
    }
    boolean held = first != null && summary.exists();
    if (first != null && settleNow && !held) {
      // A group that opens and settles in one batch (a replay's, mostly): its row from the batch alone, nothing
      // written to the state store only to be cleared.
      String page = first.isNullAt(PAGE) ? null : first.getString(PAGE);
      long distinct = 0;
      for (long n : userDeltas.values()) {
        if (n < 0) {
          throw new IllegalStateException("page_stats group " + group + ": more clicks retracted than counted");
        }
        distinct += n > 0 ? 1 : 0;
      }
      if (views < 0) {
        throw new IllegalStateException("page_stats group " + group + ": more clicks retracted than counted");
      }
      if (views > 0) {
        out.add(row(page, first.getLong(HOUR), views, distinct, GroupTimes.medianOf(valueDeltas), false));
      }
    } else if (first != null) {
      Summary s = held ? Summary.read(summary.get()) : new Summary();
      s.views += views;
      applyUsers(s, userDeltas);
      GroupTimes times = new GroupTimes(rangeStore, s.rangeCounts);
      if (s.legacy) {
        times.migrateLegacy();
      }
      for (Map.Entry<Long, Long> e : valueDeltas.entrySet()) {
        times.add(e.getKey(), e.getValue());
      }
      if (s.views < 0 || s.distinctUsers < 0) {
        throw new IllegalStateException("page_stats group " + group + ": more clicks retracted than counted");
      }
      String page = first.isNullAt(PAGE) ? null : first.getString(PAGE);
      long hour = first.getLong(HOUR);
      if (s.views == 0) {
        if (s.emitted) {
          out.add(row(page, hour, null, null, null, true));
        }
        summary.clear();
        users.clear();
        ranges.clear();
      } else {
        Long median = times.median();
        times.flush();
        if (!s.emitted
            || s.emittedViews != s.views
            || s.emittedUsers != s.distinctUsers
            || !Objects.equals(s.emittedMedian, median)) {
          out.add(row(page, hour, s.views, s.distinctUsers, median, false));
          s.emitted = true;
          s.emittedViews = s.views;
          s.emittedUsers = s.distinctUsers;
          s.emittedMedian = median;
        }
        summary.update(s.write());
      }
    }
    // after the batch's contributions (settleNow: marked was read): the row emitted last is the final one
    if (settleNow && !marked) {
      if (held || first == null) { // held, or not known (no contribution this batch: not read)
        summary.clear();
        users.clear();
        ranges.clear();
      }
      marker.update(true);
    }
    return CollectionConverters.asScala(out.iterator());
  }

  /** A contribution that reached a settled group, as a side row naming it: what a topic whose first emissions'
   * stamps go back (enrich_clicks writes them in offset order) would cause. */
  private Row reachedSettled(String group, Row contribution) {
    Object[] values = new Object[PageStats.OUTPUT.size()];
    values[SIDE_OUT + SideRows.KIND] = SETTLED_GROUP;
    values[SIDE_OUT + SideRows.MESSAGE] =
        "page_stats: a click of user " + contribution.getString(USER) + " (" + (contribution.getInt(SIGN) > 0 ? "added"
            : "retracted") + ", time on page " + (contribution.isNullAt(GAP) ? "none" : contribution.getLong(GAP))
            + " ms) reached the group " + group + ", which was settled: no record that counts can, unless its "
            + "stamps went back along its partition; not counted";
    return RowFactory.create(values);
  }

  private void applyUsers(Summary s, Map<String, Long> deltas) {
    for (Map.Entry<String, Long> e : deltas.entrySet()) {
      if (e.getValue() == 0) {
        continue;
      }
      Long stored = users.getValue(e.getKey());
      long was = stored == null ? 0 : stored;
      long now = was + e.getValue();
      if (now < 0) {
        throw new IllegalStateException("page_stats: a user's clicks in a group went below zero");
      }
      if (was == 0 && now > 0) {
        s.distinctUsers++;
      } else if (was > 0 && now == 0) {
        s.distinctUsers--;
      }
      if (now == 0) {
        users.removeKey(e.getKey());
      } else {
        users.updateValue(e.getKey(), now);
      }
    }
  }

  private static Row row(String page, long hour, Long views, Long distinct, Long median, boolean deleted) {
    Object[] values = new Object[PageStats.OUTPUT.size()];
    values[0] = page;
    values[1] = hour;
    values[2] = views;
    values[3] = distinct;
    values[4] = median;
    values[5] = deleted;
    return RowFactory.create(values);
  }
}
