package io.kappa.operators;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.TreeMap;
import org.junit.jupiter.api.Test;

/**
 * A page_stats group's times on page in their three levels (GroupTimes) against a plain sorted list: every rank
 * and the median after each change (and the median of the same multiset held in memory), what one change
 * writes, and a group moved from the first layout (one value per range, the summary without a format byte) whose
 * answers stay the same.
 */
class GroupTimesTest {

  /** Spark's percentile(x, 0.5) as jobs/page_stats/logic.py spark_median computes it, over a sorted list. */
  private static Long expectedMedian(List<Long> sorted) {
    if (sorted.isEmpty()) {
      return null;
    }
    double position = (sorted.size() - 1) * 0.5;
    int lower = (int) Math.floor(position);
    int higher = (int) Math.ceil(position);
    long lo = sorted.get(lower);
    long hi = sorted.get(higher);
    if (lower == higher || lo == hi) {
      return lo;
    }
    return (long) ((higher - position) * lo + (position - lower) * hi);
  }

  /** Values at the levels' edges (0, 15|16, 4095|4096), in the first range, far out, and many repeated. */
  private static long draw(Random random) {
    long[] edges = {0, 15, 16, 17, 4095, 4096, 4097, 8191, 8192, 1_799_999, 1_800_000};
    return switch (random.nextInt(4)) {
      case 0 -> edges[random.nextInt(edges.length)];
      case 1 -> random.nextInt(64);
      case 2 -> random.nextInt(20_000);
      default -> (long) random.nextInt(1_800_001);
    };
  }

  @Test
  void everyRankAndTheMedianEqualASortedListThroughAddsAndRetractions() {
    Random random = new Random(40);
    MapBytesByLong store = new MapBytesByLong();
    TreeMap<Long, Long> rangeCounts = new TreeMap<>();
    List<Long> expected = new ArrayList<>();
    for (int batch = 0; batch < 300; batch++) {
      GroupTimes times = new GroupTimes(store, rangeCounts); // a new batch reads the store afresh
      for (int i = 0; i < 1 + random.nextInt(20); i++) {
        if (!expected.isEmpty() && random.nextInt(3) == 0) {
          long value = expected.remove(random.nextInt(expected.size()));
          times.add(value, -1);
        } else {
          long value = draw(random);
          int copies = 1 + random.nextInt(3);
          times.add(value, copies);
          expected.addAll(Collections.nCopies(copies, value));
        }
      }
      Collections.sort(expected);
      assertEquals(expectedMedian(expected), times.median(), "median after batch " + batch);
      TreeMap<Long, Long> whole = new TreeMap<>(); // the same multiset in memory (a group settled in one batch)
      expected.forEach(v -> whole.merge(v, 1L, Long::sum));
      whole.put(-1L - batch, 0L); // a value added and retracted within the batch counts for nothing
      assertEquals(expectedMedian(expected), GroupTimes.medianOf(whole), "in memory, after batch " + batch);
      times.flush();
      GroupTimes reread = new GroupTimes(store, rangeCounts);
      for (int rank = 0; rank < expected.size(); rank += 1 + expected.size() / 50) {
        assertEquals(expected.get(rank), reread.nth(rank), "rank " + rank + " after batch " + batch);
      }
      assertEquals(expectedMedian(expected), reread.median());
    }
    assertTrue(expected.size() > 500, "the group grew large: " + expected.size());
  }

  @Test
  void aGroupThatEmptiesLeavesNothingInTheStore() {
    MapBytesByLong store = new MapBytesByLong();
    TreeMap<Long, Long> rangeCounts = new TreeMap<>();
    GroupTimes times = new GroupTimes(store, rangeCounts);
    times.add(5, 2);
    times.add(5_000, 1);
    times.flush();
    assertEquals(4, store.values.size()); // two buckets, two ranges' indexes
    times = new GroupTimes(store, rangeCounts);
    times.add(5, -2);
    times.add(5_000, -1);
    times.flush();
    assertTrue(store.values.isEmpty());
    assertTrue(rangeCounts.isEmpty());
    assertNull(times.median());
  }

  @Test
  void aChangeWritesItsBucketAndItsRangesIndexNotTheGroup() {
    Random random = new Random(7);
    MapBytesByLong store = new MapBytesByLong();
    TreeMap<Long, Long> rangeCounts = new TreeMap<>();
    GroupTimes times = new GroupTimes(store, rangeCounts);
    for (int i = 0; i < 50_000; i++) { // an hour of a busy page: most times within the first range
      times.add(random.nextInt(4_096), 1);
    }
    times.flush();
    store.resetCounts();
    times = new GroupTimes(store, rangeCounts);
    times.add(2_000, 1);
    times.median();
    times.flush();
    assertEquals(2, store.puts);
    // a full bucket (16 times) and a full index (256 buckets) of 16-byte entries; the first layout wrote every
    // distinct time of the range: 4,096 entries, 64 KiB
    assertTrue(store.bytesPut <= 4 + 16 * 16 + 4 + 16 * 256, "bytes written: " + store.bytesPut);
  }

