package io.kappa.operators;

import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;

/**
 * One key's held events ({@link AsOfRule}: the clicks a late version may still correct) kept by event-time
 * bucket in the state store, so that a batch writes what it changes: the buckets its events fall in, the
 * bucket the settle step cuts, and an index entry per new event. The whole set is read only when a new version
 * may correct any of them, and never written whole.
 *
 * <p>It keeps the order of a Python dict (jobs/enrich_clicks/logic.py's {@code held}): each event has the
 * number of its first insertion; an event put again (the same id) keeps its number, wherever its time moves it.
 */
final class HeldBuckets {
  static final long BUCKET_MS = 60_000;
  private static final int FORMAT = 1;

  /** What the key's head value keeps of its held events: the buckets that hold some, and the next number. */
  static final class Head {
    final TreeSet<Long> buckets = new TreeSet<>();
    long nextNumber;
  }

  /** A held event, its insertion number, and the version last emitted for it (null: none). */
  static final class Entry {
    final long number;
    AsOfRule.Event event;
    Long answer;

    Entry(long number, AsOfRule.Event event, Long answer) {
      this.number = number;
      this.event = event;
      this.answer = answer;
    }
  }

  private final WriteBack<List<Entry>> buckets; // the key's buckets this batch read or changed: bucket -> events
  private final LongById index; // event id -> its bucket
  private final Head head;
  // The index entries this batch read or changed: id -> bucket, null once settled; and as the store had them.
  // Only the net change is written, so that an event held and settled in one batch (a replay's) costs nothing.
  private final Map<String, Long> indexNow = new HashMap<>();
  private final Map<String, Long> indexBefore = new HashMap<>();

  HeldBuckets(BytesByLong buckets, LongById index, Head head) {
    this.buckets = new WriteBack<>(buckets, HeldBuckets::decode, HeldBuckets::encode, List::isEmpty);
    this.index = index;
    this.head = head;
  }

  static long bucketOf(long timeMs) {
    return Math.floorDiv(timeMs, BUCKET_MS);
  }

  /** Holds {@code event} with {@code answer}: a new id goes last, a known id keeps its place. */
  void put(AsOfRule.Event event, Long answer) {
    long bucket = bucketOf(event.timeMs());
    Long at = indexed(event.id());
    long number;
    if (at == null) {
      number = head.nextNumber++;
    } else {
      Entry known = take(at, event.id());
      number = known.number;
    }
    buckets.edit(bucket).add(new Entry(number, event, answer));
    head.buckets.add(bucket);
    indexNow.put(event.id(), bucket);
  }

  private Long indexed(String id) {
    if (!indexBefore.containsKey(id)) {
      indexBefore.put(id, index.get(id));
      indexNow.put(id, indexBefore.get(id));
    }
    return indexNow.get(id);
  }

  /** Every held event, in the order of their first insertion. */
  List<Entry> inOrder() {
    List<Entry> all = new ArrayList<>();
    for (long bucket : head.buckets) {
      all.addAll(buckets.get(bucket));
    }
    all.sort(Comparator.comparingLong(e -> e.number));
    return all;
  }

  /** Records a held event's new answer (an entry of {@link #inOrder}). */
  void answer(Entry entry, Long answer) {
    entry.answer = answer;
    buckets.changed(bucketOf(entry.event.timeMs()));
  }

  /** Forgets the events before {@code horizonMs}: -> the greatest event time among them, or null if none. */
  Long settle(long horizonMs) {
    Long greatest = null;
    // Every event of a bucket before the horizon's is before the horizon; the horizon's own bucket is cut.
    for (long bucket : new ArrayList<>(head.buckets.headSet(bucketOf(horizonMs), true))) {
      Iterator<Entry> it = buckets.get(bucket).iterator();
      while (it.hasNext()) {
        Entry e = it.next();
        if (e.event.timeMs() < horizonMs) {
          it.remove();
          if (!indexBefore.containsKey(e.event.id())) { // not read this batch: a held event is indexed
            indexBefore.put(e.event.id(), bucket);
          }
          indexNow.put(e.event.id(), null);
          greatest = greatest == null ? e.event.timeMs() : Math.max(greatest, e.event.timeMs());
          buckets.changed(bucket);
        }
      }
    }
    return greatest;
  }

  /** Writes back what this batch changed; a bucket left empty leaves the store and the head. */
  void flush() {
    for (long emptied : buckets.flush()) {
      head.buckets.remove(emptied);
    }
    for (Map.Entry<String, Long> e : indexNow.entrySet()) {
      Long before = indexBefore.get(e.getKey());
      if (e.getValue() == null && before != null) {
        index.remove(e.getKey());
      } else if (e.getValue() != null && !e.getValue().equals(before)) {
        index.put(e.getKey(), e.getValue());
      }
    }
    indexNow.clear(); // a batch's HeldBuckets is flushed once; cleared so that a second flush writes nothing again
    indexBefore.clear();
  }

  /** Removes the entry of {@code id} from its bucket {@code at} (the index says it is there). */
  private Entry take(long at, String id) {
    Iterator<Entry> it = buckets.get(at).iterator();
    while (it.hasNext()) {
      Entry e = it.next();
      if (e.event.id().equals(id)) {
        it.remove();
        buckets.changed(at);
        return e;
      }
    }
    throw new IllegalStateException("as-of: the index puts event " + id + " in a bucket that does not hold it");
  }

  static byte[] encode(List<Entry> entries) {
    ByteArrayOutputStream bytes = new ByteArrayOutputStream(64 * entries.size());
    try (DataOutputStream out = new DataOutputStream(bytes)) {
      out.writeByte(FORMAT);
      out.writeInt(entries.size());
      for (Entry e : entries) {
        out.writeLong(e.number);
        Bytes.writeString(out, e.event.id());
        out.writeLong(e.event.timeMs());
        Bytes.writeStrings(out, e.event.payload());
        Bytes.writeLong(out, e.answer);
      }
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return bytes.toByteArray();
  }

  static List<Entry> decode(byte[] stored) {
    if (stored == null) {
      return new ArrayList<>();
    }
    return Bytes.decode("as-of held bucket", FORMAT, stored, HeldBuckets::readEntries);
  }

  private static List<Entry> readEntries(DataInputStream in) throws IOException {
    int n = in.readInt();
    List<Entry> entries = new ArrayList<>(n);
    for (int i = 0; i < n; i++) {
      long number = in.readLong();
      AsOfRule.Event event = new AsOfRule.Event(Bytes.readString(in), in.readLong(), Bytes.readStrings(in));
      entries.add(new Entry(number, event, Bytes.readLong(in)));
    }
    return entries;
  }
}
