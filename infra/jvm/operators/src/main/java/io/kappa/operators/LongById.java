package io.kappa.operators;

import java.util.ArrayList;
import java.util.List;
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

  /** One owner's longs in a map state that many owners share (the users of a partition), keys prefixed as
   * {@link BytesByLong#owned} does. forEach and clear scan the whole map (the as-of rule calls neither). */
  static LongById under(MapState<String, Long> state, String owner) {
    String prefix = BytesByLong.owned(owner, "");
    return new LongById() {
      @Override
      public Long get(String id) {
        return state.getValue(prefix + id); // null when absent
      }

      @Override
      public void put(String id, long value) {
        state.updateValue(prefix + id, value);
      }

      @Override
      public void remove(String id) {
        state.removeKey(prefix + id);
      }

      @Override
      public void forEach(BiConsumer<String, Long> action) {
        List<Tuple2<String, Long>> mine = new ArrayList<>();
        scala.collection.Iterator<Tuple2<String, Long>> entries = state.iterator();
        while (entries.hasNext()) {
          Tuple2<String, Long> entry = entries.next();
          if (entry._1().startsWith(prefix)) {
            mine.add(entry);
          }
        }
        mine.forEach(entry -> action.accept(entry._1().substring(prefix.length()), entry._2()));
      }

      @Override
      public void clear() {
        forEach((id, value) -> remove(id));
      }
    };
  }
}
