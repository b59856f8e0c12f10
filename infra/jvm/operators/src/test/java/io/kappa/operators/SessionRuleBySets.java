package io.kappa.operators;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;

/**
 * The sessionization rule without SessionIds' buckets: every counted click's time in one map per key, exactly as
 * jobs/sessionize/logic.py's UserState.click_times (the layout before commit 4834137 kept a set of ids per
 * session). Kept in the tests as the model that {@link SessionRuleTest} holds SessionRule and its ids in the
 * state store equal to, batch after batch.
 */
final class SessionRuleBySets {
  private SessionRuleBySets() {}

  
  static final class Session {
    String sessionId;
    long startMs;
    long endMs;
    int clicks;
    Set<String> pages = new HashSet<>();
    String entryPage;
    String exitPage;
    long createdSeq; // position in the key's log of the event that created it: merge order
    String segment; // the segment at the session's first click
    String firstEventId; // the session's first click (by event time)

    void absorb(SessionRule.Event e) {
      boolean first = e.timeMs() < startMs;
      boolean last = e.timeMs() >= endMs;
      startMs = Math.min(startMs, e.timeMs());
      endMs = Math.max(endMs, e.timeMs());
      clicks += 1;
      pages.add(e.page());
      if (first) {
        entryPage = e.page();
        segment = e.segment();
        firstEventId = e.id();
      }
      if (last) {
        exitPage = e.page();
      }
    }

    void merge(Session other) {
      Session first = startMs <= other.startMs ? this : other;
      Session latest = endMs >= other.endMs ? this : other;
      String entry = first.entryPage;
      String seg = first.segment;
      String firstId = first.firstEventId;
      String exit = latest.exitPage;
      startMs = first.startMs;
      endMs = latest.endMs;
      clicks += other.clicks;
      pages.addAll(other.pages);
      entryPage = entry;
      exitPage = exit;
      segment = seg;
      firstEventId = firstId;
    }
  }

  /** What is kept per key between batches. */
  static final class State {
    Long latestMs;
    long seen; // events of this key processed so far (log position)
    final LinkedHashMap<String, Session> open = new LinkedHashMap<>();
    final Map<String, Long> clickTimes = new HashMap<>(); // counted clicks' times, while within A of the latest
  }

  record Changes(
      List<Session> upserts, List<String> retractions, List<SessionRule.Event> late, List<Session> finals) {}

  /** Apply one key's next events (in log order) to its state; what to emit. Mutates {@code state}. */
  static Changes apply(String key, State state, List<SessionRule.Event> events, long gapMs, long latenessMs) {
    LinkedHashMap<String, Session> changed = new LinkedHashMap<>();
    List<String> retracted = new ArrayList<>();
    List<SessionRule.Event> late = new ArrayList<>();
    for (SessionRule.Event e : events) {
      Long countedAt = state.clickTimes.get(e.id());
      // a correction of a click counted within A of the latest time (an older one is judged as a new event)
      if (countedAt != null && state.latestMs != null && countedAt >= state.latestMs - latenessMs) {
        for (Session s : state.open.values()) {
          if (Objects.equals(s.firstEventId, e.id()) && !Objects.equals(s.segment, e.segment())) {
            s.segment = e.segment();
            changed.put(s.sessionId, s);
          }
        }
        continue;
      }
      long seq = state.seen;
      state.seen += 1;
      if (state.latestMs != null && e.timeMs() < state.latestMs - latenessMs) {
        late.add(e);
        continue;
      }
      state.latestMs = state.latestMs == null ? e.timeMs() : Math.max(state.latestMs, e.timeMs());
      List<Session> touching = new ArrayList<>();
      for (Session s : state.open.values()) {
        if (s.startMs - gapMs <= e.timeMs() && e.timeMs() <= s.endMs + gapMs) {
          touching.add(s);
        }
      }
      touching.sort(Comparator.comparingLong(s -> s.createdSeq));
      Session session;
      if (touching.isEmpty()) {
        session = new Session();
        session.sessionId = key + ":" + e.id();
        session.startMs = e.timeMs();
        session.endMs = e.timeMs();
        session.clicks = 1;
        session.pages.add(e.page());
        session.entryPage = e.page();
        session.exitPage = e.page();
        session.createdSeq = seq;
        session.segment = e.segment();
        session.firstEventId = e.id();
      } else {
        session = touching.get(0);
        session.absorb(e);
        for (Session other : touching.subList(1, touching.size())) {
          session.merge(other);
          state.open.remove(other.sessionId);
          changed.remove(other.sessionId);
          retracted.add(other.sessionId);
        }
      }
      state.open.put(session.sessionId, session);
      state.clickTimes.put(e.id(), e.timeMs());
      changed.put(session.sessionId, session);
    }
    List<Session> finals = forgetSettled(state, gapMs, latenessMs);
    List<String> retractions = new ArrayList<>();
    for (String id : retracted) {
      if (!state.open.containsKey(id)) {
        retractions.add(id);
      }
    }
    List<Session> upserts = new ArrayList<>();
    for (Session s : changed.values()) {
      if (state.open.containsKey(s.sessionId)) {
        upserts.add(s);
      }
    }
    upserts.sort(Comparator.comparingLong(s -> s.createdSeq));
    return new Changes(upserts, retractions, late, finals);
  }

  private static List<Session> forgetSettled(State state, long gapMs, long latenessMs) {
    List<Session> forgotten = new ArrayList<>();
    if (state.latestMs == null) {
      return forgotten;
    }
    long correctable = state.latestMs - latenessMs;
    state.clickTimes.values().removeIf(t -> t < correctable);
    long horizon = state.latestMs - latenessMs - gapMs;
    state.open.values().removeIf(s -> s.endMs < horizon && forgotten.add(s));
    forgotten.sort(Comparator.comparingLong(s -> s.createdSeq));
    return forgotten;
  }

}
