package io.kappa.operators;

import java.util.HashMap;
import java.util.Map;
import java.util.function.BiConsumer;

/** A key's state-store maps held in HashMaps: values by a long and longs by an id, counting what is written. */
final class MapStore extends MapBytesByLong implements LongById {
  final Map<String, Long> index = new HashMap<>();
  int indexWrites;

  /** Another store holding the same values, for a second run from the same point. */
  MapStore copy() {
    MapStore copy = new MapStore();
    copy.values.putAll(values);
    copy.index.putAll(index);
    return copy;
  }

  @Override
  public Long get(String id) {
    return index.get(id);
  }

  @Override
  public void put(String id, long value) {
    index.put(id, value);
    indexWrites++;
  }

  @Override
  public void remove(String id) {
    index.remove(id);
    indexWrites++;
  }

  @Override
  public void forEach(BiConsumer<String, Long> action) {
    Map.copyOf(index).forEach(action);
  }

  @Override
  public void clear() {
    indexWrites += index.size();
    index.clear();
  }
}
