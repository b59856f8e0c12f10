package io.kappa.operators;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import org.junit.jupiter.api.Test;

/**
 * page_stats' per-user rule (ClickGaps) against the specification restated by brute force (jobs/page_stats/
 * logic.py: the three cases, each life's latest record, times on page by sorting): hand-worked cases, then
 * random partitions' logs with late clicks, corrections of every case and re-emissions, cut into batches, where
 * the contributions the rule emitted, summed, must equal the specification's after every batch, the late records
 * be exactly the specification's, and the state hold nothing older than the user's largest stamp - L - 2 gap.
 */
class ClickGapsTest {
  private static final long MIN = 60_000;
  private static final long GAP = 30 * MIN;
  private static final long HOUR = 60 * MIN;
  private static final long L = 20 * MIN;

  /** One user's state, in maps. */
  private static final class User {
    final ClickGaps.Head head = new ClickGaps.Head();
    final MapBytesByLong buckets = new MapBytesByLong();
    final MapStore times = new MapStore();
  }

  private static ClickGaps.Record record(String id, long minute, String page, Long stampMinute) {
    return new ClickGaps.Record(id, minute * MIN, page, stampMinute == null ? null : stampMinute * MIN);
  }

  /** The contributions emitted so far, summed: contribution -> how many times it counts. */
  private static void sum(Map<ClickGaps.Contribution, Integer> total, ClickGaps.Outcome outcome) {
    for (ClickGaps.Change change : outcome.changes()) {
      total.merge(change.contribution(), change.sign(), Integer::sum);
      total.remove(change.contribution(), 0);
    }
  }

  // ------------------------------------------------------------ the specification, by brute force ----------

  /** logic.py's counted_records, times_on_page and each click's contribution, over one user's whole log. */
  private static Map<ClickGaps.Contribution, Integer> specification(List<ClickGaps.Record> log, Long lateness) {
    Map<ClickGaps.Key, ClickGaps.Record> latest = new LinkedHashMap<>();
    Map<String, Integer> lives = new HashMap<>();
    Long largestStamp = null; // of the records before
    for (ClickGaps.Record r : log) {
      Long before = largestStamp;
      if (r.stampMs() != null && (largestStamp == null || r.stampMs() > largestStamp)) {
        largestStamp = r.stampMs();
      }
      if (late(r, lateness)) {
        continue;
      }
      if (lateness != null && before != null && (r.stampMs() == null || r.stampMs() < before)) {
        continue; // a copy: nothing
      }
      Integer life = lives.get(r.eventId());
      ClickGaps.Record earlier = life == null ? null : latest.get(new ClickGaps.Key(r.eventId(), life));
      if (life == null) {
        life = 0;
      } else if (lateness != null && r.stampMs() != null && earlier.timeMs() < r.stampMs() - lateness - GAP) {
        life++;
      }
      lives.put(r.eventId(), life);
      latest.put(new ClickGaps.Key(r.eventId(), life), r);
    }
    List<ClickGaps.Click> clicks = new ArrayList<>();
    latest.forEach((k, r) -> clicks.add(new ClickGaps.Click(r.timeMs(), k.eventId(), k.life(), r.page(), null)));
    clicks.sort(ClickGaps.ORDER);
    Map<ClickGaps.Contribution, Integer> total = new HashMap<>();
    for (int i = 0; i < clicks.size(); i++) {
      ClickGaps.Click c = clicks.get(i);
      Long gap = i + 1 < clicks.size() && clicks.get(i + 1).timeMs - c.timeMs <= GAP ? clicks.get(i + 1).timeMs - c.timeMs : null;
      total.merge(new ClickGaps.Contribution(c.page, Math.floorDiv(c.timeMs, HOUR) * HOUR, gap), 1, Integer::sum);
    }
    return total;
  }

  private static boolean late(ClickGaps.Record r, Long lateness) {
    return lateness != null && r.stampMs() != null && r.timeMs() < r.stampMs() - lateness;
  }

  // ------------------------------------------------------------ worked by hand ------------------------------

