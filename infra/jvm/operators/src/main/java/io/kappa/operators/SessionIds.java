package io.kappa.operators;

import java.util.HashMap;
import java.util.Map;

/**
 * One key's event ids in its sessions ({@link SessionRule}: an id seen again is a correction), kept in the
 * state store as an index from id to event time beside the key's value, so that a batch writes the ids it adds
 * and removes the ids it forgets, not every open session's ids (a session open for an hour holds 1,800 of a user
 * who clicks every 2 s, and the rule's value was rewritten whole by each batch that touched the user).
 *
 * <p>An id's time is enough to tell whether its session is still open. Sessions in state never overlap in
 * time (an event within G of two merges them), and the horizon that forgets a session is one for all of a
 * key's sessions and only moves forward, so a forgotten session ended before every session open with or after
 * it starts (a later one starts past the forgotten one's end plus G, or its event would have been late). So an
 * id is in an open session exactly when it is indexed at a time at or after the earliest open session's start,
 * and the entries before that start can be removed: the batch that forgets a session reads the key's index once
 * and removes them. (This needs G >= 0, which {@link Sessions#apply} checks.)
 *
 * <p>A batch's lookups are a get each, or one scan of the key's whole index when it holds at most
 * {@link #SCAN_PER_LOOKUP} entries per event of the batch (a replay's batch brings tens of a key's events, and
 * its index holds about as many; a live batch brings one, beside an hour-long session's 1,800). The value keeps
 * the count of entries and the earliest time indexed, so that choosing, and knowing that nothing is to be
 * removed, cost nothing.
 */
final class SessionIds {
  // A scan reads an entry for a fraction of a get's cost (the store's iterator against a lookup each).
  static final int SCAN_PER_LOOKUP = 4;
  static final long UNKNOWN = -1;

  private final LongById index; // id -> its time
  private long indexed; // entries in the index, or UNKNOWN (a value written before the count was kept)
  private Long earliestMs; // no entry is earlier (null: no entry)
  private final Map<String, Long> added = new HashMap<>(); // this batch's ids and their times
  private final Map<String, Long> indexRead = new HashMap<>(); // the entries read (null: none), kept up to date
  private boolean wholeIndexRead; // indexRead holds every entry: an id it lacks has none

  SessionIds(LongById index, long indexed, Long earliestMs) {
    this.index = index;
    this.indexed = indexed;
    this.earliestMs = earliestMs;
  }

  /** The index's entries after {@link #flush} (never {@link #UNKNOWN} after a batch). */
  long indexed() {
    return indexed;
  }

  /** No entry of the index is earlier than this after {@link #flush}; null when none is left. */
  Long earliestMs() {
    return earliestMs;
  }

  /**
   * Before a batch of {@code lookups} events: reads the whole index in one scan when that is cheaper than a get
   * per event, or when its size is unknown (which the scan then learns).
   */
  void expectLookups(int lookups) {
    if (indexed == UNKNOWN || (indexed > 0 && indexed <= (long) SCAN_PER_LOOKUP * lookups)) {
      readWholeIndex();
    }
  }

  private void readWholeIndex() {
    indexRead.clear();
    index.forEach(indexRead::put);
    wholeIndexRead = true;
    indexed = indexRead.size();
    earliestMs = indexRead.values().stream().min(Long::compare).orElse(null);
  }

  /** The time {@code id} was added at, or null if it never was or its entry was removed. */
  Long timeOf(String id) {
    if (id == null) { // the state store keys by id: none is no key (the input's contract makes it required)
      throw new IllegalStateException("sessions: an event without an event_id cannot be told from its repeats");
    }
    Long time = added.get(id);
    if (time != null || indexed == 0) { // an empty index: no read (a key's first batch)
      return time;
    }
    if (!wholeIndexRead && !indexRead.containsKey(id)) {
      indexRead.put(id, index.get(id));
    }
    return indexRead.get(id);
  }

  /** An event of a session, looked up first ({@link #timeOf}): its id is kept until its session is forgotten. */
  void add(String id, long timeMs) {
    added.put(id, timeMs);
  }

  /**
   * Removes the entries before {@code earliestOpenStartMs} (all of them when it is null: no session open), then
   * writes this batch's ids: an id added and forgotten in one batch (a replay's) costs nothing.
   */
  void flush(Long earliestOpenStartMs) {
    long keepFrom = earliestOpenStartMs == null ? Long.MAX_VALUE : earliestOpenStartMs;
    added.values().removeIf(time -> time < keepFrom);
    if (indexed != 0 && (earliestMs == null || earliestMs < keepFrom)) { // some entry may be stale
      if (!wholeIndexRead) {
        readWholeIndex();
      }
      Long earliestKept = null;
      for (Map.Entry<String, Long> entry : indexRead.entrySet()) {
        Long time = entry.getValue();
        if (time == null || added.containsKey(entry.getKey())) { // none, or written again below at a kept time
          continue;
        }
        if (time >= keepFrom) {
          earliestKept = earliestKept == null ? time : Math.min(earliestKept, time);
        } else {
          index.remove(entry.getKey());
          entry.setValue(null);
          indexed -= 1;
        }
      }
      earliestMs = earliestKept;
    }
    for (Map.Entry<String, Long> entry : added.entrySet()) {
      // indexRead knows each added id's entry: it was looked up, or the index was empty then
      if (indexRead.get(entry.getKey()) == null) {
        indexed += 1;
      }
      index.put(entry.getKey(), entry.getValue());
      earliestMs = earliestMs == null ? entry.getValue() : Math.min(earliestMs, entry.getValue());
    }
    added.clear(); // flushed once a batch; cleared so that a second flush writes nothing again
    indexRead.clear();
    wholeIndexRead = false;
  }
}
