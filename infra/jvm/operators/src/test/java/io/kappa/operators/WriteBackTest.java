package io.kappa.operators;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.nio.charset.StandardCharsets;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The write-back the state layouts share: each value read once, only what changed written, removals counted. */
class WriteBackTest {
  private static WriteBack<StringBuilder> over(MapBytesByLong store) {
    return new WriteBack<>(
        store,
        stored -> new StringBuilder(stored == null ? "" : new String(stored, StandardCharsets.UTF_8)),
        value -> value.toString().getBytes(StandardCharsets.UTF_8),
        value -> value.length() == 0);
  }

  private static byte[] bytes(String text) {
    return text.getBytes(StandardCharsets.UTF_8);
  }

  @Test
  void aValueIsReadOnceAndOnlyWhatChangedIsWrittenBack() {
    MapBytesByLong store = new MapBytesByLong();
    store.values.put(1L, bytes("a"));
    store.values.put(2L, bytes("b"));
    WriteBack<StringBuilder> values = over(store);
    values.edit(1L).append("x");
    values.get(1L).append("y"); // the same value, changed in place: edited already
    assertEquals("b", values.get(2L).toString()); // read, not changed
    assertEquals(2, store.gets, "one read per key");
    assertEquals(List.of(), values.flush());
    assertEquals(1, store.puts, "only the changed value");
    assertArrayEquals(bytes("axy"), store.values.get(1L));
    assertArrayEquals(bytes("b"), store.values.get(2L));
  }

  @Test
  void aValueLeftEmptyIsRemovedOnlyWhereTheStoreHeldOne() {
    MapBytesByLong store = new MapBytesByLong();
    store.values.put(1L, bytes("a"));
    WriteBack<StringBuilder> values = over(store);
    values.edit(1L).setLength(0); // held, emptied: removed
    values.edit(7L); // never held, left empty: nothing to remove
    values.replace(8L, new StringBuilder()); // rebuilt empty, never held: nothing either
    assertEquals(List.of(1L, 7L, 8L), values.flush().stream().sorted().toList());
    assertEquals(1, store.removes, "a removal costs a write: only the value the store held");
    assertEquals(0, store.puts);
    assertFalse(store.values.containsKey(1L));
  }

  @Test
  void aFirstBatchReadsNothingAndASecondFlushWritesNothing() {
    MapBytesByLong store = new MapBytesByLong();
    WriteBack<StringBuilder> values = over(store);
    values.getNew(3L).append("c");
    values.changed(3L);
    values.flush();
    assertEquals(0, store.gets, "a key known to hold nothing is not read");
    assertEquals(1, store.puts);
    store.resetCounts();
    values.flush();
    assertEquals(0, store.puts + store.removes, "flushed once: a second flush writes nothing again");
  }

  @Test
  void markingAValueNeverReadAsChangedIsRefused() {
    WriteBack<StringBuilder> values = over(new MapBytesByLong());
    assertThrows(IllegalStateException.class, () -> values.changed(5L));
  }
}