  @Test
  void badChangesAreRefusedWithAReason() {
    MapBytesByLong store = new MapBytesByLong();
    GroupTimes times = new GroupTimes(store, new TreeMap<>());
    IllegalArgumentException negative = assertThrows(IllegalArgumentException.class, () -> times.add(-1, 1));
    assertTrue(negative.getMessage().contains("never negative"), negative.getMessage());
    times.add(10, 1);
    IllegalStateException over = assertThrows(IllegalStateException.class, () -> times.add(10, -2));
    assertTrue(over.getMessage().contains("retracted more often than counted"), over.getMessage());
  }

  // ---- the first layout

  /** The first layout's summary, byte by byte: views, distinct users, the range counts, the emitted row. */
  private static byte[] firstLayoutSummary(long views, long users, TreeMap<Long, Long> ranges, Long median)
      throws IOException {
    ByteArrayOutputStream bytes = new ByteArrayOutputStream();
    try (DataOutputStream out = new DataOutputStream(bytes)) {
      out.writeLong(views);
      out.writeLong(users);
      out.writeInt(ranges.size());
      for (Map.Entry<Long, Long> e : ranges.entrySet()) {
        out.writeLong(e.getKey());
        out.writeLong(e.getValue());
      }
      out.writeBoolean(true);
      out.writeLong(views);
      out.writeLong(users);
      out.writeBoolean(median != null);
      if (median != null) {
        out.writeLong(median);
      }
    }
    return bytes.toByteArray();
  }

  @Test
  void aGroupOfTheFirstLayoutIsMovedAndKeepsItsAnswers() throws IOException {
    // The first layout: per range r (4,096 ms) one value under key r with all of its times and their counts.
    long[] values = {0, 0, 3, 4_095, 4_096, 4_100, 9_000, 9_000, 9_000, 100_000};
    TreeMap<Long, TreeMap<Long, Long>> byRange = new TreeMap<>();
    TreeMap<Long, Long> rangeCounts = new TreeMap<>();
    for (long v : values) {
      byRange.computeIfAbsent(v / 4_096, r -> new TreeMap<>()).merge(v, 1L, Long::sum);
      rangeCounts.merge(v / 4_096, 1L, Long::sum);
    }
    MapBytesByLong store = new MapBytesByLong();
    byRange.forEach((range, counts) -> store.values.put(range, GroupTimes.encode(counts)));

    GroupStatsProcessor.Summary s =
        GroupStatsProcessor.Summary.read(firstLayoutSummary(12, 3, rangeCounts, 4_098L));
    assertTrue(s.legacy);
    assertEquals(12, s.views);
    assertEquals(3, s.distinctUsers);
    assertEquals(rangeCounts, s.rangeCounts);
    assertEquals(4_098L, s.emittedMedian);

    GroupTimes times = new GroupTimes(store, s.rangeCounts);
    times.migrateLegacy();
    times.add(1, 1); // and this batch's own change
    times.flush();
    assertTrue(store.values.keySet().stream().allMatch(k -> k < 0), "keys of the first layout left");
    List<Long> expected = new ArrayList<>();
    for (long v : values) {
      expected.add(v);
    }
    expected.add(1L);
    Collections.sort(expected);
    GroupTimes reread = new GroupTimes(store, s.rangeCounts);
    assertEquals(expectedMedian(expected), reread.median());
    for (int rank = 0; rank < expected.size(); rank++) {
      assertEquals(expected.get(rank), reread.nth(rank));
    }

    byte[] written = s.write();
    assertEquals(GroupStatsProcessor.Summary.FORMAT, written[0]);
    GroupStatsProcessor.Summary again = GroupStatsProcessor.Summary.read(written);
    assertFalse(again.legacy);
    assertEquals(s.rangeCounts, again.rangeCounts);
    assertArrayEquals(written, again.write());
  }

  @Test
  void aSummaryOfAnotherFormatOrCutShortIsRefused() throws IOException {
    byte[] written = new GroupStatsProcessor.Summary().write();
    written[0] = 2;
    IllegalStateException other =
        assertThrows(IllegalStateException.class, () -> GroupStatsProcessor.Summary.read(written));
    assertTrue(other.getMessage().contains("format 2"), other.getMessage());
    byte[] first = firstLayoutSummary(1, 1, new TreeMap<>(), null);
    byte[] cut = java.util.Arrays.copyOf(first, first.length - 1);
    IllegalStateException truncated =
        assertThrows(IllegalStateException.class, () -> GroupStatsProcessor.Summary.read(cut));
    assertTrue(truncated.getMessage().contains("truncated"), truncated.getMessage());
  }
}
