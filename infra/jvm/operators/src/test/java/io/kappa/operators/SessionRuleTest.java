package io.kappa.operators;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import org.junit.jupiter.api.Test;

/**
 * SessionRule against jobs/sessionize/logic.py, on cases worked out by hand from that file's rule: an event
 * joins every open session it is within G of (inclusive), several merge into the one created first in log
 * order, an event more than A behind the user's latest time is late, a repeated event id is a correction,
 * and a session is forgotten once it ends more than A + G before the latest time. G = 10, A = 100.
 */
class SessionRuleTest {
  private static final long G = 10;
  private static final long A = 100;

  private static SessionRule.Event e(String id, long time, String page) {
    return new SessionRule.Event(id, time, page, "S-" + id);
  }

  private static SessionRule.Changes run(SessionRule.State state, SessionRule.Event... events) {
    return SessionRule.apply("u", state, List.of(events), G, A);
  }

  /** id [start, end] clicks pages entry>exit segment, per upsert. */
  private static List<String> upserts(SessionRule.Changes changes) {
    List<String> out = new ArrayList<>();
    for (SessionRule.Session s : changes.upserts()) {
      out.add(
          s.sessionId + " [" + s.startMs + "," + s.endMs + "] " + s.clicks + " " + s.pages.size() + " "
              + s.entryPage + ">" + s.exitPage + " " + s.segment);
    }
    return out;
  }

  /** The batch merged two sessions: {@code kept} is the one upsert, {@code retracted} the one retraction. */
  private static void assertMerged(String kept, String retracted, SessionRule.Changes changes) {
    assertEquals(List.of(kept), upserts(changes));
    assertEquals(List.of(retracted), changes.retractions());
  }

  private static List<String> late(SessionRule.Changes changes) {
    List<String> out = new ArrayList<>();
    for (SessionRule.Event ev : changes.late()) {
      out.add(ev.id());
    }
    return out;
  }

  @Test
  void aGapExactlyEqualToGJoinsOneMoreStartsANewSession() {
    SessionRule.State state = new SessionRule.State();
    SessionRule.Changes changes = run(state, e("e1", 0, "a"), e("e2", 10, "b"), e("e3", 21, "c"));
    assertEquals(List.of("u:e1 [0,10] 2 2 a>b S-e1", "u:e3 [21,21] 1 1 c>c S-e3"), upserts(changes));
    assertEquals(List.of(), changes.retractions());
    assertEquals(3L, state.seen);
    assertEquals(21L, state.latestMs);
  }

  @Test
  void anEarlierEventWithinGBecomesTheEntryAndTheSessionKeepsItsId() {
    SessionRule.State state = new SessionRule.State();
    run(state, e("e1", 100, "a"));
    SessionRule.Changes changes = run(state, e("e0", 90, "z")); // exactly G before the start
    assertEquals(List.of("u:e1 [90,100] 2 2 z>a S-e0"), upserts(changes), "the first click's segment");
  }

  @Test
  void anEventTouchingTwoSessionsMergesThemIntoTheOneCreatedFirst() {
    SessionRule.State state = new SessionRule.State();
    assertEquals(2, run(state, e("e1", 0, "a"), e("e2", 20, "b")).upserts().size());
    SessionRule.Changes changes = run(state, e("e3", 10, "c")); // within G of both
    assertMerged("u:e1 [0,20] 3 3 a>b S-e1", "u:e2", changes);
    assertEquals(Set.of("u:e1"), state.open.keySet());
  }

  @Test
  void aSessionMergedAwayInTheBatchThatCreatedItIsRetractedNotUpserted() {
    SessionRule.Changes changes =
        run(new SessionRule.State(), e("e1", 0, "a"), e("e2", 20, "b"), e("e3", 10, "c"));
    assertMerged("u:e1 [0,20] 3 3 a>b S-e1", "u:e2", changes);
  }

  @Test
  void theMergeOrderIsLogOrderNotTimeOrder() {
    SessionRule.State state = new SessionRule.State();
    // e1 (time 20) creates the first session, e2 (time 0) the second: then e3 (time 10) joins them.
    SessionRule.Changes changes = run(state, e("e1", 20, "x"), e("e2", 0, "y"), e("e3", 10, "z"));
    // the id is e1's, the entry page and the segment are those of the earliest click (e2), the exit e1's
    assertMerged("u:e1 [0,20] 3 3 y>x S-e2", "u:e2", changes);
  }

  @Test
  void anEventMoreThanABehindTheLatestIsLateAndChangesNothing() {
    SessionRule.State state = new SessionRule.State();
    SessionRule.Changes changes = run(state, e("e1", 1000, "a"), e("e2", 900, "b"), e("e3", 899, "c"));
    assertEquals(List.of("u:e1 [1000,1000] 1 1 a>a S-e1", "u:e2 [900,900] 1 1 b>b S-e2"), upserts(changes),
        "900 is exactly A behind 1000: not late");
    assertEquals(List.of("e3"), late(changes));
    assertEquals(3L, state.seen, "a late event still takes its log position");
    assertEquals(1000L, state.latestMs);
  }

  @Test
  void aRepeatedFirstClickWithANewSegmentCorrectsTheSessionAndCountsNothing() {
    SessionRule.State state = new SessionRule.State();
    run(state, e("e1", 0, "a"), e("e2", 5, "b"));
    SessionRule.Changes changes =
        run(state, new SessionRule.Event("e1", 0, "a", "GOLD"), new SessionRule.Event("e2", 5, "b", "SILVER"));
    assertEquals(List.of("u:e1 [0,5] 2 2 a>b GOLD"), upserts(changes), "only the first click sets the segment");
    assertEquals(2L, state.seen, "a correction takes no log position");
    assertEquals(
        List.of(), upserts(run(state, new SessionRule.Event("e1", 0, "a", "GOLD"))), "same segment: nothing");
  }

  @Test
  void aSessionIsForgottenOnlyOnceItEndsMoreThanAPlusGBeforeTheLatest() {
    SessionRule.State kept = new SessionRule.State();
    run(kept, e("e1", 0, "a"), e("e9", 110, "z")); // horizon 110 - 110 = 0: a session ending at 0 stays
    assertEquals(Set.of("u:e1", "u:e9"), kept.open.keySet());
    assertEquals(
        List.of("u:e1 [0,0] 1 1 a>a GOLD"),
        upserts(run(kept, new SessionRule.Event("e1", 0, "a", "GOLD"))),
        "still open: corrected");

    SessionRule.State forgot = new SessionRule.State();
    run(forgot, e("e1", 0, "a"), e("e9", 111, "z")); // horizon 1
    assertEquals(Set.of("u:e9"), forgot.open.keySet());
    SessionRule.Changes changes = run(forgot, new SessionRule.Event("e1", 0, "a", "GOLD"));
    assertEquals(List.of(), upserts(changes));
    assertEquals(List.of("e1"), late(changes), "a correction of a forgotten session is late");
  }

  @Test
  void aFirstBatchWithNoEventsLeavesAnEmptyState() {
    SessionRule.State state = new SessionRule.State();
    SessionRule.Changes changes = run(state);
    assertEquals(List.of(), changes.upserts());
    assertNull(state.latestMs);
    assertEquals(0L, state.seen);
  }
}
