package io.kappa.operators;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
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
 * <p>State: a summary (views, distinct users, how many times on page fall in each range of {@link #RANGE_MS},
 * the row last emitted), each user's clicks in the group, and per range its times on page with their counts.
 * The median is found from the summary's counts and one or two ranges: a batch reads what it changes and the
 * median's ranges, never every click of the group. The median is Spark's {@code percentile(x, 0.5)}: the
 * middle value, or the two middle values interpolated the same way, in double.
 */
final class GroupStatsProcessor extends StatefulProcessor<String, Row, Row> {
  private static final long serialVersionUID = 1L;

  // Positions in PageStats.CONTRIBUTIONS.
  private static final int SIGN = 0, PAGE = 1, HOUR = 2, USER = 3, GAP = 4, SIDE_IN = ClickGapsProcessor.SIDE_OUT;
  private static final int SIDE_OUT = 6; // in PageStats.OUTPUT
  static final long RANGE_MS = 4096; // times on page are counted per range of this width in the summary

  private transient ValueState<byte[]> summary;
  private transient MapState<String, Long> users;
  private transient MapState<Long, byte[]> ranges;

  @Override
  public void init(OutputMode outputMode, TimeMode timeMode) {
    summary = getHandle().getValueState("summary", Encoders.BINARY(), TTLConfig.NONE());
    users = getHandle().getMapState("users", Encoders.STRING(), Encoders.LONG(), TTLConfig.NONE());
    ranges = getHandle().getMapState("ranges", Encoders.LONG(), Encoders.BINARY(), TTLConfig.NONE());
  }

  /** What is kept per group besides the users and the ranges. */
  static final class Summary {
    long views;
    long distinctUsers;
    TreeMap<Long, Long> rangeCounts = new TreeMap<>(); // range -> how many times on page fall in it
    boolean emitted; // a row of the group was emitted (and not deleted since)
    long emittedViews;
    long emittedUsers;
    Long emittedMedian;

    byte[] write() {
      ByteArrayOutputStream bytes = new ByteArrayOutputStream(64 + 16 * rangeCounts.size());
      try (DataOutputStream out = new DataOutputStream(bytes)) {
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
      Summary s = new Summary();
      try (DataInputStream in = new DataInputStream(new ByteArrayInputStream(stored))) {
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
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
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
    while (rows.hasNext()) {
      Row row = rows.next();
      if (!row.isNullAt(SIDE_IN + SideRows.KIND)) {
        out.add(SideRows.passThrough(row, SIDE_IN, PageStats.OUTPUT.size(), SIDE_OUT));
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
    if (first != null) {
      Summary s = summary.exists() ? Summary.read(summary.get()) : new Summary();
      s.views += views;
      applyUsers(s, userDeltas);
      Map<Long, TreeMap<Long, Long>> changed = applyValues(s, valueDeltas);
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
        Long median = median(s, changed);
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
    return CollectionConverters.asScala(out.iterator());
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

  /** Applies the value deltas range by range; returns the ranges it read, as they are now. */
  private Map<Long, TreeMap<Long, Long>> applyValues(Summary s, TreeMap<Long, Long> deltas) {
    Map<Long, TreeMap<Long, Long>> touched = new HashMap<>();
    for (Map.Entry<Long, Long> e : deltas.entrySet()) {
      if (e.getValue() == 0) {
        continue;
      }
      long range = Math.floorDiv(e.getKey(), RANGE_MS);
      TreeMap<Long, Long> counts = touched.computeIfAbsent(range, this::readRange);
      long now = counts.getOrDefault(e.getKey(), 0L) + e.getValue();
      if (now < 0) {
        throw new IllegalStateException("page_stats: a time on page was retracted more often than counted");
      }
      if (now == 0) {
        counts.remove(e.getKey());
      } else {
        counts.put(e.getKey(), now);
      }
      long total = s.rangeCounts.getOrDefault(range, 0L) + e.getValue();
      if (total == 0) {
        s.rangeCounts.remove(range);
      } else {
        s.rangeCounts.put(range, total);
      }
    }
    for (Map.Entry<Long, TreeMap<Long, Long>> e : touched.entrySet()) {
      if (e.getValue().isEmpty()) {
        ranges.removeKey(e.getKey());
      } else {
        ranges.updateValue(e.getKey(), writeRange(e.getValue()));
      }
    }
    return touched;
  }

  /** Spark's percentile(x, 0.5) of the group's times on page (null when it has none). */
  private Long median(Summary s, Map<Long, TreeMap<Long, Long>> read) {
    long n = 0;
    for (long count : s.rangeCounts.values()) {
      n += count;
    }
    if (n == 0) {
      return null;
    }
    double position = (n - 1) * 0.5;
    long lower = (long) Math.floor(position);
    long higher = (long) Math.ceil(position);
    long lowerValue = nth(s, read, lower);
    if (higher == lower) {
      return (long) (double) lowerValue;
    }
    long higherValue = nth(s, read, higher);
    if (higherValue == lowerValue) {
      return (long) (double) lowerValue;
    }
    return (long) ((higher - position) * lowerValue + (position - lower) * higherValue);
  }

  /** The value at 0-based rank {@code rank} of the group's times on page. */
  private long nth(Summary s, Map<Long, TreeMap<Long, Long>> read, long rank) {
    long seen = 0;
    for (Map.Entry<Long, Long> range : s.rangeCounts.entrySet()) {
      if (seen + range.getValue() <= rank) {
        seen += range.getValue();
        continue;
      }
      TreeMap<Long, Long> counts = read.computeIfAbsent(range.getKey(), this::readRange);
      for (Map.Entry<Long, Long> value : counts.entrySet()) {
        seen += value.getValue();
        if (seen > rank) {
          return value.getKey();
        }
      }
      break;
    }
    throw new IllegalStateException("page_stats: the counts of a group's times on page disagree");
  }

  private TreeMap<Long, Long> readRange(long range) {
    TreeMap<Long, Long> counts = new TreeMap<>();
    byte[] stored = ranges.getValue(range);
    if (stored == null) {
      return counts;
    }
    try (DataInputStream in = new DataInputStream(new ByteArrayInputStream(stored))) {
      int n = in.readInt();
      for (int i = 0; i < n; i++) {
        counts.put(in.readLong(), in.readLong());
      }
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return counts;
  }

  private static byte[] writeRange(TreeMap<Long, Long> counts) {
    ByteArrayOutputStream bytes = new ByteArrayOutputStream(4 + 16 * counts.size());
    try (DataOutputStream out = new DataOutputStream(bytes)) {
      out.writeInt(counts.size());
      for (Map.Entry<Long, Long> e : counts.entrySet()) {
        out.writeLong(e.getKey());
        out.writeLong(e.getValue());
      }
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return bytes.toByteArray();
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
