package io.kappa.operators;

import java.util.HashMap;
import java.util.Map;

/** A state store's map of one key held in a HashMap, counting what is written. */
class MapBytesByLong implements BytesByLong {
  final Map<Long, byte[]> values = new HashMap<>();
  int gets;
  int puts;
  int removes;
  long bytesPut;

  /** Forget what was counted so far: what follows is what one batch writes. */
  void resetCounts() {
    gets = puts = removes = 0;
    bytesPut = 0;
  }

  @Override
  public byte[] get(long key) {
    gets++;
    return values.get(key);
  }

  @Override
  public void put(long key, byte[] value) {
    values.put(key, value);
    puts++;
    bytesPut += value.length;
  }

  @Override
  public void remove(long key) {
    values.remove(key);
    removes++;
  }
}
