package io.kappa.operators;

import java.io.ByteArrayOutputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
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

  /** An event that a late version may still correct, with the version last emitted for it (null: none). */
  static final class Held {
    final Event event;
    Long answer;

    Held(Event event, Long answer) {
      this.event = event;
      this.answer = answer;
    }
  }

  /** What is kept per key between batches. */
  static final class State {
    final List<Version> versions = new ArrayList<>(); // sorted by (validFrom, version)
    final LinkedHashMap<String, Held> held = new LinkedHashMap<>(); // insertion order, as a Python dict
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

  /** Apply one key's next versions and events (each in log order) to its state. Mutates {@code state}. */
  static Changes apply(
      State state, List<Version> versions, List<Event> events, long latenessMs, long disorderMs) {
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
      state.held.put(e.id(), new Held(e, best == null ? null : best.version()));
      state.frontierMs = max(state.frontierMs, e.timeMs());
      newIds.add(e.id());
    }
    if (changed) { // held events whose answer a new version changes
      for (Map.Entry<String, Held> entry : state.held.entrySet()) {
        if (newIds.contains(entry.getKey())) {
          continue;
        }
        Held h = entry.getValue();
        Version best = answer(h.event.timeMs(), state.versions, latenessMs);
        Long version = best == null ? null : best.version();
        if (!Objects.equals(version, h.answer)) {
          h.answer = version;
          emit.add(new Answer(h.event, best));
        }
      }
    }
    settle(state, latenessMs, disorderMs);
    return new Changes(emit, late);
  }

  /** Forget events no version can correct any more (by the contract); remember how far that reached. */
  private static void settle(State state, long latenessMs, long disorderMs) {
    if (state.frontierMs == null) {
      return;
    }
    long horizon = state.frontierMs - latenessMs - disorderMs;
    Iterator<Held> it = state.held.values().iterator();
    while (it.hasNext()) {
      Held h = it.next();
      if (h.event.timeMs() < horizon) {
        it.remove();
        state.settledThroughMs = max(state.settledThroughMs, h.event.timeMs());
      }
    }
  }

  private static Long max(Long a, long b) {
    return a == null ? b : Math.max(a, b);
  }

  // The state as bytes (one value per key in Spark's state store): a versioned, compact layout.

  private static final int FORMAT = 1;

  static byte[] serialize(State state) {
    ByteArrayOutputStream bytes = new ByteArrayOutputStream(256);
    try (DataOutputStream out = new DataOutputStream(bytes)) {
      out.writeByte(FORMAT);
      out.writeInt(state.versions.size());
      for (Version v : state.versions) {
        out.writeLong(v.version());
        out.writeLong(v.validFromMs());
        out.writeLong(v.publishedMs());
        Bytes.writeStrings(out, v.payload());
      }
      out.writeInt(state.held.size());
      for (Held h : state.held.values()) {
        Bytes.writeString(out, h.event.id());
        out.writeLong(h.event.timeMs());
        Bytes.writeStrings(out, h.event.payload());
        Bytes.writeLong(out, h.answer);
      }
      Bytes.writeLong(out, state.frontierMs);
      Bytes.writeLong(out, state.settledThroughMs);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return bytes.toByteArray();
  }

  static State deserialize(byte[] data) {
    return Bytes.decode("as-of", FORMAT, data, in -> {
      State state = new State();
      int versions = in.readInt();
      for (int i = 0; i < versions; i++) {
        state.versions.add(new Version(in.readLong(), in.readLong(), in.readLong(), Bytes.readStrings(in)));
      }
      int held = in.readInt();
      for (int i = 0; i < held; i++) {
        Event e = new Event(Bytes.readString(in), in.readLong(), Bytes.readStrings(in));
        state.held.put(e.id(), new Held(e, Bytes.readLong(in)));
      }
      state.frontierMs = Bytes.readLong(in);
      state.settledThroughMs = Bytes.readLong(in);
      return state;
    });
  }
}