  @Test
  void aLateRecordIsSetAsideAndChangesNothing() {
    ClickGaps rule = new ClickGaps(GAP, HOUR, L);
    User u = new User();
    ClickGaps.Outcome first = rule.apply(u.head, u.buckets, u.times, List.of(record("a", 100, "/a", 90L)));
    assertEquals(List.of(), first.late());
    // 79 < 100 - 20: late, though 21 minutes before a: it would have been a's predecessor within the gap
    ClickGaps.Outcome second = rule.apply(u.head, u.buckets, u.times, List.of(record("b", 79, "/b", 100L)));
    assertEquals(List.of(0), second.late());
    assertEquals(List.of(), second.changes());
    // exactly L behind its stamp: counts, and is a's predecessor
    ClickGaps.Outcome third = rule.apply(u.head, u.buckets, u.times, List.of(record("c", 80, "/c", 100L)));
    assertEquals(List.of(), third.late());
    assertEquals(
        List.of(new ClickGaps.Change(1, new ClickGaps.Contribution("/c", HOUR, 20 * MIN))), third.changes());
  }

  @Test
  void aCorrectionFromBeyondTheBoundIsANewLifeAndTheEarlierStaysCounted() {
    ClickGaps rule = new ClickGaps(GAP, HOUR, L);
    User u = new User();
    Map<ClickGaps.Contribution, Integer> total = new HashMap<>();
    sum(total, rule.apply(u.head, u.buckets, u.times, List.of(record("a", 10, "/a", 10L))));
    // a's record moved to minute 70, stamped 70: 10 < 70 - 20 - 30, so a second life of a (case 2)
    ClickGaps.Outcome moved = rule.apply(u.head, u.buckets, u.times, List.of(record("a", 70, "/b", 70L)));
    sum(total, moved);
    assertEquals(Map.of(new ClickGaps.Contribution("/a", 0, null), 1, new ClickGaps.Contribution("/b", HOUR, null), 1), total);
    // moved again within the bound (case 3): it replaces the second life only
    sum(total, rule.apply(u.head, u.buckets, u.times, List.of(record("a", 75, "/c", 71L))));
    assertEquals(Map.of(new ClickGaps.Contribution("/a", 0, null), 1, new ClickGaps.Contribution("/c", HOUR, null), 1), total);
    assertEquals(1, u.head.lives.get("a"));
  }

  @Test
  void clicksBeyondTheBoundAreForgottenAndAReEmissionOfOneIsSettled() {
    ClickGaps rule = new ClickGaps(GAP, HOUR, L);
    User u = new User();
    Map<ClickGaps.Contribution, Integer> total = new HashMap<>();
    sum(total, rule.apply(u.head, u.buckets, u.times, List.of(record("a", 0, "/a", null), record("b", 5, "/b", 0L))));
    assertEquals(2, u.times.index.size());
    // largest stamp 200: the horizon is 200 - 20 - 60 = 120, so minutes 0 and 5 go, with their ids
    sum(total, rule.apply(u.head, u.buckets, u.times, List.of(record("c", 190, "/c", 200L))));
    assertEquals(List.of(190 * MIN / ClickGaps.BUCKET_MS), new ArrayList<>(u.head.buckets));
    assertEquals(Map.of("c", 190 * MIN), u.times.index);
    assertEquals(1, u.buckets.values.size());
    // b sent again as enrich_clicks re-emits it (its stamp, 0): not held any more, so settled, and nothing changes
    ClickGaps.Outcome again = rule.apply(u.head, u.buckets, u.times, List.of(record("b", 5, "/b", 0L)));
    assertEquals(List.of(0), again.settled());
    assertEquals(List.of(), again.changes());
    assertEquals(
        Map.of(new ClickGaps.Contribution("/a", 0, 5 * MIN), 1, new ClickGaps.Contribution("/b", 0, null), 1,
            new ClickGaps.Contribution("/c", 3 * HOUR, null), 1),
        total);
  }

  @Test
  void aRepeatOfAnOlderRecordOfAHeldClickIsSettledAndChangesNothing() {
    ClickGaps rule = new ClickGaps(GAP, HOUR, L);
    User u = new User();
    Map<ClickGaps.Contribution, Integer> total = new HashMap<>();
    sum(total, rule.apply(u.head, u.buckets, u.times, List.of(record("a", 10, "/a", 10L))));
    sum(total, rule.apply(u.head, u.buckets, u.times, List.of(record("a", 12, "/b", 20L)))); // moved (case 3)
    // an enrich_clicks batch run again sends a's first record again, after the correction: its stamp is lower
    ClickGaps.Outcome again = rule.apply(u.head, u.buckets, u.times, List.of(record("a", 10, "/a", 10L), record("a", 12, "/b", 20L)));
    sum(total, again);
    assertEquals(List.of(0), again.settled());
    assertEquals(List.of(), again.changes());
    assertEquals(Map.of(new ClickGaps.Contribution("/b", 0, null), 1), total);
  }

