package io.kappa.operators;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.Map;
import java.util.TreeMap;

/**
 * One (page, hour)'s times on page, a multiset kept in three levels so that a batch writes only what it
 * changes and finds any rank in two reads, however many clicks the group holds:
 *
 * <ul>
 *   <li>per range of {@link #RANGE_MS}: how many times fall in it ({@code rangeCounts}, kept in the group's
 *       summary by the caller, a few entries);
 *   <li>per range: how many fall in each bucket of {@link #BUCKET_MS} within it (its <em>index</em>, at most
 *       256 entries);
 *   <li>per bucket: its times with their counts (at most 16 entries).
 * </ul>
 *
 * <p>A range's index and a bucket are values of one map in the state store, under disjoint negative keys
 * ({@link #indexKey}, {@link #bucketKey}). Non-negative keys belong to the layout before it (one value per range
 * holding all of its times, rewritten whole by every batch that touched the range: 20 MB per batch and state
 * partition at 1,000 clicks/s); {@link #migrateLegacy} moves a group out of it.
 */
final class GroupTimes {
  static final long RANGE_MS = 4096;
  static final long BUCKET_MS = 16;

  private final BytesByLong store; // the group's map in the state store
  private final TreeMap<Long, Long> rangeCounts;
  private final WriteBack<TreeMap<Long, Long>> levels; // the indexes and buckets this batch read or changed

  /** {@code rangeCounts}: the summary's counts per range, updated in place by {@link #add}. */
  GroupTimes(BytesByLong store, TreeMap<Long, Long> rangeCounts) {
    this.store = store;
    this.rangeCounts = rangeCounts;
    this.levels = new WriteBack<>(store, GroupTimes::decode, GroupTimes::encode, TreeMap::isEmpty);
  }

  static long indexKey(long range) {
    return Long.MIN_VALUE + range;
  }

  static long bucketKey(long bucket) {
    return -1 - bucket;
  }

  /** Adds {@code delta} (negative: retracts) occurrences of {@code value}. */
  void add(long value, long delta) {
    if (value < 0) {
      throw new IllegalArgumentException("page_stats: a time on page is never negative, got " + value);
    }
    if (delta == 0) {
      return;
    }
    place(value, delta);
    count(rangeCounts, value / RANGE_MS, delta);
  }

  /** The bucket and index levels of {@link #add}; the caller keeps the range counts. */
  private void place(long value, long delta) {
    long bucket = value / BUCKET_MS;
    bump(bucketKey(bucket), value, delta);
    bump(indexKey(value / RANGE_MS), bucket, delta);
  }

  private void bump(long key, long entry, long delta) {
    count(levels.edit(key), entry, delta);
  }

  /** Adds {@code delta} to {@code entry}'s count, which never goes below zero; a zero count is no entry. */
  private static void count(TreeMap<Long, Long> counts, long entry, long delta) {
    long now = counts.getOrDefault(entry, 0L) + delta;
    if (now < 0) {
      throw new IllegalStateException("page_stats: a time on page was retracted more often than counted");
    }
    if (now == 0) {
      counts.remove(entry);
    } else {
      counts.put(entry, now);
    }
  }

  private TreeMap<Long, Long> level(long key) {
    return levels.get(key);
  }

  /** Writes back what {@link #add} changed; once, after the batch's reads. */
  void flush() {
    levels.flush();
  }

  /** Spark's percentile(x, 0.5) of the group's times (null when it has none): the middle value, or the two
   * middle values interpolated, in double. */
  Long median() {
    long n = 0;
    for (long count : rangeCounts.values()) {
      n += count;
    }
    if (n == 0) {
      return null;
    }
    double position = (n - 1) * 0.5;
    long lower = (long) Math.floor(position);
    long higher = (long) Math.ceil(position);
    long lowerValue = nth(lower);
    if (higher == lower) {
      return (long) (double) lowerValue;
    }
    long higherValue = nth(higher);
    if (higherValue == lowerValue) {
      return (long) (double) lowerValue;
    }
    return (long) ((higher - position) * lowerValue + (position - lower) * higherValue);
  }

  /** {@link #median} of a multiset held whole in memory: value -> how many times it occurs (none: not at all). */
  static Long medianOf(TreeMap<Long, Long> counts) {
    long n = 0;
    for (long count : counts.values()) {
      if (count < 0) {
        throw new IllegalStateException("page_stats: a time on page was retracted more often than counted");
      }
      n += count;
    }
    if (n == 0) {
      return null;
    }
    double position = (n - 1) * 0.5;
    long lower = (long) Math.floor(position);
    long higher = (long) Math.ceil(position);
    Long lowerValue = null;
    Long higherValue = null;
    long before = 0;
    for (Map.Entry<Long, Long> e : counts.entrySet()) {
      before += e.getValue();
      if (lowerValue == null && before > lower) {
        lowerValue = e.getKey();
      }
      if (before > higher) {
        higherValue = e.getKey();
        break;
      }
    }
    if (higher == lower || higherValue.equals(lowerValue)) {
      return (long) (double) lowerValue;
    }
    return (long) ((higher - position) * lowerValue + (position - lower) * higherValue);
  }

  /** The value at 0-based rank {@code rank} of the group's times. */
  long nth(long rank) {
    long before = 0;
    for (Map.Entry<Long, Long> range : rangeCounts.entrySet()) {
      if (before + range.getValue() <= rank) {
        before += range.getValue();
        continue;
      }
      for (Map.Entry<Long, Long> bucket : level(indexKey(range.getKey())).entrySet()) {
        if (before + bucket.getValue() <= rank) {
          before += bucket.getValue();
          continue;
        }
        for (Map.Entry<Long, Long> value : level(bucketKey(bucket.getKey())).entrySet()) {
          before += value.getValue();
          if (before > rank) {
            return value.getKey();
          }
        }
        break;
      }
      break;
    }
    throw new IllegalStateException("page_stats: the counts of a group's times on page disagree");
  }

  /**
   * Moves a group from the layout before this one: each range's times (under the range as key) into their
   * buckets and the range's index. The range counts are the same in both layouts.
   */
  void migrateLegacy() {
    for (long range : rangeCounts.keySet()) {
      byte[] stored = store.get(range);
      if (stored == null) {
        throw new IllegalStateException("page_stats: a group's summary counts a range its state does not hold");
      }
      store.remove(range);
      for (Map.Entry<Long, Long> value : decode(stored).entrySet()) {
        place(value.getKey(), value.getValue());
      }
    }
  }

  /** A level's value: how many entries, then each entry and its count. Also the legacy range's layout. */
  static byte[] encode(TreeMap<Long, Long> counts) {
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

  static TreeMap<Long, Long> decode(byte[] stored) {
    TreeMap<Long, Long> counts = new TreeMap<>();
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
}
