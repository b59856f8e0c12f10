package io.kappa.operators;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.TreeMap;
import java.util.TreeSet;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.streaming.MapState;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.StatefulProcessor;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.streaming.TimerValues;
import org.apache.spark.sql.types.StructType;
import scala.jdk.javaapi.CollectionConverters;

/**
 * page_stats' first step, per user: each click's time on page (the gap to the user's next click by event time,
 * ties by event id, when at most {@code gapMs}; else none), kept in the state store, and the contributions to
 * (page, hour) that a batch changes.
 *
 * <p>State: the user's clicks in buckets of {@code gapMs} of event time (a click's next click within the gap
 * is in its own bucket or the next one), and each click's event time by event id (to find a click sent again,
 * which replaces it: the latest in log order counts, as in the specification). A batch loads the buckets
 * around each changed time only, so its cost follows its clicks, not the user's history.
 */
final class ClickGapsProcessor extends StatefulProcessor<String, Row, Row> {
  private static final long serialVersionUID = 1L;

  static final int SIDE_OUT = PageStats.CONTRIBUTIONS.fieldIndex("side_kind");

  // Positions of the rule's columns in the input (PageStats.CLICKS', in the order the query gives them).
  private final int eventId, eventTime, page;
  private final SideRows.Columns common; // the log and SIDE columns
  private final long gapMs;
  private final long hourMs;
  private transient MapState<Long, byte[]> buckets;
  private transient MapState<String, Long> times;

  ClickGapsProcessor(StructType input, long gapMs, long hourMs) {
    common = new SideRows.Columns(input);
    eventId = input.fieldIndex("event_id");
    eventTime = input.fieldIndex("event_time_ms");
    page = input.fieldIndex("page");
    this.gapMs = gapMs;
    this.hourMs = hourMs;
  }

  /** A click as the state keeps it; {@code gap} is its time on page (null: none). */
  static final class Click {
    final long timeMs;
    final String eventId;
    final String page;
    Long gap;

    Click(long timeMs, String eventId, String page, Long gap) {
      this.timeMs = timeMs;
      this.eventId = eventId;
      this.page = page;
      this.gap = gap;
    }
  }

  /** Event time, then event id as Spark orders strings (by their UTF-8 bytes, unsigned). */
  static final Comparator<Click> ORDER =
      Comparator.<Click>comparingLong(c -> c.timeMs).thenComparing(c -> c.eventId, ClickGapsProcessor::utf8);

  static int utf8(String a, String b) {
    return Arrays.compareUnsigned(a.getBytes(StandardCharsets.UTF_8), b.getBytes(StandardCharsets.UTF_8));
  }

  /** What a click counts for in page_stats: its (page, hour), its user, its time on page. */
  record Contribution(String page, long hourMs, Long gap) {}

  @Override
  public void init(OutputMode outputMode, TimeMode timeMode) {
    buckets = getHandle().getMapState("buckets", Encoders.LONG(), Encoders.BINARY(), TTLConfig.NONE());
    times = getHandle().getMapState("times", Encoders.STRING(), Encoders.LONG(), TTLConfig.NONE());
  }

  @Override
  public scala.collection.Iterator<Row> handleInputRows(
      String user, scala.collection.Iterator<Row> rows, TimerValues timerValues) {
    List<Row> out = new ArrayList<>();
    List<Row> ruled =
        common.ruled(CollectionConverters.asJava(rows), out, PageStats.CONTRIBUTIONS.size(), SIDE_OUT);
    if (!ruled.isEmpty()) {
      apply(user, ruled, out);
    }
    return CollectionConverters.asScala(out.iterator());
  }

  private long bucket(long timeMs) {
    return Math.floorDiv(timeMs, gapMs);
  }

