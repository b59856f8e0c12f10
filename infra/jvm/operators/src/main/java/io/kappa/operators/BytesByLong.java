package io.kappa.operators;

import org.apache.spark.sql.streaming.MapState;

/**
 * One key's values by a long (a time bucket, a range's index, a hash bucket), as the state store keeps them: what
 * {@link GroupTimes}, {@link HeldBuckets} and {@link SessionIds} read and write a value at a time, so that a batch
 * writes only what it changes, and a test can keep them in a map.
 */
interface BytesByLong {
  byte[] get(long key); // null when absent

  void put(long key, byte[] value);

  void remove(long key);

  /** Spark's map state of the current key. */
  static BytesByLong of(MapState<Long, byte[]> state) {
    return new BytesByLong() {
      @Override
      public byte[] get(long key) {
        return state.getValue(key); // null when absent
      }

      @Override
      public void put(long key, byte[] value) {
        state.updateValue(key, value);
      }

      @Override
      public void remove(long key) {
        state.removeKey(key);
      }
    };
  }

  /** One owner's values in a map state that many owners share (the users of a partition): keys prefixed by
   * {@link #owned}. */
  static BytesByLong under(MapState<String, byte[]> state, String owner) {
    String prefix = owned(owner, "");
    return new BytesByLong() {
      @Override
      public byte[] get(long key) {
        return state.getValue(prefix + key); // null when absent
      }

      @Override
      public void put(long key, byte[] value) {
        state.updateValue(prefix + key, value);
      }

      @Override
      public void remove(long key) {
        state.removeKey(prefix + key);
      }
    };
  }

  /** The key of {@code owner}'s entry {@code key} in a shared map: the owner's length first, so that no two
   * (owner, key) pairs share one. */
  static String owned(String owner, String key) {
    return owner.length() + ":" + owner + ":" + key;
  }
}
