package io.kappa.operators;

import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Comparator;
import java.util.HashMap;
import java.util.HashSet;
import java.util.IdentityHashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;

/**
 * page_stats' per-user rule, step for step as jobs/page_stats/logic.py states it (the specification): which
 * record of a click counts (case 1: late; case 2: a new life of the click; case 3: it replaces the click's
 * latest), each counted click's time on page (the gap to the user's next click by event time, then event id,
 * then life, when at most {@code gapMs}), and the contributions to (page, hour) that a batch changes. This class
 * knows nothing of Spark: {@link ClickGapsProcessor} feeds it one user's records of a batch, in log order.
 *
 * <p>State, per user: the counted clicks in buckets of {@link #BUCKET_MS} of event time ({@code buckets}); each
 * click's event time by event id, the time of its latest life ({@code times}); and a head value: the user's
 * largest stamp, the buckets that hold clicks, and the lives above the first. A batch reads the buckets of the
 * times it changes and of their nearest neighbours, and finds each changed click's predecessor and successor
 * there, so its cost follows its clicks, not the user's history or the gap.
 *
 * <p>With a lateness (bounded), the user's largest stamp {@code M} bounds what any later record can reach: every
 * later first emission of the user comes from the same {@code clicks} partition, after, so its stamp is at least
 * {@code M}, and no record that counts can touch a click older than {@code M - L - 2 gap}
 * (docs/bounded_view_state.md, "The rule"). Those clicks are forgotten, with their ids. A record of a click not
 * held is new when its stamp is at least {@code M}; a record stamped below {@code M} is a copy (a first emission's
 * stamp is never below {@code M}: a re-emission, or a batch of enrich_clicks run again after a crash), which
 * changes nothing in the specification whether its click is held or forgotten, and is set aside as
 * <em>settled</em>. A record without a stamp (its partition's first click, and its copies) is before every stamp:
 * never late, never a new life, a copy once the user has a stamp.
 */
final class ClickGaps implements Serializable {
  private static final long serialVersionUID = 1L;

  /** The width of a bucket: a minute of a user's clicks, whatever the gap (a user clicking every 2 s: 30 a
   * bucket). The first layout kept buckets as wide as the gap, and read three of them (2,700 clicks) per change. */
  static final long BUCKET_MS = 60_000;

  private static final int BUCKET_FORMAT = 2; // the first layout had no format byte (its first byte: 0)
  private static final int HEAD_FORMAT = 1;

  private final long gapMs;
  private final long hourMs;
  private final Long latenessMs; // null: unbounded (no record is late, nothing is forgotten)

  ClickGaps(long gapMs, long hourMs, Long latenessMs) {
    this.gapMs = gapMs;
    this.hourMs = hourMs;
    this.latenessMs = latenessMs;
  }

  /** One record of a click, as the batch gives it. {@code stampMs}: its partition stamp (null: none). */
  record Record(String eventId, long timeMs, String page, Long stampMs) {}

  /** A click's life: the n-th time it counts as a click of its own (case 2 starts the next one). */
  record Key(String eventId, int life) {}

  /** A counted click as the state keeps it; {@code gap} is its time on page (null: none). */
  static final class Click {
    final long timeMs;
    final String eventId;
    final int life;
    final String page;
    Long gap;

    Click(long timeMs, String eventId, int life, String page, Long gap) {
      this.timeMs = timeMs;
      this.eventId = Objects.requireNonNull(eventId, "event_id");
      this.life = life;
      this.page = page;
      this.gap = gap;
    }

    Key key() {
      return new Key(eventId, life);
    }
  }

  /** Event time, then event id as Spark orders strings (by their UTF-8 bytes, unsigned), then life. */
  static final Comparator<Click> ORDER =
      Comparator.<Click>comparingLong(c -> c.timeMs)
          .thenComparing(c -> c.eventId, ClickGaps::utf8)
          .thenComparingInt(c -> c.life);

  /** The order of the strings' UTF-8 bytes, without encoding them: UTF-8 keeps code point order, and UTF-16 keeps
   * it too except across surrogates, which are compared as code points. */
  static int utf8(String a, String b) {
    int n = Math.min(a.length(), b.length());
    for (int i = 0; i < n; i++) {
      char x = a.charAt(i);
      char y = b.charAt(i);
      if (x != y) {
        return Character.isSurrogate(x) || Character.isSurrogate(y)
            ? Integer.compare(a.codePointAt(i), b.codePointAt(i))
            : Character.compare(x, y);
      }
    }
    return Integer.compare(a.length(), b.length());
  }

