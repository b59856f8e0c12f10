package io.kappa.operators;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.HashSet;
import java.util.Set;
import org.apache.spark.unsafe.hash.Murmur3_x86_32;
import org.junit.jupiter.api.Test;

/**
 * The as-of join's state keys: Spark's hash partitioning, restated here as Spark's HashPartitioning computes it
 * (pmod of Murmur3 with seed 42), sends partition p's key to shuffle partition p % n for every n dividing 64,
 * and the key gives its partition back.
 */
class SpreadKeyTest {
  private static int shufflePartition(int key, int n) {
    return Math.floorMod(Murmur3_x86_32.hashInt(key, 42), n);
  }

  @Test
  void aTopicsPartitionsSpreadEvenlyOverTheTasks() {
    Set<Integer> keys = new HashSet<>();
    for (int p = 0; p < 300; p++) {
      int key = AsOfJoin.spreadKey(p);
      assertEquals(p, AsOfJoin.partitionOf(key));
      assertEquals(key, AsOfJoin.spreadKey(p)); // the same every time: a checkpoint's state keeps its key
      keys.add(key);
      for (int n : new int[] {1, 2, 4, 8, 16, 32, 64}) {
        assertEquals(p % n, shufflePartition(key, n), "partition " + p + " over " + n + " tasks");
      }
    }
    assertEquals(300, keys.size());
  }

  @Test
  void theIntsThemselvesWouldNot() {
    // why: Spark's hash sends the partitions 0, 1 and 3 to one of two tasks
    assertEquals(1, shufflePartition(0, 2));
    assertEquals(1, shufflePartition(1, 2));
    assertEquals(0, shufflePartition(2, 2));
    assertEquals(1, shufflePartition(3, 2));
  }
}
