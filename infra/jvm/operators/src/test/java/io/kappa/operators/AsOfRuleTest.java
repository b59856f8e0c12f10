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

  /** One key's state and its store, as the processor keeps them from batch to batch. */
  private static final class Key {
    final AsOfRule.State state = new AsOfRule.State();
    final MapStore store = new MapStore();

    AsOfRule.Changes apply(List<AsOfRule.Version> versions, List<AsOfRule.Event> events) {
      return AsOfRule.apply(state, store, store, versions, events, L, D);
    }

    /** The held events' ids, in their order. */
    List<String> held() {
      List<String> ids = new ArrayList<>();
      new HeldBuckets(store, store, state.held).inOrder().forEach(e -> ids.add(e.event.id()));
      return ids;
    }
  }

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
    Key key = new Key();
    AsOfRule.Changes changes =
        key.apply(List.of(v(3, 100, 100), v(1, 100, 100)), List.of(e("a", 150)));
    assertEquals(List.of("a=3"), answers(changes));
    List<Long> order = new ArrayList<>();
    for (AsOfRule.Version v : key.state.versions) {
      order.add(v.version());
    }
    assertEquals(List.of(1L, 3L), order, "versions kept sorted by (valid_from, version)");
  }

  @Test
  void newEventsAreEmittedFirstThenTheHeldEventsAVersionCorrects() {
    Key key = new Key();
    AsOfRule.Changes first = key.apply(List.of(), List.of(e("a", 100), e("b", 150)));
    assertEquals(List.of("a=none", "b=none"), answers(first), "no profile yet: emitted without one");
    assertEquals(150L, key.state.frontierMs);

    // v1 (valid from 120) arrives with a new event c: c first, then b's correction; a (at 100) keeps none.
    AsOfRule.Changes second = key.apply(List.of(v(1, 120, 130)), List.of(e("c", 160)));
    assertEquals(List.of("c=1", "b=1"), answers(second));
    assertEquals(List.of(), late(second));
    assertEquals(160L, key.state.frontierMs);
    assertEquals(List.of("a", "b", "c"), key.held(), "horizon 100: a at 100 stays");
    assertNull(key.state.settledThroughMs);

    AsOfRule.Changes again = key.apply(List.of(v(1, 120, 130)), List.of());
    assertEquals(List.of(), answers(again), "a re-delivered version changes nothing");
    assertEquals(1, key.state.versions.size());
  }

  @Test
  void anEventIsSettledOnlyWhenStrictlyOlderThanTheFrontierMinusLatenessAndDisorder() {
    Key key = new Key();
    // frontier 300, horizon 300 - 50 - 10 = 240
    key.apply(List.of(), List.of(e("a", 239), e("b", 240), e("z", 300)));
    assertEquals(List.of("b", "z"), key.held());
    assertEquals(239L, key.state.settledThroughMs);
  }

  /** An event at 100 settled (frontier 300), an event at 300 held. */
  private static Key settledAt100() {
    Key key = new Key();
    key.apply(List.of(), List.of(e("a", 100)));
    key.apply(List.of(), List.of(e("z", 300)));
    assertEquals(100L, key.state.settledThroughMs);
    assertEquals(List.of("z"), key.held());
    return key;
  }

  @Test
  void aVersionThatAppliesToASettledEventIsLateAndStillApplied() {
    Key key = settledAt100();
    // valid from 90 <= 100 and published 140 <= 100 + L: it was visible to a, which is gone
    AsOfRule.Changes changes = key.apply(List.of(v(5, 90, 140)), List.of());
    assertEquals(List.of(5L), late(changes));
    assertEquals(List.of("z=5"), answers(changes), "the held event still gets it");
    assertEquals(1, key.state.versions.size());
  }

  @Test
  void theLateBoundariesAreInclusive() {
    assertEquals(
        List.of(6L),
        late(settledAt100().apply(List.of(v(6, 100, 150)), List.of())),
        "valid from exactly the settled time, published exactly settled + L: late");
    assertEquals(
        List.of(),
        late(settledAt100().apply(List.of(v(7, 101, 101)), List.of())),
        "valid after every settled event: not late");
    assertEquals(
        List.of(),
        late(settledAt100().apply(List.of(v(8, 90, 151)), List.of())),
        "published after settled + L: never visible to a settled event, not late");
  }

  @Test
  void aLateEventGetsTheVersionVisibleAtItsOwnTime() {
    Key key = new Key();
    key.apply(List.of(v(1, 0, 0), v(2, 500, 500)), List.of(e("new", 600)));
    // an event from before v2, arriving after it: v1, whatever arrived since
    AsOfRule.Changes changes = key.apply(List.of(), List.of(e("old", 499)));
    assertEquals(List.of("old=1"), answers(changes));
    assertFalse(key.held().contains("old"), "499 < 600 - 60: emitted once, then settled at once");
    assertEquals(499L, key.state.settledThroughMs);
  }
}