  /** What a click counts for in page_stats: its (page, hour) and its time on page. */
  record Contribution(String page, long hourMs, Long gap) {}

  /** A contribution added ({@code sign} 1) or retracted (-1). */
  record Change(int sign, Contribution contribution) {}

  /** A batch's outcome: the contributions it changed, and the records it set aside (their indexes). */
  record Outcome(List<Change> changes, List<Integer> late, List<Integer> settled) {}

  /** The user's head value. */
  static final class Head {
    Long largestStampMs;
    final TreeSet<Long> buckets = new TreeSet<>(); // the buckets that hold clicks
    final TreeMap<String, Integer> lives = new TreeMap<>(); // event id -> its latest life, when above 0 (rare)

    void raise(Long stampMs) {
      if (stampMs != null && (largestStampMs == null || stampMs > largestStampMs)) {
        largestStampMs = stampMs;
      }
    }

    byte[] write() {
      ByteArrayOutputStream bytes = new ByteArrayOutputStream(16 + 8 * buckets.size());
      try (DataOutputStream out = new DataOutputStream(bytes)) {
        out.writeByte(HEAD_FORMAT);
        Bytes.writeLong(out, largestStampMs);
        out.writeInt(buckets.size());
        for (long b : buckets) {
          out.writeLong(b);
        }
        out.writeInt(lives.size());
        for (Map.Entry<String, Integer> e : lives.entrySet()) {
          Bytes.writeString(out, e.getKey());
          out.writeInt(e.getValue());
        }
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
      return bytes.toByteArray();
    }

    static Head read(byte[] stored) {
      return Bytes.decode("page_stats user", HEAD_FORMAT, stored, in -> {
        Head head = new Head();
        head.largestStampMs = Bytes.readLong(in);
        int n = in.readInt();
        for (int i = 0; i < n; i++) {
          head.buckets.add(in.readLong());
        }
        int lives = in.readInt();
        for (int i = 0; i < lives; i++) {
          head.lives.put(Bytes.readString(in), in.readInt());
        }
        return head;
      });
    }
  }

  static long bucketOf(long timeMs) {
    return Math.floorDiv(timeMs, BUCKET_MS);
  }

  /** A click's latest life as the store or the batch has it. */
  private record Position(long timeMs, int life) {}

  /**
   * One user's records of a batch, in log order, against the user's state: {@code head} (changed in place; the
   * caller writes it back), the buckets and the times by event id.
   */
  Outcome apply(Head head, BytesByLong bucketStore, LongById times, List<Record> records) {
    List<Integer> late = new ArrayList<>();
    List<Integer> settled = new ArrayList<>();
    Map<String, Position> stored = new HashMap<>(); // id -> its latest life in the store (null: none)
    Map<String, Position> current = new HashMap<>(); // id -> its latest life after the records so far
    LinkedHashMap<Key, Record> latest = new LinkedHashMap<>(); // each life's latest record in the batch
    for (int i = 0; i < records.size(); i++) {
      Record r = records.get(i);
      Long stamp = latenessMs == null ? null : r.stampMs();
      if (stamp != null && r.timeMs() < stamp - latenessMs) { // case 1
        late.add(i);
        head.raise(stamp);
        continue;
      }
      if (latenessMs != null && head.largestStampMs != null && (stamp == null || stamp < head.largestStampMs)) {
        settled.add(i); // a copy: it changes nothing
        continue;
      }
      String id = r.eventId();
      Position now = current.containsKey(id) ? current.get(id) : stored.computeIfAbsent(id, k -> held(k, head, times));
      int life;
      if (now == null) {
        life = 0; // a new click, or one forgotten: the same contributions as a new life of it
      } else if (stamp != null && now.timeMs() < stamp - latenessMs - gapMs) {
        life = now.life() + 1; // case 2: a new click beside the earlier one, which stays counted
      } else {
        life = now.life(); // case 3: it replaces the click's latest
      }
      Key key = new Key(id, life);
      latest.remove(key); // the latest record in log order counts
      latest.put(key, r);
      current.put(id, new Position(r.timeMs(), life));
      head.raise(stamp);
    }
    // Bounded: the buckets wholly older than the largest stamp - L - 2 gap go, with their ids, in three places, in
    // this order: place drops those it read (the batch's own clicks there are never written: a replay's batch holds
    // hours of a user's clicks, most of them), the loop below the ids of the batch's clicks, forget the rest.
    Long limit = null;
    if (latenessMs != null && head.largestStampMs != null) {
      limit = Math.floorDiv(head.largestStampMs - latenessMs - 2 * gapMs, BUCKET_MS);
    }
    List<Change> changes = List.of();
    if (!latest.isEmpty()) {
      Placed placed = place(head, bucketStore, latest, stored, limit);
      changes = placed.changes();
      for (Click c : placed.dropped()) { // held before this batch, forgotten now
        if (!current.containsKey(c.eventId)) {
          forgetId(c, head, times);
        }
      }
    }
    for (Map.Entry<String, Position> e : current.entrySet()) {
      String id = e.getKey();
      Position now = e.getValue();
      if (limit != null && bucketOf(now.timeMs()) < limit) { // its latest life is forgotten at once
        if (stored.get(id) != null) {
          times.remove(id);
        }
        head.lives.remove(id);
      } else if (!now.equals(stored.get(id))) {
        times.put(id, now.timeMs());
        if (now.life() > 0) {
          head.lives.put(id, now.life());
        } else {
          head.lives.remove(id);
        }
      }
    }
    if (limit != null) {
      forget(head, bucketStore, times, limit);
    }
    return new Outcome(changes, late, settled);
  }

