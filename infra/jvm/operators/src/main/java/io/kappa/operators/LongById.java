package io.kappa.operators;

import java.util.function.BiConsumer;
import org.apache.spark.sql.streaming.MapState;
import scala.Tuple2;

/**
 * One key's longs by an id (an event's time bucket, an event's time), as the state store keeps them: the index
 * beside {@link HeldBuckets}, read and written an id at a time, and sessionize's former index, read whole and
 * cleared by {@link SessionRule#upgrade}; or a test's map.
 */
interface LongById {
  Long get(String id); // null when absent

  void put(String id, long value);

  void remove(String id);

  /** Every entry of the key's map, read in one scan of the store. */
  void forEach(BiConsumer<String, Long> action);

  /** Removes every entry of the key's map. */
  void clear();

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

      @Override
      public void forEach(BiConsumer<String, Long> action) {
        scala.collection.Iterator<Tuple2<String, Long>> entries = state.iterator();
        while (entries.hasNext()) {
          Tuple2<String, Long> entry = entries.next();
          action.accept(entry._1(), entry._2());
        }
      }

      @Override
      public void clear() {
        state.clear();
      }
    };
  }
}
