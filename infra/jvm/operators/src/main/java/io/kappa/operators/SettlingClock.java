package io.kappa.operators;

import java.io.ByteArrayOutputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;

/**
 * page_stats' clock (bounded): when no record that still counts can change a (page, hour), that group is
 * <em>settled</em> and its state can go. It is {@code T = min over the clicks partitions p of (the largest stamp
 * seen from p) - L - 2 gap}: enrich_clicks writes a partition's first emissions in offset order, so a record read
 * later that is not late has a stamp at least its partition's largest, and touches no time before {@code T}
 * (docs/bounded_view_state.md, "The rule"). A partition that has given no stamp yet keeps {@code T} unknown:
 * nothing settles, which is safe, only not bounded.
 *
 * <p>It keeps each partition's largest stamp, the hours still open and each open hour's pages (what it must tell
 * to settle), and the {@code T} it last settled through. This class knows nothing of Spark: {@link
 * ClickGapsProcessor} runs it under a key of its own, fed by the rows {@link PageStats} adds per task.
 */
final class SettlingClock implements Serializable {
  private static final long serialVersionUID = 1L;

  private static final int FORMAT = 1;

  private final int partitions; // the clicks partitions the stamps come from (their declared count)
  private final long boundMs; // L + 2 gap
  private final long hourMs;

  SettlingClock(int partitions, long latenessMs, long gapMs, long hourMs) {
    if (partitions < 1) {
      throw new IllegalArgumentException("page_stats: the stamps' partition count must be positive, got " + partitions);
    }
    this.partitions = partitions;
    this.boundMs = latenessMs + 2 * gapMs;
    this.hourMs = hourMs;
  }

  /** The clock's own value. */
  static final class State {
    final TreeMap<Integer, Long> largestStamps = new TreeMap<>(); // clicks partition -> its largest stamp seen
    final TreeSet<Long> openHours = new TreeSet<>(); // hours (their start) with pages not settled yet
    Long settledThroughMs; // the T of the last batch that settled: every hour ending by it is settled

    byte[] write() {
      ByteArrayOutputStream bytes = new ByteArrayOutputStream(32 + 12 * largestStamps.size() + 8 * openHours.size());
      try (DataOutputStream out = new DataOutputStream(bytes)) {
        out.writeByte(FORMAT);
        out.writeInt(largestStamps.size());
        for (Map.Entry<Integer, Long> e : largestStamps.entrySet()) {
          out.writeInt(e.getKey());
          out.writeLong(e.getValue());
        }
        out.writeInt(openHours.size());
        for (long hour : openHours) {
          out.writeLong(hour);
        }
        Bytes.writeLong(out, settledThroughMs);
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
      return bytes.toByteArray();
    }

    static State read(byte[] stored) {
      return Bytes.decode("page_stats clock", FORMAT, stored, in -> {
        State s = new State();
        int n = in.readInt();
        for (int i = 0; i < n; i++) {
          s.largestStamps.put(in.readInt(), in.readLong());
        }
        int hours = in.readInt();
        for (int i = 0; i < hours; i++) {
          s.openHours.add(in.readLong());
        }
        s.settledThroughMs = Bytes.readLong(in);
        return s;
      });
    }
  }

  /** A (page, hour) to settle. */
  record Group(String page, long hourMs) {}

  /**
   * One batch: the largest stamp each task saw per clicks partition, and the (page, hour)s its clicks fall in
   * (their hour's start). Registers the groups not settled yet, advances {@code T}, and -> the groups it settles
   * now, each once: their hour ended at or before {@code T}.
   */
  List<Group> advance(State state, BytesByLong pagesByHour, Map<Integer, Long> stamps, Map<Long, LinkedHashSet<String>> groups) {
    stamps.forEach((partition, stamp) -> state.largestStamps.merge(partition, stamp, Math::max));
    Long before = state.settledThroughMs;
    for (Map.Entry<Long, LinkedHashSet<String>> e : groups.entrySet()) {
      long hour = e.getKey();
      // An hour already settled gets no click that counts (a record of it now is late, or a re-emission that
      // changes nothing): not opened again.
      if (before != null && hour + hourMs <= before) {
        continue;
      }
      LinkedHashSet<String> pages = readPages(pagesByHour.get(hour));
      if (pages.addAll(e.getValue())) {
        pagesByHour.put(hour, writePages(pages));
      }
      state.openHours.add(hour);
    }
    Long through = settledThrough(state);
    List<Group> settle = new ArrayList<>();
    if (through == null) {
      return settle;
    }
    while (!state.openHours.isEmpty() && state.openHours.first() + hourMs <= through) {
      long hour = state.openHours.pollFirst();
      for (String page : readPages(pagesByHour.get(hour))) {
        settle.add(new Group(page, hour));
      }
      pagesByHour.remove(hour);
    }
    state.settledThroughMs = before == null ? through : Math.max(before, through);
    return settle;
  }

  /** {@code T}, or null while a partition has given no stamp. */
  Long settledThrough(State state) {
    if (state.largestStamps.size() < partitions) {
      return null;
    }
    long least = Long.MAX_VALUE;
    for (int p = 0; p < partitions; p++) {
      Long stamp = state.largestStamps.get(p);
      if (stamp == null) { // a partition beyond the declared count gave stamps, one of the declared none
        return null;
      }
      least = Math.min(least, stamp);
    }
    return least - boundMs;
  }

  static LinkedHashSet<String> readPages(byte[] stored) {
    LinkedHashSet<String> pages = new LinkedHashSet<>();
    if (stored == null) {
      return pages;
    }
    return Bytes.decode("page_stats clock's pages", FORMAT, stored, in -> {
      int n = in.readInt();
      for (int i = 0; i < n; i++) {
        pages.add(Bytes.readString(in)); // a click without a page counts in the group (null, hour)
      }
      return pages;
    });
  }

  static byte[] writePages(LinkedHashSet<String> pages) {
    ByteArrayOutputStream bytes = new ByteArrayOutputStream(8 + 24 * pages.size());
    try (DataOutputStream out = new DataOutputStream(bytes)) {
      out.writeByte(FORMAT);
      out.writeInt(pages.size());
      for (String page : pages) {
        Bytes.writeString(out, page);
      }
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return bytes.toByteArray();
  }
}