  private void apply(String user, List<Row> rows, List<Row> out) {
    rows.sort(common::compareInLog);
    Map<String, Click> latest = new LinkedHashMap<>(); // the batch's clicks, the latest of each event id
    for (Row r : rows) {
      String id = r.getString(eventId);
      latest.remove(id);
      latest.put(id, new Click(r.getLong(eventTime), id, r.isNullAt(page) ? null : r.getString(page), null));
    }
    // Where each click was before this batch (null: a new click), and which buckets the changes reach.
    Map<String, Long> before = new HashMap<>();
    TreeSet<Long> load = new TreeSet<>();
    TreeSet<Long> recompute = new TreeSet<>(); // buckets whose clicks' times on page may change
    for (Click c : latest.values()) {
      Long old = times.getValue(c.eventId);
      before.put(c.eventId, old);
      for (long t : old == null ? new long[] {c.timeMs} : new long[] {c.timeMs, old}) {
        long b = bucket(t);
        load.add(b - 1);
        load.add(b);
        load.add(b + 1);
        recompute.add(b - 1);
        recompute.add(b);
      }
    }
    TreeMap<Long, List<Click>> loaded = new TreeMap<>();
    for (long b : load) {
      byte[] stored = buckets.getValue(b);
      loaded.put(b, stored == null ? new ArrayList<>() : read(stored));
    }
    Map<String, Contribution> was = contributions(loaded, recompute);
    for (Click c : latest.values()) {
      Long old = before.get(c.eventId);
      if (old != null) {
        loaded.get(bucket(old)).removeIf(k -> k.eventId.equals(c.eventId));
      }
      loaded.get(bucket(c.timeMs)).add(c);
      times.updateValue(c.eventId, c.timeMs);
    }
    List<Click> merged = new ArrayList<>();
    for (List<Click> clicks : loaded.values()) {
      clicks.sort(ORDER);
      merged.addAll(clicks);
    }
    // Each click in a bucket to recompute has its next click within the gap, if any, among the loaded ones.
    for (int i = 0; i < merged.size(); i++) {
      Click c = merged.get(i);
      if (recompute.contains(bucket(c.timeMs))) {
        long next = i + 1 < merged.size() ? merged.get(i + 1).timeMs - c.timeMs : Long.MAX_VALUE;
        c.gap = next <= gapMs ? next : null;
      }
    }
    Map<String, Contribution> now = contributions(loaded, recompute);
    for (Map.Entry<String, Contribution> e : was.entrySet()) {
      Contribution after = now.get(e.getKey());
      if (!e.getValue().equals(after)) {
        out.add(contribution(-1, user, e.getValue()));
      }
    }
    for (Map.Entry<String, Contribution> e : now.entrySet()) {
      if (!e.getValue().equals(was.get(e.getKey()))) {
        out.add(contribution(1, user, e.getValue()));
      }
    }
    for (Map.Entry<Long, List<Click>> e : loaded.entrySet()) {
      if (e.getValue().isEmpty()) {
        buckets.removeKey(e.getKey());
      } else {
        buckets.updateValue(e.getKey(), write(e.getValue()));
      }
    }
  }

  private Map<String, Contribution> contributions(TreeMap<Long, List<Click>> loaded, TreeSet<Long> recompute) {
    Map<String, Contribution> result = new HashMap<>();
    for (long b : recompute) {
      for (Click c : loaded.get(b)) {
        result.put(c.eventId, new Contribution(c.page, Math.floorDiv(c.timeMs, hourMs) * hourMs, c.gap));
      }
    }
    return result;
  }

  private static Row contribution(int sign, String user, Contribution c) {
    Object[] values = new Object[PageStats.CONTRIBUTIONS.size()];
    values[0] = sign;
    values[1] = c.page();
    values[2] = c.hourMs();
    values[3] = user;
    values[4] = c.gap();
    return RowFactory.create(values);
  }

  static List<Click> read(byte[] stored) {
    try (DataInputStream in = new DataInputStream(new ByteArrayInputStream(stored))) {
      int n = in.readInt();
      List<Click> clicks = new ArrayList<>(n + 4);
      for (int i = 0; i < n; i++) {
        long time = in.readLong();
        String id = Bytes.readString(in);
        String page = Bytes.readString(in);
        clicks.add(new Click(time, id, page, Bytes.readLong(in)));
      }
      return clicks;
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  static byte[] write(List<Click> clicks) {
    ByteArrayOutputStream bytes = new ByteArrayOutputStream(64 * clicks.size() + 4);
    try (DataOutputStream out = new DataOutputStream(bytes)) {
      out.writeInt(clicks.size());
      for (Click c : clicks) {
        out.writeLong(c.timeMs);
        Bytes.writeString(out, Objects.requireNonNull(c.eventId, "event_id"));
        Bytes.writeString(out, c.page);
        Bytes.writeLong(out, c.gap);
      }
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return bytes.toByteArray();
  }
}