  @Test
  void aCopyOfACorrectedRecordStampedAsItsCorrectionIsSettledOnceTheStampsMoveOn() {
    ClickGaps rule = new ClickGaps(GAP, HOUR, L);
    User u = new User();
    Map<ClickGaps.Contribution, Integer> total = new HashMap<>();
    // a corrected at once: both records carry the partition's stamp 5, which the correction's time does not raise
    sum(total, rule.apply(u.head, u.buckets, u.times, List.of(record("a", 10, "/a", 5L), record("a", 4, "/b", 5L))));
    sum(total, rule.apply(u.head, u.buckets, u.times, List.of(record("b", 30, "/c", 10L))));
    // a's first record again (a crash's repeat): stamped 5, below the user's largest stamp 10, so a copy
    ClickGaps.Outcome again = rule.apply(u.head, u.buckets, u.times, List.of(record("a", 10, "/a", 5L)));
    sum(total, again);
    assertEquals(List.of(0), again.settled());
    assertEquals(List.of(), again.changes());
    assertEquals(Map.of(new ClickGaps.Contribution("/b", 0, 26 * MIN), 1, new ClickGaps.Contribution("/c", 0, null), 1), total);
  }

  @Test
  void aTieInTimeOrdersByEventIdBytesThenLife() {
    ClickGaps rule = new ClickGaps(GAP, HOUR, null);
    User u = new User();
    Map<ClickGaps.Contribution, Integer> total = new HashMap<>();
    // "b" < "é" by UTF-8 bytes; at one time, b's next is é (gap 0) and é's next is c, 10 minutes on
    sum(total, rule.apply(u.head, u.buckets, u.times, List.of(record("é", 0, "/e", null), record("c", 10, "/c", null))));
    sum(total, rule.apply(u.head, u.buckets, u.times, List.of(record("b", 0, "/b", null))));
    assertEquals(
        Map.of(new ClickGaps.Contribution("/b", 0, 0L), 1, new ClickGaps.Contribution("/e", 0, 10 * MIN), 1,
            new ClickGaps.Contribution("/c", 0, null), 1),
        total);
  }

  // ------------------------------------------------------------ random logs ---------------------------------

  /** One clicks partition's log as enrich_clicks writes it: first emissions (new clicks and corrections) stamped
   * with the partition's latest event time before them, and re-emissions (copies of a click's last record, its
   * stamp kept) after them. Users interleave; time moves on, so old clicks settle. */
  private static List<Object[]> partitionLog(Random random, int users, int records) {
    List<Object[]> log = new ArrayList<>(); // {user, record}
    Map<String, ClickGaps.Record> last = new LinkedHashMap<>(); // event id -> its last record
    Map<String, String> owner = new HashMap<>();
    long clock = 0;
    Long stamp = null; // the partition's latest event time so far
    int next = 0;
    String[] pages = {"/a", "/b", "/c", null};
    for (int i = 0; i < records; i++) {
      clock += random.nextInt(4) == 0 ? random.nextInt(15) * MIN : random.nextInt(90_000);
      int action = random.nextInt(10);
      ClickGaps.Record r;
      String user;
      if (action < 2 && !last.isEmpty()) { // a re-emission: the click's last record again
        List<String> ids = new ArrayList<>(last.keySet());
        String id = ids.get(random.nextInt(ids.size()));
        r = last.get(id);
        user = owner.get(id);
      } else if (action == 2 && !log.isEmpty()) { // a crash's repeat: any record sent before, maybe an older one
        Object[] before = log.get(random.nextInt(log.size()));
        log.add(before);
        continue;
      } else {
        String id;
        if (action < 4 && !last.isEmpty()) { // a correction: a click sent again, its time and page may move
          List<String> ids = new ArrayList<>(last.keySet());
          id = ids.get(random.nextInt(ids.size()));
          user = owner.get(id);
        } else {
          id = "e" + next++;
          user = "u" + random.nextInt(users);
          owner.put(id, user);
        }
        long disorder = switch (random.nextInt(6)) {
          case 0 -> -random.nextInt((int) (2 * (L + GAP)));
          case 1 -> -L; // exactly the lateness behind
          case 2 -> -L - 1;
          default -> -random.nextInt((int) (5 * MIN));
        };
        long time = clock + (random.nextInt(20) == 0 ? random.nextInt(3) * GAP : disorder);
        r = new ClickGaps.Record(id, time, pages[random.nextInt(pages.length)], stamp);
        stamp = stamp == null ? time : Math.max(stamp, time);
      }
      last.put(r.eventId(), r);
      log.add(new Object[] {user, r});
    }
    return log;
  }

