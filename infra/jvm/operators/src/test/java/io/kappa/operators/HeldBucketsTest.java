package io.kappa.operators;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.TreeSet;
import org.junit.jupiter.api.Test;

/**
 * HeldBuckets against the held events of jobs/enrich_clicks/logic.py, restated here as what they are there: a
 * dict (a LinkedHashMap) from event id to the event and its answer, settled by popping every event before the
 * horizon. Each batch runs on a new HeldBuckets over the same store, as Spark's batches do.
 */
class HeldBucketsTest {
  private record Held(AsOfRule.Event event, Long answer) {}

  private static AsOfRule.Event event(String id, long time) {
    return new AsOfRule.Event(id, time, new String[] {"/page/" + id, null});
  }

  private static List<String> ofModel(LinkedHashMap<String, Held> model) {
    List<String> out = new ArrayList<>();
    model.forEach((id, h) -> out.add(id + "@" + h.event().timeMs() + "=" + h.answer()));
    return out;
  }

  private static List<String> ofStore(MapStore store, HeldBuckets.Head head) {
    List<String> out = new ArrayList<>();
    for (HeldBuckets.Entry e : new HeldBuckets(store, store, head).inOrder()) {
      out.add(e.event.id() + "@" + e.event.timeMs() + "=" + e.answer);
    }
    return out;
  }

  @Test
  void everyBatchLeavesTheEventsTheDictWouldHoldInItsOrder() {
    Random random = new Random(41);
    LinkedHashMap<String, Held> model = new LinkedHashMap<>();
    MapStore store = new MapStore();
    HeldBuckets.Head head = new HeldBuckets.Head();
    long frontier = -5 * HeldBuckets.BUCKET_MS; // times before the epoch too: buckets round down
    List<String> ever = new ArrayList<>();
    for (int batch = 0; batch < 400; batch++) {
      HeldBuckets held = new HeldBuckets(store, store, head);
      for (int i = random.nextInt(12); i > 0; i--) {
        String id;
        if (!ever.isEmpty() && random.nextInt(4) == 0) { // again: held still, or settled already
          id = ever.get(random.nextInt(ever.size()));
        } else {
          id = "e" + ever.size();
          ever.add(id);
        }
        // Mostly near the frontier, some out of order by up to 3 buckets, some on a bucket's edge.
        long time = frontier - random.nextInt(Math.toIntExact(3 * HeldBuckets.BUCKET_MS));
        if (random.nextInt(10) == 0) {
          time = HeldBuckets.bucketOf(time) * HeldBuckets.BUCKET_MS - random.nextInt(2);
        }
        Long answer = random.nextInt(3) == 0 ? null : (long) random.nextInt(5);
        model.put(id, new Held(event(id, time), answer)); // a known id keeps its place, as in a dict
        held.put(event(id, time), answer);
        frontier = Math.max(frontier, time + random.nextInt(20_000));
      }
      if (random.nextInt(5) == 0) { // a new version: some held events get another answer
        for (HeldBuckets.Entry e : held.inOrder()) {
          if (random.nextInt(3) == 0) {
            Long answer = (long) (10 + random.nextInt(5));
            held.answer(e, answer);
            model.put(e.event.id(), new Held(e.event, answer));
          }
        }
      }
      long horizon = frontier - 2 * HeldBuckets.BUCKET_MS - random.nextInt(1000);
      Long greatest = null;
      for (Iterator<Held> it = model.values().iterator(); it.hasNext(); ) {
        Held h = it.next();
        if (h.event().timeMs() < horizon) {
          it.remove();
          greatest = greatest == null ? h.event().timeMs() : Math.max(greatest, h.event().timeMs());
        }
      }
      assertEquals(greatest, held.settle(horizon), "batch " + batch + ": the greatest time settled");
      held.flush();
      assertEquals(ofModel(model), ofStore(store, head), "batch " + batch);
      assertEquals(model.size(), store.index.size(), "batch " + batch + ": one index entry per held event");
      assertEquals(head.buckets, new TreeSet<>(store.values.keySet()), "batch " + batch);
    }
    assertTrue(ever.size() > 1000 && model.size() > 20, "the run held and settled many events");
  }

  @Test
  void aNewEventWritesItsBucketAndOneIndexEntryHoweverManyAreHeld() {
    MapStore store = new MapStore();
    HeldBuckets.Head head = new HeldBuckets.Head();
    HeldBuckets held = new HeldBuckets(store, store, head);
    for (int i = 0; i < 900; i++) { // 30 minutes of a user's clicks, one every 2 s
      held.put(event("e" + i, i * 2_000L), 1L);
    }
    held.flush();
    store.resetCounts();
    store.indexWrites = 0;
    HeldBuckets next = new HeldBuckets(store, store, head);
    next.put(event("e900", 1_800_000L), 1L);
    next.flush();
    assertEquals(1, store.puts + store.removes);
    assertEquals(1, store.indexWrites);
    assertTrue(store.bytesPut < 200, "the new bucket alone, not the 900 held: " + store.bytesPut);
  }

  @Test
  void eventsHeldAndSettledInOneBatchWriteNothing() {
    MapStore store = new MapStore();
    HeldBuckets.Head head = new HeldBuckets.Head();
    HeldBuckets held = new HeldBuckets(store, store, head);
    for (int i = 0; i < 100; i++) { // a replay's batch: a user's clicks, and a frontier far past them
      held.put(event("e" + i, i * 1_000L), 1L);
    }
    assertEquals(99_000L, held.settle(10 * HeldBuckets.BUCKET_MS));
    held.flush();
    assertEquals(0, store.puts + store.removes + store.indexWrites);
    assertTrue(head.buckets.isEmpty() && store.values.isEmpty() && store.index.isEmpty());
  }

  @Test
  void anEventPutAgainWithAnotherTimeMovesBucketsAndKeepsItsPlace() {
    MapStore store = new MapStore();
    HeldBuckets.Head head = new HeldBuckets.Head();
    HeldBuckets held = new HeldBuckets(store, store, head);
    held.put(event("a", 1_000), 1L);
    held.put(event("b", 2_000), 1L);
    held.flush();
    HeldBuckets next = new HeldBuckets(store, store, head);
    next.put(event("a", 5 * HeldBuckets.BUCKET_MS), 2L);
    next.flush();
    assertEquals(List.of("a@300000=2", "b@2000=1"), ofStore(store, head));
    assertEquals(5L, store.index.get("a"));
  }

  @Test
  void aBucketTheIndexNamesWithoutTheEventIsRefused() {
    MapStore store = new MapStore();
    HeldBuckets.Head head = new HeldBuckets.Head();
    store.index.put("ghost", 3L);
    HeldBuckets held = new HeldBuckets(store, store, head);
    IllegalStateException e = assertThrows(IllegalStateException.class, () -> held.put(event("ghost", 0), null));
    assertTrue(e.getMessage().contains("the index puts event ghost in a bucket that does not hold it"));
  }
}
