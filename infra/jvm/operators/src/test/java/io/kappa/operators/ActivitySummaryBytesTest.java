package io.kappa.operators;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import java.util.Arrays;
import org.junit.jupiter.api.Test;

/**
 * user_activity's per-user summary: its bytes with a summary of the final sessions inside survive a round trip,
 * and a value of the first layout (written before final sessions existed: the same fields without the trailing
 * flag) is still read, with no final session.
 */
class ActivitySummaryBytesTest {

  private static ActivityProcessor.Summary summary() {
    ActivityProcessor.Summary s = new ActivityProcessor.Summary();
    s.add(new ActivityProcessor.Session("u:a", 1_000L, 2_000L, 3L, "PRO"));
    s.add(new ActivityProcessor.Session("u:b", null, 5_000L, null, null));
    s.emitted = true;
    s.emittedSessions = 2;
    s.emittedClicks = 3;
    s.emittedFirst = 1_000L;
    s.emittedLast = 5_000L;
    s.emittedSegment = "PRO";
    return s;
  }

  private static String shown(ActivityProcessor.Summary s) {
    return s == null
        ? "none"
        : s.sessions + " " + s.clicks + " " + s.firstSeen + " " + s.lastSeen + " " + s.latest + " " + s.emitted + " "
            + s.emittedSessions + " " + s.emittedClicks + " " + s.emittedFirst + " " + s.emittedLast + " "
            + s.emittedSegment + " settled: " + shown(s.settled);
  }

  @Test
  void aSummaryWithFinalSessionsRoundTrips() {
    ActivityProcessor.Summary s = summary();
    s.settle(new ActivityProcessor.Session("u:a", 1_000L, 2_000L, 3L, "PRO"));
    ActivityProcessor.Summary read = ActivityProcessor.Summary.read(s.write());
    assertEquals(shown(s), shown(read));
    assertEquals(1, read.settled.sessions);
    assertArrayEquals(s.write(), read.write());
  }

  @Test
  void aFirstLayoutSummaryIsReadWithNoFinalSession() {
    ActivityProcessor.Summary s = summary();
    byte[] now = s.write();
    assertEquals(0, now[now.length - 1], "no final session: the layout ends with a false flag");
    byte[] first = Arrays.copyOf(now, now.length - 1); // the first layout: the same fields, no flag
    ActivityProcessor.Summary read = ActivityProcessor.Summary.read(first);
    assertNull(read.settled);
    assertEquals(shown(s), shown(read));
    assertArrayEquals(now, read.write(), "written again in today's layout");
  }
}
