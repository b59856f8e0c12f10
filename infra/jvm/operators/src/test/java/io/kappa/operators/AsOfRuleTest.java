package io.kappa.operators;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;

import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * AsOfRule against jobs/enrich_clicks/logic.py, on cases worked out by hand from that file's rule: a version
 * is visible to an event when valid_from <= t and published <= t + L; the event gets the visible version with
 * the greatest (valid_from, version); an event is held until the frontier is L + D past it; a new version
 * that applies to a settled event is late. L = 50 and D = 10 throughout.
 */
class AsOfRuleTest {
  private static final long L = 50;
  private static final long D = 10;

  private static AsOfRule.Version v(long version, long validFrom, long published) {
    return new AsOfRule.Version(version, validFrom, published, new String[] {"segment-" + version});
  }

  private static AsOfRule.Event e(String id, long time) {
    return new AsOfRule.Event(id, time, new String[] {"page-" + id});
  }

  /** (event id, version or null) per emitted answer, in emit order. */
  private static List<String> answers(AsOfRule.Changes changes) {
    List<String> out = new ArrayList<>();
    for (AsOfRule.Answer a : changes.emit()) {
      out.add(a.event().id() + "=" + (a.version() == null ? "none" : a.version().version()));
    }
    return out;
  }

  private static List<Long> late(AsOfRule.Changes changes) {
    List<Long> out = new ArrayList<>();
    for (AsOfRule.Version v : changes.late()) {
      out.add(v.version());
    }
    return out;
  }

  private static Long answerAt(long time, List<AsOfRule.Version> sorted) {
    AsOfRule.Version best = AsOfRule.answer(time, sorted, L);
    return best == null ? null : best.version();
  }

  @Test
  void aVersionIsVisibleFromItsValidFromAndWhenPublishedWithinTheLateness() {
    // v1 valid from 100, published on time; v2 valid from 200 but published 60 later (> L).
    List<AsOfRule.Version> sorted = List.of(v(1, 100, 100), v(2, 200, 260));
    assertNull(answerAt(99, sorted), "before any valid-from: no version");
    assertEquals(1L, answerAt(100, sorted), "a version valid exactly at the event time applies");
    assertEquals(1L, answerAt(200, sorted), "v2 is valid but published 260 > 200 + L: not visible yet");
    assertEquals(1L, answerAt(209, sorted), "260 > 209 + 50");
    assertEquals(2L, answerAt(210, sorted), "published exactly at t + L: visible");
    assertEquals(2L, answerAt(10_000, sorted));
  }

  @Test
  void onEqualValidFromTheGreaterVersionWinsWhateverTheArrivalOrder() {
    AsOfRule.State state = new AsOfRule.State();
    AsOfRule.Changes changes =
        AsOfRule.apply(state, List.of(v(3, 100, 100), v(1, 100, 100)), List.of(e("a", 150)), L, D);
    assertEquals(List.of("a=3"), answers(changes));
    List<Long> order = new ArrayList<>();
    for (AsOfRule.Version v : state.versions) {
      order.add(v.version());
    }
    assertEquals(List.of(1L, 3L), order, "versions kept sorted by (valid_from, version)");
  }

  @Test
  void newEventsAreEmittedFirstThenTheHeldEventsAVersionCorrects() {
    AsOfRule.State state = new AsOfRule.State();
    AsOfRule.Changes first = AsOfRule.apply(state, List.of(), List.of(e("a", 100), e("b", 150)), L, D);
    assertEquals(List.of("a=none", "b=none"), answers(first), "no profile yet: emitted without one");
    assertEquals(150L, state.frontierMs);

    // v1 (valid from 120) arrives with a new event c: c first, then b's correction; a (at 100) keeps none.
    AsOfRule.Changes second = AsOfRule.apply(state, List.of(v(1, 120, 130)), List.of(e("c", 160)), L, D);
    assertEquals(List.of("c=1", "b=1"), answers(second));
    assertEquals(List.of(), late(second));
    assertEquals(160L, state.frontierMs);
    assertEquals(List.of("a", "b", "c"), new ArrayList<>(state.held.keySet()), "horizon 100: a at 100 stays");
    assertNull(state.settledThroughMs);

    AsOfRule.Changes again = AsOfRule.apply(state, List.of(v(1, 120, 130)), List.of(), L, D);
    assertEquals(List.of(), answers(again), "a re-delivered version changes nothing");
    assertEquals(1, state.versions.size());
  }

  @Test
  void anEventIsSettledOnlyWhenStrictlyOlderThanTheFrontierMinusLatenessAndDisorder() {
    AsOfRule.State state = new AsOfRule.State();
    // frontier 300, horizon 300 - 50 - 10 = 240
    AsOfRule.apply(state, List.of(), List.of(e("a", 239), e("b", 240), e("z", 300)), L, D);
    assertEquals(List.of("b", "z"), new ArrayList<>(state.held.keySet()));
    assertEquals(239L, state.settledThroughMs);
  }

  /** An event at 100 settled (frontier 300), an event at 300 held. */
  private static AsOfRule.State settledAt100() {
    AsOfRule.State state = new AsOfRule.State();
    AsOfRule.apply(state, List.of(), List.of(e("a", 100)), L, D);
    AsOfRule.apply(state, List.of(), List.of(e("z", 300)), L, D);
    assertEquals(100L, state.settledThroughMs);
    assertEquals(List.of("z"), new ArrayList<>(state.held.keySet()));
    return state;
  }

  @Test
  void aVersionThatAppliesToASettledEventIsLateAndStillApplied() {
    AsOfRule.State state = settledAt100();
    // valid from 90 <= 100 and published 140 <= 100 + L: it was visible to a, which is gone
    AsOfRule.Changes changes = AsOfRule.apply(state, List.of(v(5, 90, 140)), List.of(), L, D);
    assertEquals(List.of(5L), late(changes));
    assertEquals(List.of("z=5"), answers(changes), "the held event still gets it");
    assertEquals(1, state.versions.size());
  }

  @Test
  void theLateBoundariesAreInclusive() {
    assertEquals(
        List.of(6L),
        late(AsOfRule.apply(settledAt100(), List.of(v(6, 100, 150)), List.of(), L, D)),
        "valid from exactly the settled time, published exactly settled + L: late");
    assertEquals(
        List.of(),
        late(AsOfRule.apply(settledAt100(), List.of(v(7, 101, 101)), List.of(), L, D)),
        "valid after every settled event: not late");
    assertEquals(
        List.of(),
        late(AsOfRule.apply(settledAt100(), List.of(v(8, 90, 151)), List.of(), L, D)),
        "published after settled + L: never visible to a settled event, not late");
  }

  @Test
  void aLateEventGetsTheVersionVisibleAtItsOwnTime() {
    AsOfRule.State state = new AsOfRule.State();
    AsOfRule.apply(state, List.of(v(1, 0, 0), v(2, 500, 500)), List.of(e("new", 600)), L, D);
    // an event from before v2, arriving after it: v1, whatever arrived since
    AsOfRule.Changes changes = AsOfRule.apply(state, List.of(), List.of(e("old", 499)), L, D);
    assertEquals(List.of("old=1"), answers(changes));
    assertFalse(state.held.containsKey("old"), "499 < 600 - 60: emitted once, then settled at once");
    assertEquals(499L, state.settledThroughMs);
  }
}