  /** What {@link #place} did: the contributions it changed, and the clicks held before the batch that it dropped
   * with their buckets (their ids are still to go). */
  private record Placed(List<Change> changes, List<Click> dropped) {}

  private static Position held(String id, Head head, LongById times) {
    Long time = times.get(id);
    return time == null ? null : new Position(time, head.lives.getOrDefault(id, 0));
  }

  /**
   * Puts the batch's clicks in their buckets and recomputes the times on page they change: each changed click's
   * own, and its predecessor's, before and after the change (a click's time on page is the gap to the one next
   * after it, so no other changes). -> the contributions that changed.
   */
  private Placed place(
      Head head, BytesByLong bucketStore, Map<Key, Record> latest, Map<String, Position> stored, Long limit) {
    WriteBack<List<Click>> buckets =
        new WriteBack<>(bucketStore, ClickGaps::decode, ClickGaps::encode, List::isEmpty);
    // The positions that change: each click's new time, and where its life was before this batch. A moved click's
    // old position must be here: a neighbour beyond the nearest held bucket is reached only through it.
    List<Long> changedTimes = new ArrayList<>();
    for (Map.Entry<Key, Record> e : latest.entrySet()) {
      changedTimes.add(e.getValue().timeMs());
      Position was = stored.get(e.getKey().eventId());
      if (was != null && was.life() == e.getKey().life()) {
        changedTimes.add(was.timeMs());
      }
    }
    // Read each changed time's bucket and its nearest neighbours that hold clicks within the gap: a changed
    // position's predecessor and successor are among them (the buckets between hold nothing, and what a bucket
    // read held but the batch moved away has its own old position above, whose neighbours are read too).
    TreeSet<Click> near = new TreeSet<>(ORDER);
    Map<Key, Click> nearByKey = new HashMap<>();
    Set<Long> read = new HashSet<>();
    for (long t : changedTimes) {
      long b = bucketOf(t);
      Long lower = head.buckets.lower(b);
      Long higher = head.buckets.higher(b);
      for (Long r : new Long[] {b, lower, higher}) {
        // a neighbour whose clicks are all more than the gap away cannot change a time on page here
        boolean within =
            r != null && (r == b || (r < b ? (r + 1) * BUCKET_MS > t - gapMs : r * BUCKET_MS <= t + gapMs));
        if (!within || !read.add(r)) {
          continue;
        }
        for (Click c : head.buckets.contains(r) ? buckets.get(r) : buckets.getNew(r)) {
          near.add(c);
          nearByKey.put(c.key(), c);
        }
      }
    }
    Map<Key, Contribution> was = new HashMap<>();
    Set<Long> written = new HashSet<>(read); // the buckets this batch reads or writes
    List<Click> moved = new ArrayList<>(); // the positions left or taken: their predecessors' gaps change
    Set<Click> recompute = Collections.newSetFromMap(new IdentityHashMap<>());
    Set<Click> fresh = Collections.newSetFromMap(new IdentityHashMap<>()); // the batch's own clicks
    for (Map.Entry<Key, Record> e : latest.entrySet()) {
      Click old = nearByKey.get(e.getKey());
      if (old != null) {
        was.put(old.key(), contribution(old));
        near.remove(old);
        buckets.edit(bucketOf(old.timeMs)).remove(old);
        moved.add(old);
      }
      Record r = e.getValue();
      Click now = new Click(r.timeMs(), r.eventId(), e.getKey().life(), r.page(), null);
      near.add(now);
      buckets.edit(bucketOf(now.timeMs)).add(now);
      written.add(bucketOf(now.timeMs));
      moved.add(now);
      recompute.add(now);
      fresh.add(now);
    }
    for (Click position : moved) {
      // Its predecessor now, the last click ordered before it. One more than the gap before it keeps its time on
      // page (none, before and after); one within the gap is the true predecessor, its successor among `near`.
      Click before = near.lower(position);
      if (before != null && position.timeMs - before.timeMs <= gapMs && recompute.add(before)) {
        was.putIfAbsent(before.key(), contribution(before));
      }
    }
    Map<Key, Contribution> now = new HashMap<>();
    for (Click c : recompute) {
      Click next = near.higher(c);
      Long gap = next != null && next.timeMs - c.timeMs <= gapMs ? next.timeMs - c.timeMs : null;
      if (!Objects.equals(gap, c.gap)) {
        c.gap = gap;
        buckets.changed(bucketOf(c.timeMs));
      }
      now.put(c.key(), contribution(c));
    }
    List<Change> changes = new ArrayList<>();
    for (Map.Entry<Key, Contribution> e : was.entrySet()) {
      if (!e.getValue().equals(now.get(e.getKey()))) {
        changes.add(new Change(-1, e.getValue()));
      }
    }
    for (Map.Entry<Key, Contribution> e : now.entrySet()) {
      if (!e.getValue().equals(was.get(e.getKey()))) {
        changes.add(new Change(1, e.getValue()));
      }
    }
    List<Click> dropped = new ArrayList<>();
    if (limit != null) {
      for (long b : written) {
        if (b < limit) { // forgotten now: not written (removed, where the store held it)
          for (Click c : buckets.get(b)) {
            if (!fresh.contains(c)) {
              dropped.add(c);
            }
          }
          buckets.replace(b, new ArrayList<>());
        }
      }
    }
    Set<Long> left = new HashSet<>(buckets.flush());
    for (Click c : near) {
      head.buckets.add(bucketOf(c.timeMs));
    }
    head.buckets.removeAll(left);
    return new Placed(changes, dropped);
  }

