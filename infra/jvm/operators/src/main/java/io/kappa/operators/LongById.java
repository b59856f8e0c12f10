package io.kappa.operators;

import org.apache.spark.sql.streaming.MapState;

/**
 * One key's longs by an id (an event's time bucket, an event's time), as the state store keeps them: the index
 * beside {@link HeldBuckets} and {@link SessionIds}, read and written an id at a time, or a test's map.
 */
interface LongById {
  Long get(String id); // null when absent

  void put(String id, long value);

  void remove(String id);

  /** Spark's map state of the current key. */
  static LongById of(MapState<String, Long> state) {
    return new LongById() {
      @Override
      public Long get(String id) {
        return state.getValue(id); // null when absent
      }

      @Override
      public void put(String id, long value) {
        state.updateValue(id, value);
      }

      @Override
      public void remove(String id) {
        state.removeKey(id);
      }
    };
  }
}
