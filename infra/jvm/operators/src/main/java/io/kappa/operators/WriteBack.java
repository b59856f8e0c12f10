package io.kappa.operators;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.Function;
import java.util.function.Predicate;

/**
 * The values of one key's {@link BytesByLong} that a batch read or changed, decoded once and written back once
 * by {@link #flush}: only the changed ones, and a value left empty leaves the store (a removal only where the
 * store held one: a state store write costs about 10 us however small, a removal too). What {@link GroupTimes},
 * {@link HeldBuckets} and {@link SessionIds} share.
 *
 * @param <V> a decoded value, changed in place by its owner
 */
final class WriteBack<V> {
  private final BytesByLong store;
  private final Function<byte[], V> decode; // given null (absent): an empty value
  private final Function<V, byte[]> encode;
  private final Predicate<V> isEmpty;
  private final Map<Long, V> values = new HashMap<>(); // as they are now
  private final Set<Long> stored = new HashSet<>(); // those the store held when read
  private final Set<Long> changed = new HashSet<>();

  WriteBack(BytesByLong store, Function<byte[], V> decode, Function<V, byte[]> encode, Predicate<V> isEmpty) {
    this.store = store;
    this.decode = decode;
    this.encode = encode;
    this.isEmpty = isEmpty;
  }

  /** The value under {@code key}, read from the store the first time this batch asks. */
  V get(long key) {
    return values.computeIfAbsent(key, k -> {
      byte[] value = store.get(k);
      if (value != null) {
        stored.add(k);
      }
      return decode.apply(value);
    });
  }

  /** The value under {@code key}, known not to be in the store (a key's first batch, a bucket its head lacks): no read. */
  V getNew(long key) {
    return values.computeIfAbsent(key, k -> decode.apply(null));
  }

  /** {@link #get}, marked to be written back. */
  V edit(long key) {
    V value = get(key);
    changed.add(key);
    return value;
  }

  /** Marks a value already read as changed in place. */
  void changed(long key) {
    if (!values.containsKey(key)) {
      throw new IllegalStateException("a value is marked changed before it was read: " + key);
    }
    changed.add(key);
  }

  /**
   * Puts {@code value} under {@code key} without reading what the store holds there (a value rebuilt whole, e.g.
   * every bucket after a resize, all of which were read first): it is written back, or removed when empty.
   */
  void replace(long key, V value) {
    values.put(key, value);
    changed.add(key);
  }

  /** Writes back what changed; -> the keys left empty (removed from the store if it held them). Flushed once. */
  List<Long> flush() {
    List<Long> emptied = new ArrayList<>();
    for (long key : changed) {
      V value = values.get(key);
      if (!isEmpty.test(value)) {
        store.put(key, encode.apply(value));
        continue;
      }
      emptied.add(key);
      if (stored.contains(key)) {
        store.remove(key);
      }
    }
    values.clear(); // cleared so that a second flush writes nothing again
    stored.clear();
    changed.clear();
    return emptied;
  }
}