  private Contribution contribution(Click c) {
    return new Contribution(c.page, Math.floorDiv(c.timeMs, hourMs) * hourMs, c.gap);
  }

  /** Drops the stored buckets below {@code limit} (each ends at or before the largest stamp - L - 2 gap) that the
   * batch did not read, with their ids. */
  private static void forget(Head head, BytesByLong bucketStore, LongById times, long limit) {
    for (long b : new ArrayList<>(head.buckets.headSet(limit))) {
      for (Click c : decode(bucketStore.get(b))) {
        forgetId(c, head, times);
      }
      bucketStore.remove(b);
      head.buckets.remove(b);
    }
  }

  /** A forgotten click's id goes with it when it was the click's latest life. */
  private static void forgetId(Click c, Head head, LongById times) {
    if (c.life == head.lives.getOrDefault(c.eventId, 0)) {
      times.remove(c.eventId);
      head.lives.remove(c.eventId);
    }
  }

  static List<Click> decode(byte[] stored) {
    if (stored == null) {
      return new ArrayList<>();
    }
    return Bytes.decode("page_stats clicks", BUCKET_FORMAT, stored, in -> {
      int n = in.readInt();
      List<Click> clicks = new ArrayList<>(n + 4);
      for (int i = 0; i < n; i++) {
        clicks.add(readClick(in));
      }
      return clicks;
    });
  }

  private static Click readClick(DataInputStream in) throws IOException {
    long time = in.readLong();
    String id = Bytes.readString(in);
    int life = in.readInt();
    String page = Bytes.readString(in);
    return new Click(time, id, life, page, Bytes.readLong(in));
  }

  static byte[] encode(List<Click> clicks) {
    ByteArrayOutputStream bytes = new ByteArrayOutputStream(48 * clicks.size() + 8);
    try (DataOutputStream out = new DataOutputStream(bytes)) {
      out.writeByte(BUCKET_FORMAT);
      out.writeInt(clicks.size());
      for (Click c : clicks) {
        out.writeLong(c.timeMs);
        Bytes.writeString(out, c.eventId);
        out.writeInt(c.life);
        Bytes.writeString(out, c.page);
        Bytes.writeLong(out, c.gap);
      }
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return bytes.toByteArray();
  }
}
