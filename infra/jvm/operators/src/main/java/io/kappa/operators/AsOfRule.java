package io.kappa.operators;

import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Objects;
import java.util.Set;

/**
 * The as-of rule of jobs/enrich_clicks/logic.py for one key, step for step: that file is the specification
 * (visibility, the order of versions, what is emitted and in which order, when a click is settled, what is
 * late). This class knows nothing of Spark; {@link AsOfJoinProcessor} feeds it one key's rows per batch.
 *
 * <p>Names follow the generic operator: an <em>event</em> (a click) is joined with the <em>entity</em> version
 * (a profile version) visible at its event time. Payloads are opaque columns carried along.
 */
final class AsOfRule {
  private AsOfRule() {}

  record Version(long version, long validFromMs, long publishedMs, String[] payload) {}

  record Event(String id, long timeMs, String[] payload) {}

  /** What is kept per key between batches in its one value; its held events (the events a late version may
   * still correct) are kept beside it, by time bucket ({@link HeldBuckets}). */
  static final class State {
    final List<Version> versions = new ArrayList<>(); // sorted by (validFrom, version)
    final HeldBuckets.Head held = new HeldBuckets.Head();
    Long frontierMs; // greatest event time or version publish time seen
    Long settledThroughMs; // greatest event time of an event no longer held
  }

  record Answer(Event event, Version version) {}

  record Changes(List<Answer> emit, List<Version> late) {}

  /** The visible version with the greatest (validFrom, version), or null. */
  static Version answer(long eventTimeMs, List<Version> versions, long latenessMs) {
    int i = bisectRight(versions, eventTimeMs) - 1; // last version valid at the event's time
    while (i >= 0 && versions.get(i).publishedMs() > eventTimeMs + latenessMs) {
      i--; // published too long after this event: not visible to it
    }
    return i >= 0 ? versions.get(i) : null;
  }

  private static int bisectRight(List<Version> versions, long validFromMs) {
    int lo = 0;
    int hi = versions.size();
    while (lo < hi) {
      int mid = (lo + hi) >>> 1;
      if (validFromMs < versions.get(mid).validFromMs()) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    return lo;
  }

  private static int insertionPoint(List<Version> versions, Version v) {
    int lo = 0;
    int hi = versions.size();
    while (lo < hi) { // after every version ordered at or before v (bisect.insort_right)
      int mid = (lo + hi) >>> 1;
      Version m = versions.get(mid);
      boolean before =
          v.validFromMs() < m.validFromMs()
              || (v.validFromMs() == m.validFromMs() && v.version() < m.version());
      if (before) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    return lo;
  }

  /**
   * Apply one key's next versions and events (each in log order) to its state: {@code state} is changed, and
   * the held events in {@code buckets} and {@code index} (the key's, in the state store) are written back.
   */
  static Changes apply(
      State state,
      BytesByLong buckets,
      LongById index,
      List<Version> versions,
      List<Event> events,
      long latenessMs,
      long disorderMs) {
    HeldBuckets held = new HeldBuckets(buckets, index, state.held);
    List<Version> late = new ArrayList<>();
    boolean changed = false;
    Set<Long> known = new HashSet<>();
    for (Version v : state.versions) {
      known.add(v.version());
    }
    for (Version v : versions) {
      if (!known.add(v.version())) {
        continue; // a re-delivered version (at-least-once producer): nothing new
      }
      Long settled = state.settledThroughMs;
      if (settled != null && v.validFromMs() <= settled && v.publishedMs() <= settled + latenessMs) {
        late.add(v);
      }
      state.versions.add(insertionPoint(state.versions, v), v);
      state.frontierMs = max(state.frontierMs, v.publishedMs());
      changed = true;
    }

    List<Answer> emit = new ArrayList<>();
    Set<String> newIds = new HashSet<>();
    for (Event e : events) {
      Version best = answer(e.timeMs(), state.versions, latenessMs);
      emit.add(new Answer(e, best));
      held.put(e, best == null ? null : best.version());
      state.frontierMs = max(state.frontierMs, e.timeMs());
      newIds.add(e.id());
    }
    if (changed) { // held events whose answer a new version changes
      for (HeldBuckets.Entry h : held.inOrder()) { // in the order a Python dict keeps them
        if (newIds.contains(h.event.id())) {
          continue;
        }
        Version best = answer(h.event.timeMs(), state.versions, latenessMs);
        Long version = best == null ? null : best.version();
        if (!Objects.equals(version, h.answer)) {
          held.answer(h, version);
          emit.add(new Answer(h.event, best));
        }
      }
    }
    // Forget events no version can correct any more (by the contract); remember how far that reached.
    if (state.frontierMs != null) {
      Long settled = held.settle(state.frontierMs - latenessMs - disorderMs);
      if (settled != null) {
        state.settledThroughMs = max(state.settledThroughMs, settled);
      }
    }
    held.flush();
    return new Changes(emit, late);
  }

  private static Long max(Long a, long b) {
    return a == null ? b : Math.max(a, b);
  }

  // The state as bytes: a versioned, compact layout. Format 1 (enrich_clicks v1's first jars) also held the
  // events inline; no v2 checkpoint holds it (v2's state key differs: such a checkpoint is refused by Spark).

  private static final int FORMAT = 2;

  static byte[] serialize(State state) {
    ByteArrayOutputStream bytes = new ByteArrayOutputStream(256);
    try (DataOutputStream out = new DataOutputStream(bytes)) {
      out.writeByte(FORMAT);
      writeVersions(out, state.versions);
      Bytes.writeLong(out, state.frontierMs);
      Bytes.writeLong(out, state.settledThroughMs);
      out.writeLong(state.held.nextNumber);
      out.writeInt(state.held.buckets.size());
      for (long bucket : state.held.buckets) {
        out.writeLong(bucket);
      }
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return bytes.toByteArray();
  }

  static State deserialize(byte[] data) {
    return Bytes.decode("as-of", FORMAT, data, in -> {
      State state = new State();
      readVersions(in, state.versions);
      state.frontierMs = Bytes.readLong(in);
      state.settledThroughMs = Bytes.readLong(in);
      state.held.nextNumber = in.readLong();
      int buckets = in.readInt();
      if (buckets < 0 || buckets > in.available() / 8) {
        throw new EOFException();
      }
      for (int i = 0; i < buckets; i++) {
        state.held.buckets.add(in.readLong());
      }
      return state;
    });
  }

  private static void writeVersions(DataOutputStream out, List<Version> versions) throws IOException {
    out.writeInt(versions.size());
    for (Version v : versions) {
      out.writeLong(v.version());
      out.writeLong(v.validFromMs());
      out.writeLong(v.publishedMs());
      Bytes.writeStrings(out, v.payload());
    }
  }

  private static void readVersions(DataInputStream in, List<Version> into) throws IOException {
    int versions = in.readInt();
    for (int i = 0; i < versions; i++) {
      into.add(new Version(in.readLong(), in.readLong(), in.readLong(), Bytes.readStrings(in)));
    }
  }
}
