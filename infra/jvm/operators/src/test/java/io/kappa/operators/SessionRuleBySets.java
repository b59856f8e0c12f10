package io.kappa.operators;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Objects;
import java.util.Set;

/**
 * The sessionization rule as it was before SessionIds (commit 4834137): each session holds the set of its event
 * ids, exactly as jobs/sessionize/logic.py's Session.event_ids does. Kept in the tests as the model that
 * {@link SessionRuleTest} holds SessionRule and its ids in the state store equal to, batch after batch.
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
    Set<String> eventIds = new HashSet<>(); // clicks in the session: a repeat of one is a correction

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
      eventIds.add(e.id());
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
      eventIds.addAll(other.eventIds);
    }
  }

  /** What is kept per key between batches. */
  static final class State {
    Long latestMs;
    long seen; // events of this key processed so far (log position)
    final LinkedHashMap<String, Session> open = new LinkedHashMap<>();
  }

  record Changes(
      List<Session> upserts, List<String> retractions, List<SessionRule.Event> late, List<Session> finals) {}

  /** Apply one key's next events (in log order) to its state; what to emit. Mutates {@code state}. */
  static Changes apply(String key, State state, List<SessionRule.Event> events, long gapMs, long latenessMs) {
    LinkedHashMap<String, Session> changed = new LinkedHashMap<>();
    List<String> retracted = new ArrayList<>();
    List<SessionRule.Event> late = new ArrayList<>();
    for (SessionRule.Event e : events) {
      Session containing = null;
      for (Session s : state.open.values()) {
        if (s.eventIds.contains(e.id())) {
          containing = s;
          break;
        }
      }
      if (containing != null) { // a correction of a click already counted
        if (Objects.equals(containing.firstEventId, e.id())
            && !Objects.equals(containing.segment, e.segment())) {
          containing.segment = e.segment();
          changed.put(containing.sessionId, containing);
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
        session.eventIds.add(e.id());
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
    long horizon = state.latestMs - latenessMs - gapMs;
    state.open.values().removeIf(s -> s.endMs < horizon && forgotten.add(s));
    forgotten.sort(Comparator.comparingLong(s -> s.createdSeq));
    return forgotten;
  }

}
