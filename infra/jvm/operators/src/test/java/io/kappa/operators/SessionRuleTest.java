package io.kappa.operators;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.TreeSet;
import java.util.function.Function;
import java.util.function.IntFunction;
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

  /** A key's state value and its state-store maps (the sessions' event ids), as Spark keeps them. */
  private static final class Key {
    final SessionRule.State state = new SessionRule.State();
    final MapStore store = new MapStore();
  }

  private static SessionRule.Changes run(Key key, SessionRule.Event... events) {
    return SessionRule.apply("u", key.state, key.store, List.of(events), G, A);
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
    Key key = new Key();
    SessionRule.Changes changes = run(key, e("e1", 0, "a"), e("e2", 10, "b"), e("e3", 21, "c"));
    assertEquals(List.of("u:e1 [0,10] 2 2 a>b S-e1", "u:e3 [21,21] 1 1 c>c S-e3"), upserts(changes));
    assertEquals(List.of(), changes.retractions());
    assertEquals(3L, key.state.seen);
    assertEquals(21L, key.state.latestMs);
  }

  @Test
  void anEarlierEventWithinGBecomesTheEntryAndTheSessionKeepsItsId() {
    Key key = new Key();
    run(key, e("e1", 100, "a"));
    SessionRule.Changes changes = run(key, e("e0", 90, "z")); // exactly G before the start
    assertEquals(List.of("u:e1 [90,100] 2 2 z>a S-e0"), upserts(changes), "the first click's segment");
  }

  @Test
  void anEventTouchingTwoSessionsMergesThemIntoTheOneCreatedFirst() {
    Key key = new Key();
    assertEquals(2, run(key, e("e1", 0, "a"), e("e2", 20, "b")).upserts().size());
    SessionRule.Changes changes = run(key, e("e3", 10, "c")); // within G of both
    assertMerged("u:e1 [0,20] 3 3 a>b S-e1", "u:e2", changes);
    assertEquals(Set.of("u:e1"), key.state.open.keySet());
  }

  @Test
  void aSessionMergedAwayInTheBatchThatCreatedItIsRetractedNotUpserted() {
    SessionRule.Changes changes =
        run(new Key(), e("e1", 0, "a"), e("e2", 20, "b"), e("e3", 10, "c"));
    assertMerged("u:e1 [0,20] 3 3 a>b S-e1", "u:e2", changes);
  }

  @Test
  void theMergeOrderIsLogOrderNotTimeOrder() {
    Key key = new Key();
    // e1 (time 20) creates the first session, e2 (time 0) the second: then e3 (time 10) joins them.
    SessionRule.Changes changes = run(key, e("e1", 20, "x"), e("e2", 0, "y"), e("e3", 10, "z"));
    // the id is e1's, the entry page and the segment are those of the earliest click (e2), the exit e1's
    assertMerged("u:e1 [0,20] 3 3 y>x S-e2", "u:e2", changes);
  }

  @Test
  void anEventMoreThanABehindTheLatestIsLateAndChangesNothing() {
    Key key = new Key();
    SessionRule.Changes changes = run(key, e("e1", 1000, "a"), e("e2", 900, "b"), e("e3", 899, "c"));
    assertEquals(List.of("u:e1 [1000,1000] 1 1 a>a S-e1", "u:e2 [900,900] 1 1 b>b S-e2"), upserts(changes),
        "900 is exactly A behind 1000: not late");
    assertEquals(List.of("e3"), late(changes));
    assertEquals(3L, key.state.seen, "a late event still takes its log position");
    assertEquals(1000L, key.state.latestMs);
  }

  @Test
  void aRepeatedFirstClickWithANewSegmentCorrectsTheSessionAndCountsNothing() {
    Key key = new Key();
    run(key, e("e1", 0, "a"), e("e2", 5, "b"));
    SessionRule.Changes changes =
        run(key, new SessionRule.Event("e1", 0, "a", "GOLD"), new SessionRule.Event("e2", 5, "b", "SILVER"));
    assertEquals(List.of("u:e1 [0,5] 2 2 a>b GOLD"), upserts(changes), "only the first click sets the segment");
    assertEquals(2L, key.state.seen, "a correction takes no log position");
    assertEquals(
        List.of(), upserts(run(key, new SessionRule.Event("e1", 0, "a", "GOLD"))), "same segment: nothing");
  }

  @Test
  void aSessionIsForgottenOnlyOnceItEndsMoreThanAPlusGBeforeTheLatest() {
    Key kept = new Key();
    run(kept, e("e1", 0, "a"), e("e9", 110, "z")); // horizon 110 - 110 = 0: a session ending at 0 stays
    assertEquals(Set.of("u:e1", "u:e9"), kept.state.open.keySet());
    assertEquals(List.of("u:e1 [0,10] 2 2 a>b S-e1"), upserts(run(kept, e("e2", 10, "b"))), "still open: it grows");
    SessionRule.Changes repeat = run(kept, new SessionRule.Event("e1", 0, "a", "GOLD"));
    assertEquals(List.of("e1"), late(repeat), "but e1 is more than A behind: its repeat is late, no correction");
    assertEquals(List.of(), upserts(repeat));

    Key forgot = new Key();
    SessionRule.Changes forgetting = run(forgot, e("e1", 0, "a"), e("e9", 111, "z")); // horizon 1
    assertEquals(Set.of("u:e9"), forgot.state.open.keySet());
    assertEquals(List.of("u:e9 [111,111] 1 1 z>z S-e9"), upserts(forgetting), "u:e1 is not upserted...");
    assertEquals(1, forgetting.finals().size(), "...but written once, final");
    SessionRule.Session last = forgetting.finals().get(0);
    assertEquals(List.of("u:e1", 0L, 0L, 1, "a", "S-e1"),
        List.of(last.sessionId, last.startMs, last.endMs, last.clicks, last.exitPage, last.segment));
    SessionRule.Changes changes = run(forgot, new SessionRule.Event("e1", 0, "a", "GOLD"));
    assertEquals(List.of(), changes.finals(), "a session is final once");
    assertEquals(List.of(), upserts(changes));
    assertEquals(List.of("e1"), late(changes), "a correction of a forgotten session is late");
  }

  @Test
  void aFirstBatchWithNoEventsLeavesAnEmptyState() {
    Key key = new Key();
    SessionRule.Changes changes = run(key);
    assertEquals(List.of(), changes.upserts());
    assertNull(key.state.latestMs);
    assertEquals(0L, key.state.seen);
  }

  // ---- the sessions' event ids in the state store (SessionIds)

  @Test
  void aRepeatedIdWithAnotherTimeIsStillACorrection() {
    Key key = new Key();
    run(key, e("e1", 0, "a"), e("e2", 5, "b"));
    SessionRule.Changes changes = run(key, new SessionRule.Event("e1", 90, "q", "GOLD"));
    assertEquals(List.of("u:e1 [0,5] 2 2 a>b GOLD"), upserts(changes), "the id, not the time, names the click");
    assertEquals(2L, key.state.seen);
  }

  @Test
  void anIdSeenAgainAfterItsSessionWasForgottenIsNewIfNotLate() {
    Key key = new Key();
    run(key, e("e1", 0, "a"));
    run(key, e("e9", 200, "z")); // forgets u:e1 (horizon 90) and removes its id
    assertEquals(Set.of("u:e9"), key.state.open.keySet());
    SessionRule.Changes changes = run(key, e("e1", 195, "b")); // a new time, within A: a click, not a correction
    assertEquals(List.of("u:e9 [195,200] 2 2 b>z S-e1"), upserts(changes));
    assertEquals(3L, key.state.seen);
    assertEquals(List.of(), upserts(run(key, e("e1", 195, "b"))), "and now a correction of that click");
  }

  private static SessionRule.Changes runLive(Key key, SessionRule.Event... events) {
    return runLive(key, List.of(events));
  }

  /** One batch with the live settings: a gap of 30 minutes, a lateness of 120. */
  private static SessionRule.Changes runLive(Key key, List<SessionRule.Event> events) {
    return SessionRule.apply("u", key.state, key.store, events, 30 * 60_000, 120 * 60_000);
  }

  /** Clicks {@code prefix + i} for i in [from, to), click i at {@code i * stepMs} on {@code page.apply(i)}. */
  private static List<SessionRule.Event> clicks(
      String prefix, int from, int to, long stepMs, IntFunction<String> page) {
    List<SessionRule.Event> clicks = new ArrayList<>();
    for (int i = from; i < to; i++) {
      clicks.add(e(prefix + i, i * stepMs, page.apply(i)));
    }
    return clicks;
  }

  /** The ids the key's buckets keep, with their times. */
  private static Map<String, Long> kept(MapBytesByLong buckets) {
    Map<String, Long> all = new HashMap<>();
    buckets.values.values().forEach(bucket -> all.putAll(SessionIds.decode(bucket)));
    return all;
  }

  @Test
  void aNewClickWritesOneBucketHoweverLongTheSession() {
    Key key = new Key();
    runLive(key, clicks("e", 0, 1_800, 2_000, i -> "/p" + i % 20)); // an hour, a click every 2 s: one session
    assertEquals(0, key.store.gets, "a key's first batch reads no bucket");
    assertEquals(1_800, kept(key.store).size());
    assertEquals(1_800, key.state.idCount);
    assertEquals(64, key.state.idBuckets, "at most 32 ids a bucket");
    assertEquals(0L, key.state.earliestIdMs);
    key.store.resetCounts();
    runLive(key, e("new", 3_600_000L, "/p0"));
    assertEquals(1, key.store.gets, "the new click's bucket, read once");
    assertEquals(1, key.store.puts + key.store.removes, "and written once");
    assertTrue(key.store.bytesPut < 33 * 20, key.store.bytesPut + " bytes: its bucket's ids, not the session's");
    assertEquals(3_600_000L, kept(key.store).get("new"));
    assertTrue(SessionRule.serialize(key.state).length < 400, "the value holds no id");
  }

  @Test
  void aSessionThatNeverEndsKeepsTheIdsOfAPlusGAtMost() {
    Key key = new Key();
    long a = 120 * 60_000L;
    long g = 30 * 60_000L;
    int perMinute = 30; // a click every 2 s for six hours, a batch a minute: one session throughout
    for (int minute = 0; minute < 360; minute++) {
      runLive(key, clicks("e", minute * perMinute, (minute + 1) * perMinute, 2_000, i -> "/p" + i % 20));
      long latest = key.state.latestMs;
      assertTrue(key.state.idCount <= (a + g) / 2_000 + perMinute, "minute " + minute + ": " + key.state.idCount);
      assertTrue(key.state.earliestIdMs >= latest - a - g, "minute " + minute + ": from " + key.state.earliestIdMs);
      assertEquals(key.state.idCount, kept(key.store).size());
    }
    assertEquals(Set.of("u:e0"), key.state.open.keySet(), "the session never ended");
    assertTrue(key.state.idCount >= a / 2_000, "every id within A is kept: " + key.state.idCount);
    long latest = key.state.latestMs;
    long seen = key.state.seen;
    int hourBack = (int) ((latest - 60 * 60_000L) / 2_000);
    SessionRule.Event hourOld = new SessionRule.Event("e" + hourBack, hourBack * 2_000L, "/x", "G");
    assertEquals(List.of(), upserts(runLive(key, hourOld)));
    assertEquals(seen, key.state.seen, "an hour back: a correction, no click");
    int threeHoursBack = (int) ((latest - 180 * 60_000L) / 2_000);
    SessionRule.Changes old =
        runLive(key, new SessionRule.Event("e" + threeHoursBack, threeHoursBack * 2_000L, "/x", "G"));
    assertEquals(List.of("e" + threeHoursBack), late(old), "three hours back, past A: late, its session open");
  }

  @Test
  void aClickMovedFromMoreThanABackCountsAsANewClick() {
    Key key = new Key();
    run(key, e("e1", 0, "a"), e("e9", 110, "z")); // e1 is 110 behind the latest, A is 100
    SessionRule.Changes moved = run(key, e("e1", 105, "b")); // within A now: judged as a new event
    assertEquals(List.of("u:e9 [105,110] 2 2 b>z S-e1"), upserts(moved), "e1 is its first click now");
    assertEquals(3L, key.state.seen, "a new event takes a log position");
    assertEquals(List.of(), upserts(run(key, e("e1", 105, "b"))), "and a repeat of it now is a correction");
  }

  @Test
  void aReplaysBatchWritesItsIdsBucketsNotAnEntryPerId() {
    Key key = new Key();
    runLive(key, clicks("a", 0, 40, 2_000, i -> "/a"));
    assertEquals(2, key.state.idBuckets, "40 ids: more than 32 in one");
    assertEquals(2, key.store.puts);
    List<SessionRule.Event> next = new ArrayList<>();
    next.add(new SessionRule.Event("a3", 6_000, "/a", "GOLD")); // a repeat among them: a correction
    next.addAll(clicks("a", 40, 60, 2_000, i -> "/a"));
    key.store.resetCounts();
    SessionRule.Changes changes = runLive(key, next);
    assertEquals(2, key.store.puts, "20 new ids in 2 buckets");
    assertEquals(60L, key.state.seen, "the repeat is a correction, not an event: 40 + 20");
    assertEquals(60, key.state.idCount);
    assertEquals(60, kept(key.store).size());
    assertEquals(List.of("u:a0 [0,118000] 60 1 /a>/a S-a0"), upserts(changes));
  }

  @Test
  void sessionsOpenedAndForgottenInOneBatchWriteNoIds() {
    Key key = new Key();
    List<SessionRule.Event> replay = new ArrayList<>();
    for (int i = 0; i < 300; i++) { // a replay's batch: a session every 3 hours, each forgotten by the next
      replay.add(e("a" + i, i * 3 * 3_600_000L, "/a"));
      replay.add(e("b" + i, i * 3 * 3_600_000L + 90_000, "/b"));
    }
    runLive(key, replay);
    assertEquals(1, key.state.open.size());
    assertEquals(1, key.store.puts, "one bucket");
    assertEquals(Set.of("a299", "b299"), kept(key.store).keySet(), "the open session's two ids");
  }

  @Test
  void theBatchThatForgetsASessionRemovesItsIdsAndHalvesTheBuckets() {
    Key key = new Key();
    runLive(key, clicks("e", 0, 1_800, 2_000, i -> "/p"));
    runLive(key, e("d", 6 * 3_600_000L, "/b")); // 5 hours after its end: the hour's session is forgotten
    assertEquals(Set.of("u:d"), key.state.open.keySet());
    assertEquals(Map.of("d", 6 * 3_600_000L), kept(key.store));
    assertEquals(1, key.store.values.size(), "every other bucket removed");
    assertEquals(1, key.state.idCount);
    assertEquals(1, key.state.idBuckets);
    assertEquals(6 * 3_600_000L, key.state.earliestIdMs);
    key.store.resetCounts();
    runLive(key, e("f", 6 * 3_600_000L + 5_000, "/b"));
    assertEquals(1, key.store.puts + key.store.removes, "f's bucket: nothing to remove");
  }

  @Test
  void bucketsThatDisagreeWithTheValueAreAClearErrorNotAWrongAnswer() {
    Key misplaced = new Key();
    runLive(misplaced, clicks("m", 0, 40, 1_000, i -> "/m"));
    assertEquals(2, misplaced.state.idBuckets);
    Map<String, Long> all = kept(misplaced.store);
    misplaced.store.values.clear();
    misplaced.store.values.put(0L, SessionIds.encode(all)); // every id in bucket 0
    IllegalStateException wrongBucket = assertThrows(IllegalStateException.class,
        () -> runLive(misplaced, e("later", 6 * 3_600_000L, "/m"))); // forgets the session: reads every bucket
    assertTrue(wrongBucket.getMessage().contains("is kept in bucket 0 of 2"), wrongBucket.getMessage());

    Key miscounted = new Key();
    runLive(miscounted, e("a", 0, "/a"), e("b", 1_000, "/a"));
    miscounted.state.idCount = 3;
    IllegalStateException count = assertThrows(IllegalStateException.class,
        () -> runLive(miscounted, e("later", 6 * 3_600_000L, "/m")));
    assertEquals("sessions: the value counts 3 event ids, its 1 buckets hold 2", count.getMessage());
  }

  @Test
  void anIdSeenAgainAfterItsSessionWasForgottenIsKeptAtItsNewTime() {
    Key key = new Key();
    long g = 10_000;
    long a = 100_000;
    SessionRule.apply("u", key.state, key.store, List.of(e("x", 61_000, "a"), e("z", 100_000, "b"),
        e("w", 180_000, "c")), g, a); // u:x is forgotten in its own batch: x is never written
    assertEquals(Set.of("z", "w"), kept(key.store).keySet());
    SessionRule.apply("u", key.state, key.store, List.of(e("x", 175_000, "d")), g, a); // new: joins u:w
    assertEquals(175_000L, kept(key.store).get("x"));
    SessionRule.apply("u", key.state, key.store, List.of(e("v", 230_000, "e")), g, a); // forgets u:z
    assertEquals(Set.of("x", "w", "v"), kept(key.store).keySet(), "z removed, x kept at its new time");
    long seen = key.state.seen;
    SessionRule.Changes again =
        SessionRule.apply("u", key.state, key.store, List.of(e("x", 175_000, "d")), g, a);
    assertEquals(List.of(), upserts(again), "a correction of the click x opened u:w with");
    assertEquals(seen, key.state.seen);
  }

  // ---- against the rule with every session's ids in a set (logic.py's layout), batch after batch

  private static String rendered(String id, long start, long end, int clicks, Set<String> pages, String entry,
      String exit, long createdSeq, String segment, String firstEventId) {
    return id + " [" + start + "," + end + "] " + clicks + " " + new TreeSet<>(
        pages.stream().map(String::valueOf).toList()) + " " + entry + ">" + exit + " #" + createdSeq + " " + segment
        + " first " + firstEventId;
  }

  /** A batch's changes and the state after it, as lines: the same for both rules' types of session. */
  private static <S> List<String> rendered(List<S> upserts, List<String> retractions, List<SessionRule.Event> late,
      List<S> finals, long seen, Long latestMs, Collection<S> open, Function<S, String> session) {
    List<String> out = new ArrayList<>();
    upserts.forEach(x -> out.add("upsert " + session.apply(x)));
    retractions.forEach(id -> out.add("retract " + id));
    late.forEach(ev -> out.add("late " + ev.id() + "@" + ev.timeMs()));
    finals.forEach(x -> out.add("final " + session.apply(x)));
    out.add("seen " + seen + " latest " + latestMs);
    open.forEach(x -> out.add("open " + session.apply(x)));
    return out;
  }

  private static List<String> renderedNew(SessionRule.Changes c, SessionRule.State s) {
    return rendered(c.upserts(), c.retractions(), c.late(), c.finals(), s.seen, s.latestMs, s.open.values(), x -> rendered(
        x.sessionId, x.startMs, x.endMs, x.clicks, x.pages, x.entryPage, x.exitPage, x.createdSeq, x.segment,
        x.firstEventId));
  }

  private static List<String> renderedBySets(SessionRuleBySets.Changes c, SessionRuleBySets.State s) {
    return rendered(c.upserts(), c.retractions(), c.late(), c.finals(), s.seen, s.latestMs, s.open.values(), x -> rendered(
        x.sessionId, x.startMs, x.endMs, x.clicks, x.pages, x.entryPage, x.exitPage, x.createdSeq, x.segment,
        x.firstEventId));
  }

  @Test
  void everyBatchDecidesWhatTheRuleWithIdSetsDecides() {
    long[][] settings = { // {G, A}: gaps under a minute, of a minute's order, and the job's; lateness 0 too
      {10, 100}, {10_000, 100_000}, {45_000, 0}, {60_000, 90_000}, {1_800_000, 7_200_000}, {0, 30_000}};
    Random random = new Random(67);
    int corrections = 0;
    int forgotten = 0;
    int resized = 0;
    for (long[] ga : settings) {
      long g = ga[0];
      long a = ga[1];
      long[] steps = {0, 1, g / 2, g, g + 1, 2 * g, 59_999, 61_000, a / 2, a + g + 1, 3 * 60_000};
      for (int run = 0; run < 4; run++) {
        SessionRule.State state = new SessionRule.State();
        MapStore store = new MapStore();
        int bucketsBefore = 1;
        SessionRuleBySets.State model = new SessionRuleBySets.State();
        List<SessionRule.Event> ever = new ArrayList<>();
        long now = -3 * 60_000 - random.nextInt(60_000); // before the epoch too
        for (int batch = 0; batch < 150; batch++) {
          List<SessionRule.Event> events = new ArrayList<>();
          // now and then a replay's batch of clicks within the gap, so that the key keeps more ids than a
          // bucket holds (and its buckets double, and halve when the session is forgotten)
          boolean replay = random.nextInt(15) == 0;
          for (int i = replay ? 40 + random.nextInt(80) : random.nextInt(8); i > 0; i--) {
            SessionRule.Event ev;
            int kind = random.nextInt(10);
            if (kind == 0 && !ever.isEmpty()) { // a correction: the same click, another segment
              SessionRule.Event was = ever.get(random.nextInt(ever.size()));
              ev = new SessionRule.Event(was.id(), was.timeMs(), was.page(), "S" + random.nextInt(3));
              corrections++;
            } else if (kind == 1 && !ever.isEmpty()) { // the same id at another time
              SessionRule.Event was = ever.get(random.nextInt(ever.size()));
              ev = new SessionRule.Event(was.id(), now - random.nextInt(Math.toIntExact(Math.max(1, a + g))),
                  "/p" + random.nextInt(3), "S" + random.nextInt(3));
            } else {
              now += replay ? random.nextInt(Math.toIntExact(g / 2 + 1)) : steps[random.nextInt(steps.length)];
              long back = random.nextInt(4) == 0 ? steps[random.nextInt(steps.length)] : 0; // out of order, late
              ev = new SessionRule.Event("e" + ever.size(), now - back, random.nextInt(9) == 0 ? null
                  : "/p" + random.nextInt(4), random.nextInt(5) == 0 ? null : "S" + random.nextInt(3));
            }
            ever.add(ev);
            events.add(ev);
          }
          int openBefore = model.open.size();
          List<String> expected =
              renderedBySets(SessionRuleBySets.apply("u", model, events, g, a), model);
          state = SessionRule.deserialize(SessionRule.serialize(state)).state(); // as the state store keeps it
          List<String> actual = renderedNew(SessionRule.apply("u", state, store, events, g, a), state);
          assertEquals(expected, actual, "G " + g + ", A " + a + ", run " + run + ", batch " + batch);
          String where = "G " + g + ", A " + a + ", run " + run + ", batch " + batch;
          Map<String, Long> kept = kept(store);
          assertEquals(kept.size(), state.idCount, where);
          Long earliestOpen = state.open.values().stream().map(x -> x.startMs).min(Long::compare).orElse(null);
          for (long time : kept.values()) { // exactly the open sessions' ids: none stale is left
            assertTrue(earliestOpen != null && time >= earliestOpen && time >= state.earliestIdMs, where);
          }
          int buckets = state.idBuckets;
          assertTrue(buckets == 1 || (kept.size() >= 4 * buckets && kept.size() <= 32 * buckets), where);
          store.values.forEach((b, bucket) -> SessionIds.decode(bucket).keySet().forEach(
              id -> assertEquals((long) SessionIds.bucketOf(id, buckets), b, where)));
          resized += buckets != bucketsBefore ? 1 : 0;
          bucketsBefore = buckets;
          forgotten += Math.max(0, openBefore - model.open.size());
        }
        // far ahead: every session but the new one is forgotten, and their ids leave the store
        long far = now + a + g + 5 * 60_000;
        SessionRule.apply("u", state, store, List.of(e("last", far, "/z")), g, a);
        assertEquals(Set.of("last"), kept(store).keySet(), "G " + g + ", A " + a + ", run " + run);
        assertEquals(1, store.values.size());
      }
    }
    assertTrue(corrections > 500 && forgotten > 500, corrections + " corrections, " + forgotten + " forgotten");
    assertTrue(resized > 50, resized + " batches changed the number of buckets");
  }

  @Test
  void aNegativeGapOrLatenessAndAnEventWithoutAnIdAreRefusedClearly() {
    IllegalArgumentException settings =
        assertThrows(IllegalArgumentException.class, () -> Sessions.requireSettings(-5, 100));
    assertEquals("sessions: the gap and the lateness must be 0 or more (gap -5 ms, lateness 100 ms)",
        settings.getMessage());
    assertThrows(IllegalArgumentException.class, () -> Sessions.requireSettings(10, -1));
    Sessions.requireSettings(0, 0);
    Key key = new Key();
    run(key, e("e1", 0, "a"));
    IllegalStateException noId =
        assertThrows(IllegalStateException.class, () -> run(key, new SessionRule.Event(null, 1, "a", "S")));
    assertEquals("sessions: an event without an event_id cannot be told from its repeats", noId.getMessage());
  }
}