  @Test
  void randomPartitionsInRandomBatchesEqualTheSpecificationAfterEveryBatch() {
    Random random = new Random(4040);
    int batches = 0;
    int late = 0;
    int settled = 0;
    int lives = 0;
    for (int run = 0; run < 240; run++) {
      Long lateness = run % 6 == 5 ? null : L;
      ClickGaps rule = new ClickGaps(GAP, HOUR, lateness);
      List<Object[]> log = partitionLog(random, 1 + random.nextInt(4), 40 + random.nextInt(300));
      Map<String, User> users = new HashMap<>();
      Map<String, List<ClickGaps.Record>> read = new HashMap<>(); // each user's log so far
      Map<String, Map<ClickGaps.Contribution, Integer>> emitted = new HashMap<>();
      int at = 0;
      while (at < log.size()) {
        int end = Math.min(log.size(), at + 1 + random.nextInt(random.nextBoolean() ? 5 : 60));
        Map<String, List<ClickGaps.Record>> batch = new LinkedHashMap<>();
        for (Object[] entry : log.subList(at, end)) {
          batch.computeIfAbsent((String) entry[0], k -> new ArrayList<>()).add((ClickGaps.Record) entry[1]);
        }
        for (Map.Entry<String, List<ClickGaps.Record>> e : batch.entrySet()) {
          User u = users.computeIfAbsent(e.getKey(), k -> new User());
          ClickGaps.Outcome outcome = rule.apply(u.head, u.buckets, u.times, e.getValue());
          sum(emitted.computeIfAbsent(e.getKey(), k -> new HashMap<>()), outcome);
          List<Integer> expectedLate = new ArrayList<>();
          for (int i = 0; i < e.getValue().size(); i++) {
            if (late(e.getValue().get(i), lateness)) {
              expectedLate.add(i);
            }
          }
          assertEquals(expectedLate, outcome.late(), "run " + run);
          late += outcome.late().size();
          settled += outcome.settled().size();
          read.computeIfAbsent(e.getKey(), k -> new ArrayList<>()).addAll(e.getValue());
          assertEquals(specification(read.get(e.getKey()), lateness), emitted.get(e.getKey()),
              "run " + run + ", user " + e.getKey() + ", after record " + end);
          assertBounded(u, lateness);
        }
        batches++;
        at = end;
      }
      for (User u : users.values()) {
        lives += u.head.lives.size();
      }
    }
    // the logs reach every case the rule decides on
    assertTrue(batches > 2_000, "batches " + batches);
    assertTrue(late > 200, "late " + late);
    assertTrue(settled > 50, "settled " + settled);
    assertTrue(lives > 10, "lives " + lives);
  }

  /** Nothing older than the user's largest stamp - L - 2 gap is held: no bucket, no id. */
  private static void assertBounded(User u, Long lateness) {
    long clicks = 0;
    for (Map.Entry<Long, byte[]> e : u.buckets.values.entrySet()) {
      assertTrue(u.head.buckets.contains(e.getKey()), "a bucket the head does not know");
      clicks += ClickGaps.decode(e.getValue()).stream().filter(c -> c.life == u.head.lives.getOrDefault(c.eventId, 0)).count();
      if (lateness != null && u.head.largestStampMs != null) {
        long horizon = u.head.largestStampMs - lateness - 2 * GAP;
        assertTrue((e.getKey() + 1) * ClickGaps.BUCKET_MS > horizon, "a bucket below the horizon is held");
      }
    }
    assertEquals(u.head.buckets.size(), u.buckets.values.size());
    assertEquals(clicks, u.times.index.size(), "an id is held for each click's latest life, and only then");
  }
}
