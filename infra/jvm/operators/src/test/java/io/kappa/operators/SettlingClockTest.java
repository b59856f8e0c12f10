package io.kappa.operators;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.util.Arrays;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** page_stats' clock, worked by hand: T = the least of the partitions' largest stamps - L - 2 gap, unknown while a
 * partition has given none; each hour's pages settled once, when the hour ended by T; an hour settled is never
 * opened again; the state's bytes round-trip. */
class SettlingClockTest {
  private static final long MIN = 60_000;
  private static final long HOUR = 60 * MIN;
  private static final SettlingClock CLOCK = new SettlingClock(2, 10 * MIN, 5 * MIN, HOUR); // T = least - 20 min

  private static Map<Long, LinkedHashSet<String>> groups(long hour, String... pages) {
    return Map.of(hour, new LinkedHashSet<>(Arrays.asList(pages)));
  }

  @Test
  void nothingSettlesUntilEveryPartitionHasAStampThenEachHourOnceWhenItEndedByT() {
    SettlingClock.State state = new SettlingClock.State();
    MapBytesByLong pages = new MapBytesByLong();
    // partition 0 far ahead, partition 1 silent: T unknown
    assertEquals(List.of(), CLOCK.advance(state, pages, Map.of(0, 10 * HOUR), groups(0, "/a", null)));
    assertNull(CLOCK.settledThrough(state));
    // partition 1 at 1:19: T = 0:59, hour 0 has not ended
    assertEquals(List.of(), CLOCK.advance(state, pages, Map.of(1, HOUR + 19 * MIN), groups(0, "/b")));
    assertEquals(HOUR - MIN, CLOCK.settledThrough(state));
    // at 1:20, T = 1:00: hour 0 ends exactly there, its three pages settle (a page-less click's group too)
    List<SettlingClock.Group> settled = CLOCK.advance(state, pages, Map.of(1, HOUR + 20 * MIN), groups(HOUR, "/c"));
    assertEquals(
        List.of(new SettlingClock.Group("/a", 0), new SettlingClock.Group(null, 0), new SettlingClock.Group("/b", 0)),
        settled);
    assertEquals(List.of(HOUR), List.copyOf(state.openHours));
    assertNull(pages.values.get(0L));
    // a click of hour 0 read now (a re-emission) does not open it again
    assertEquals(List.of(), CLOCK.advance(state, pages, Map.of(1, HOUR + 30 * MIN), groups(0, "/d")));
    assertEquals(List.of(HOUR), List.copyOf(state.openHours));
    // a stamp lower than one seen moves nothing back
    assertEquals(List.of(), CLOCK.advance(state, pages, Map.of(1, 5 * MIN), Map.of()));
    assertEquals(HOUR + 10 * MIN, CLOCK.settledThrough(state));
  }

  @Test
  void theStateRoundTrips() {
    SettlingClock.State state = new SettlingClock.State();
    MapBytesByLong pages = new MapBytesByLong();
    CLOCK.advance(state, pages, Map.of(0, 3 * HOUR, 1, 2 * HOUR + 25 * MIN), groups(HOUR, "/a", null));
    CLOCK.advance(state, pages, Map.of(), groups(2 * HOUR, "/b"));
    SettlingClock.State again = SettlingClock.State.read(state.write());
    assertEquals(state.largestStamps, again.largestStamps);
    assertEquals(state.openHours, again.openHours);
    assertEquals(state.settledThroughMs, again.settledThroughMs);
    assertEquals(new LinkedHashSet<>(List.of("/b")), SettlingClock.readPages(pages.values.get(2 * HOUR)));
    byte[] cut = Arrays.copyOf(state.write(), 7);
    assertThrows(IllegalStateException.class, () -> SettlingClock.State.read(cut));
  }
}
