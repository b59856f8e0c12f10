package io.kappa.operators;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.Function;
import org.junit.jupiter.api.Test;

/**
 * The state bytes of both rules (the as-of rule's format 2, format 1 refused; the sessions' format 4, formats
 * 1 and 2 still read): every kind of value survives a round trip, the layout is the
 * one written down here byte by byte (a change to it must change FORMAT), and bytes of another format, cut
 * short or with bytes left over are refused with a message that says so.
 */
class StateBytesTest {

  // ---- Bytes: the nullable values

  private interface Write {
    void to(DataOutputStream out) throws IOException;
  }

  private static byte[] write(Write w) throws IOException {
    ByteArrayOutputStream bytes = new ByteArrayOutputStream();
    try (DataOutputStream out = new DataOutputStream(bytes)) {
      w.to(out);
    }
    return bytes.toByteArray();
  }

  private static DataInputStream in(byte[] data) {
    return new DataInputStream(new ByteArrayInputStream(data));
  }

  @Test
  void nullableValuesHaveTheirDocumentedBytes() throws IOException {
    assertArrayEquals(new byte[] {0}, write(out -> Bytes.writeLong(out, null)));
    assertArrayEquals(new byte[] {1, 0, 0, 0, 0, 0, 0, 1, 0}, write(out -> Bytes.writeLong(out, 256L)));
    assertArrayEquals(new byte[] {-1, -1, -1, -1}, write(out -> Bytes.writeString(out, null)));
    assertArrayEquals(new byte[] {0, 0, 0, 0}, write(out -> Bytes.writeString(out, "")));
    // "é" is two bytes of UTF-8 (0xC3 0xA9), not one char
    assertArrayEquals(new byte[] {0, 0, 0, 2, (byte) 0xC3, (byte) 0xA9}, write(out -> Bytes.writeString(out, "é")));
  }

  @Test
  void nullableValuesRoundTrip() throws IOException {
    String big = "x".repeat(70_000) + "\u00e9\u6f22\ud83d\ude00"; // beyond writeUTF's 64 KiB, outside the BMP
    String[] values = {null, "", "plain", big};
    byte[] data =
        write(
            out -> {
              Bytes.writeLong(out, null);
              Bytes.writeLong(out, Long.MIN_VALUE);
              Bytes.writeStrings(out, values);
              Bytes.writeStrings(out, new String[0]);
            });
    DataInputStream in = in(data);
    assertNull(Bytes.readLong(in));
    assertEquals(Long.MIN_VALUE, Bytes.readLong(in));
    assertArrayEquals(values, Bytes.readStrings(in));
    assertArrayEquals(new String[0], Bytes.readStrings(in));
    assertEquals(0, in.available());
  }

  // ---- the as-of state

  private static AsOfRule.State asOfState() {
    AsOfRule.State s = new AsOfRule.State();
    s.versions.add(new AsOfRule.Version(1, -5, 10, new String[] {"GOLD", null, ""}));
    s.versions.add(new AsOfRule.Version(7, 100, Long.MAX_VALUE, new String[0]));
    s.held.nextNumber = 2;
    s.held.buckets.add(-1L);
    s.held.buckets.add(3L);
    s.frontierMs = 300L;
    s.settledThroughMs = null;
    return s;
  }

  /** Everything the state holds, as plain values (the rule's classes have no equals of their own). */
  private static List<Object> asOfValues(AsOfRule.State s) {
    List<Object> values = new ArrayList<>();
    for (AsOfRule.Version v : s.versions) {
      values.add(List.of(v.version(), v.validFromMs(), v.publishedMs(), Arrays.asList(v.payload())));
    }
    values.add(Arrays.asList(s.frontierMs, s.settledThroughMs, s.held.nextNumber, List.copyOf(s.held.buckets)));
    return values;
  }

  @Test
  void theAsOfStateRoundTrips() {
    AsOfRule.State original = asOfState();
    assertEquals(asOfValues(original), asOfValues(AsOfRule.deserialize(AsOfRule.serialize(original))));

    AsOfRule.State empty = AsOfRule.deserialize(AsOfRule.serialize(new AsOfRule.State()));
    assertEquals(asOfValues(new AsOfRule.State()), asOfValues(empty));

    AsOfRule.State settled = asOfState();
    settled.settledThroughMs = 42L;
    assertEquals(asOfValues(settled), asOfValues(AsOfRule.deserialize(AsOfRule.serialize(settled))));
  }

  @Test
  void theAsOfRuleContinuesFromItsBytesAsFromItsMemory() {
    MapStore store = new MapStore();
    AsOfRule.State kept = new AsOfRule.State();
    List<AsOfRule.Version> first = List.of(new AsOfRule.Version(1, 0, 0, new String[] {"A"}));
    AsOfRule.apply(kept, store, store, first, events("a", 100, "b", 400), 50, 10);
    AsOfRule.State stored = AsOfRule.deserialize(AsOfRule.serialize(kept));
    MapStore copy = store.copy();
    List<AsOfRule.Version> next = List.of(new AsOfRule.Version(2, 90, 95, new String[] {"B"}));
    AsOfRule.Changes fromMemory = AsOfRule.apply(kept, store, store, next, events("c", 410), 50, 10);
    AsOfRule.Changes fromBytes = AsOfRule.apply(stored, copy, copy, next, events("c", 410), 50, 10);
    assertEquals(describe(fromMemory), describe(fromBytes));
    assertEquals(List.of("c=2", "b=2", "late=[2]"), describe(fromBytes), "a settled at 100: version 2 is late");
  }

  private static List<AsOfRule.Event> events(Object... idsAndTimes) {
    List<AsOfRule.Event> out = new ArrayList<>();
    for (int i = 0; i < idsAndTimes.length; i += 2) {
      out.add(new AsOfRule.Event((String) idsAndTimes[i], ((Integer) idsAndTimes[i + 1]).longValue(), new String[0]));
    }
    return out;
  }

  private static List<String> describe(AsOfRule.Changes changes) {
    List<String> out = new ArrayList<>();
    for (AsOfRule.Answer a : changes.emit()) {
      out.add(a.event().id() + "=" + (a.version() == null ? "none" : a.version().version()));
    }
    List<Long> late = new ArrayList<>();
    changes.late().forEach(v -> late.add(v.version()));
    out.add("late=" + late);
    return out;
  }

  @Test
  void theAsOfLayoutIsFormatTwoAsWrittenDownHere() {
    AsOfRule.State s = new AsOfRule.State();
    s.versions.add(new AsOfRule.Version(3, 4, 5, new String[] {"S"}));
    s.held.nextNumber = 1;
    s.held.buckets.add(0L);
    s.frontierMs = 9L;
    ByteBuffer expected = ByteBuffer.allocate(1 + 4 + 24 + 4 + 4 + 1 + 9 + 1 + 8 + 4 + 8);
    expected.put((byte) 2); // FORMAT
    expected.putInt(1).putLong(3).putLong(4).putLong(5).putInt(1).putInt(1).put((byte) 'S'); // one version
    expected.put((byte) 1).putLong(9).put((byte) 0); // frontier 9, settled through: none
    expected.putLong(1).putInt(1).putLong(0); // the next insertion number; one bucket holds events: 0
    assertEquals(0, expected.remaining(), "the expected layout above is complete");
    assertArrayEquals(expected.array(), AsOfRule.serialize(s));
  }

  @Test
  void aFirstLayoutValueIsRefusedByItsFormat() {
    byte[] first = AsOfRule.serialize(asOfState());
    first[0] = 1; // format 1: v1's first jars, which held the events inline
    refuses(AsOfRule::deserialize, first, "as-of", "format 1, this operator reads 2");
  }

  // ---- the sessions state

  /** A session with its fields in SessionRule.Session's order. */
  private static SessionRule.Session session(
      String id, long startMs, long endMs, int clicks, Set<String> pages, String entryPage, String exitPage,
      long createdSeq, String segment, String firstEventId) {
    SessionRule.Session x = new SessionRule.Session();
    x.sessionId = id;
    x.startMs = startMs;
    x.endMs = endMs;
    x.clicks = clicks;
    x.pages.addAll(pages);
    x.entryPage = entryPage;
    x.exitPage = exitPage;
    x.createdSeq = createdSeq;
    x.segment = segment;
    x.firstEventId = firstEventId;
    return x;
  }

  private static SessionRule.State sessionsState() {
    SessionRule.State s = new SessionRule.State();
    s.latestMs = 5_000L;
    s.seen = 12;
    SessionRule.Session one =
        session("u:e1", 1_000, 2_000, 3, Set.of("/a", "/b\u00e9"), "/a", "/b\u00e9", 4, null, "e1");
    SessionRule.Session two = session("u:e9", 4_000, 4_000, 1, Set.of("/z"), "/z", "/z", 11, "GOLD", "e9");
    s.open.put(two.sessionId, two); // not in created order: the map's order must survive
    s.open.put(one.sessionId, one);
    s.idCount = 9;
    s.idBuckets = 2;
    s.earliestIdMs = -120_000L; // before the epoch
    return s;
  }

  private static List<Object> sessionsValues(SessionRule.State s) {
    List<Object> values = new ArrayList<>();
    values.add(Arrays.asList(s.latestMs, s.seen, s.idCount, s.idBuckets, s.earliestIdMs));
    s.open.forEach(
        (id, x) ->
            values.add(
                Arrays.asList(
                    id, x.sessionId, x.startMs, x.endMs, x.clicks, x.pages, x.entryPage, x.exitPage,
                    x.createdSeq, x.segment, x.firstEventId)));
    return values;
  }

  @Test
  void theSessionsStateRoundTrips() {
    SessionRule.State original = sessionsState();
    SessionRule.Stored back = SessionRule.deserialize(SessionRule.serialize(original));
    assertEquals(sessionsValues(original), sessionsValues(back.state()));
    assertEquals(List.of("u:e9", "u:e1"), new ArrayList<>(back.state().open.keySet()));
    assertTrue(back.inline().isEmpty());

    SessionRule.State empty = SessionRule.deserialize(SessionRule.serialize(new SessionRule.State())).state();
    assertNull(empty.latestMs);
    assertEquals(sessionsValues(new SessionRule.State()), sessionsValues(empty));
  }

  @Test
  void theSessionsLayoutIsFormatFourAsWrittenDownHere() {
    ByteBuffer expected = ByteBuffer.allocate(1 + 1 + 8 + 4 + 8 + 4 + 1);
    expected.put((byte) 4).put((byte) 0).putLong(0).putInt(0); // FORMAT, latest: none, seen 0, no session
    expected.putLong(0).putInt(1).put((byte) 0); // no id kept, in one bucket, so no earliest time
    assertArrayEquals(expected.array(), SessionRule.serialize(new SessionRule.State()));

    SessionRule.State s = new SessionRule.State();
    s.latestMs = 7L;
    s.seen = 1;
    s.open.put("i", session("i", 7, 7, 1, Set.of("p"), "p", "p", 0, null, "e"));
    s.idCount = 3;
    s.earliestIdMs = 5L;
    ByteBuffer one = ByteBuffer.allocate(1 + 9 + 8 + 4 + 5 + 16 + 4 + 9 + 5 + 5 + 8 + 4 + 5 + 8 + 4 + 9);
    one.put((byte) 4).put((byte) 1).putLong(7).putLong(1).putInt(1); // FORMAT, latest 7, seen 1, one session
    one.putInt(1).put((byte) 'i').putLong(7).putLong(7).putInt(1); // id, start, end, clicks
    one.putInt(1).putInt(1).put((byte) 'p'); // pages
    one.putInt(1).put((byte) 'p').putInt(1).put((byte) 'p'); // entry, exit
    one.putLong(0).putInt(-1); // created seq, segment: none
    one.putInt(1).put((byte) 'e'); // first event id
    one.putLong(3).putInt(1).put((byte) 1).putLong(5); // the ids kept, in one bucket, the earliest time kept
    assertEquals(0, one.remaining(), "the expected layout above is complete");
    assertArrayEquals(one.array(), SessionRule.serialize(s));
  }

  @Test
  void aSecondLayoutSessionsValueIsReadAndItsIndexAndListsRemoved() {
    ByteBuffer two = ByteBuffer.allocate(1 + 1 + 8 + 4 + 4 + 16);
    two.put((byte) 2).put((byte) 0).putLong(3).putInt(0); // FORMAT, latest: none, seen 3, no session
    two.putInt(1).putLong(4).putLong(4); // ids in minute 4 (of a session forgotten since), no count after
    assertEquals(0, two.remaining(), "the layout above is complete");
    SessionRule.Stored read = SessionRule.deserialize(two.array());
    assertEquals(2, read.format());
    assertEquals(3L, read.state().seen);
    assertEquals(List.of(4L), read.idMinutes());
    MapStore former = new MapStore();
    former.values.put(4L, new byte[] {1, 0, 0, 0, 0});
    former.values.put(9L, new byte[] {1, 0, 0, 0, 0}); // not the value's: left alone
    former.index.put("x", 240_000L);
    MapBytesByLong buckets = new MapBytesByLong();
    SessionRule.upgrade(read, former, former, buckets, 10_000, 100_000);
    assertEquals(Set.of(9L), former.values.keySet());
    assertEquals(Map.of(), former.index);
    assertEquals(Map.of(), buckets.values, "no session open: x's is forgotten, and its id with it");
    assertEquals(0, read.state().idCount);
  }

  @Test
  void aSecondLayoutSessionsValueWithAnOpenSessionMovesItsIdsIntoBuckets() {
    ByteBuffer two = ByteBuffer.allocate(1 + 9 + 8 + 4 + 7 + 20 + 9 + 10 + 12 + 5 + 4 + 32);
    two.put((byte) 2).put((byte) 1).putLong(250_000).putLong(2).putInt(1); // FORMAT, latest, seen 2, one session
    two.putInt(3).put("u:x".getBytes(StandardCharsets.UTF_8)).putLong(240_000).putLong(250_000).putInt(2);
    two.putInt(1).putInt(1).put((byte) 'p'); // pages
    two.putInt(1).put((byte) 'p').putInt(1).put((byte) 'p'); // entry, exit
    two.putLong(0).putInt(-1); // created seq, segment: none
    two.putInt(1).put((byte) 'x'); // first event id
    two.putInt(2).putLong(1).putLong(1).putLong(4).putLong(4); // ids in minutes 1 and 4
    assertEquals(0, two.remaining(), "the layout above is complete");
    MapStore former = new MapStore();
    former.values.put(1L, new byte[] {1, 0, 0, 0, 0});
    former.values.put(4L, new byte[] {1, 0, 0, 0, 0});
    former.index.putAll(Map.of("x", 240_000L, "y", 250_000L, "old", 60_000L)); // old: a forgotten session's
    MapBytesByLong buckets = new MapBytesByLong();
    SessionRule.Stored read = SessionRule.deserialize(two.array());
    SessionRule.upgrade(read, former, former, buckets, 10_000, 100_000);
    assertEquals(Map.of(), former.values);
    assertEquals(Map.of(), former.index);
    assertEquals(Map.of("x", 240_000L, "y", 250_000L), SessionIds.decode(buckets.values.get(0L)));
    assertEquals(2, read.state().idCount);
    assertEquals(240_000L, read.state().earliestIdMs);
    SessionRule.Changes again = SessionRule.apply(
        "u", read.state(), buckets, List.of(new SessionRule.Event("y", 250_000, "p", "X")), 10_000, 100_000);
    assertEquals(List.of(), again.upserts(), "a moved id is still known: its repeat is a correction");
    assertEquals(2L, read.state().seen);
  }

  /** A format-1 value (the layout before SessionIds): one session holding its event ids e and f. */
  private static byte[] sessionsFirstFormatValue() {
    ByteBuffer one = ByteBuffer.allocate(1 + 9 + 8 + 4 + 5 + 16 + 4 + 9 + 5 + 5 + 8 + 4 + 5 + 14);
    one.put((byte) 1).put((byte) 1).putLong(130_000).putLong(2).putInt(1); // FORMAT, latest, seen, one session
    one.putInt(1).put((byte) 'i').putLong(125_000).putLong(130_000).putInt(2); // id, start, end, clicks
    one.putInt(1).putInt(1).put((byte) 'p'); // pages
    one.putInt(1).put((byte) 'p').putInt(1).put((byte) 'p'); // entry, exit
    one.putLong(0).putInt(-1); // created seq, segment: none
    one.putInt(1).put((byte) 'e'); // first event id
    one.putInt(2).putInt(1).put((byte) 'e').putInt(1).put((byte) 'f'); // event ids
    assertEquals(0, one.remaining(), "the layout above is complete");
    return one.array();
  }

  @Test
  void aFirstLayoutSessionsValueIsReadWithItsIdsAndTheyAreMovedBesideIt() {
    SessionRule.Stored read = SessionRule.deserialize(sessionsFirstFormatValue());
    assertEquals(List.of("e", "f"), List.of(read.inline().get("i")));
    MapStore former = new MapStore();
    MapBytesByLong store = new MapBytesByLong();
    SessionRule.upgrade(read, former, former, store, 10, 100_000);
    assertEquals(Map.of("e", 130_000L, "f", 130_000L), SessionIds.decode(store.values.get(0L)), "at the session's end");
    assertEquals(2, read.state().idCount);
    assertEquals(130_000L, read.state().earliestIdMs);
    SessionRule.Changes again =
        SessionRule.apply("u", read.state(), store, List.of(new SessionRule.Event("f", 130_000, "p", "X")),
            10, 100_000);
    assertEquals(List.of(), again.upserts(), "a moved id is still known: its repeat is a correction");
    assertEquals(2L, read.state().seen);
  }

  // ---- refusals

  private static void refuses(
      Function<byte[], Object> read, byte[] data, String what, String because) {
    IllegalStateException e = assertThrows(IllegalStateException.class, () -> read.apply(data));
    assertTrue(e.getMessage().startsWith(what + " state "), e.getMessage());
    assertTrue(e.getMessage().contains(because), e.getMessage());
  }

  @Test
  void bytesOfAnotherFormatAreRefused() {
    byte[] asOf = AsOfRule.serialize(asOfState());
    asOf[0] = 3;
    refuses(AsOfRule::deserialize, asOf, "as-of", "format 3, this operator reads 2");
    byte[] sessions = SessionRule.serialize(sessionsState());
    sessions[0] = 0;
    refuses(SessionRule::deserialize, sessions, "sessions", "format 0, this operator reads 4");
    sessions[0] = 3; // ec77239's layout, never released
    refuses(SessionRule::deserialize, sessions, "sessions", "format 3, this operator reads 4");
  }

  @Test
  void aCountOfIdsTheBucketsCannotHoldIsRefused() {
    SessionRule.State threeBuckets = sessionsState();
    threeBuckets.idBuckets = 3;
    refuses(SessionRule::deserialize, SessionRule.serialize(threeBuckets), "sessions", "keeps 9 ids in 3 buckets");
    SessionRule.State overflowing = sessionsState();
    overflowing.idCount = 65; // more than 32 a bucket
    refuses(SessionRule::deserialize, SessionRule.serialize(overflowing), "sessions", "keeps 65 ids in 2 buckets");
    SessionRule.State tooFew = sessionsState();
    tooFew.idCount = 7; // fewer than 4 a bucket: one would do
    refuses(SessionRule::deserialize, SessionRule.serialize(tooFew), "sessions", "keeps 7 ids in 2 buckets");
    SessionRule.State noEarliest = sessionsState();
    noEarliest.earliestIdMs = null;
    refuses(SessionRule::deserialize, SessionRule.serialize(noEarliest), "sessions", "the earliest at null");
  }

  @Test
  void bytesCutShortAnywhereAreRefusedAsTruncated() {
    for (byte[] asOf : List.of(AsOfRule.serialize(asOfState()))) {
      for (int length = 0; length < asOf.length; length++) {
        refuses(AsOfRule::deserialize, Arrays.copyOf(asOf, length), "as-of", "truncated");
      }
    }
    for (byte[] sessions : List.of(SessionRule.serialize(sessionsState()), sessionsFirstFormatValue())) {
      for (int length = 0; length < sessions.length; length++) {
        refuses(SessionRule::deserialize, Arrays.copyOf(sessions, length), "sessions", "truncated");
      }
    }
  }

  @Test
  void bytesLeftOverAfterTheLayoutAreRefused() {
    byte[] asOf = AsOfRule.serialize(asOfState());
    refuses(AsOfRule::deserialize, Arrays.copyOf(asOf, asOf.length + 3), "as-of", "3 left over");
    byte[] sessions = SessionRule.serialize(new SessionRule.State());
    refuses(SessionRule::deserialize, Arrays.copyOf(sessions, sessions.length + 1), "sessions", "1 left over");
  }

  @Test
  void aBrokenLengthIsRefusedNotAllocated() {
    // FORMAT 2, then a version count of one and a payload of 2^31 - 1 strings
    ByteBuffer data = ByteBuffer.allocate(1 + 4 + 24 + 4);
    data.put((byte) 2).putInt(1).putLong(1).putLong(2).putLong(3).putInt(Integer.MAX_VALUE);
    refuses(AsOfRule::deserialize, data.array(), "as-of", "truncated");
    // FORMAT 2, no version, no frontier, none settled, a next number, then 2^31 - 1 buckets
    ByteBuffer buckets = ByteBuffer.allocate(1 + 4 + 1 + 1 + 8 + 4);
    buckets.put((byte) 2).putInt(0).put((byte) 0).put((byte) 0).putLong(0).putInt(Integer.MAX_VALUE);
    refuses(AsOfRule::deserialize, buckets.array(), "as-of", "truncated");
    // FORMAT 2, no session, one run of minutes that ends before it starts
    ByteBuffer run = ByteBuffer.allocate(1 + 1 + 8 + 4 + 4 + 16);
    run.put((byte) 2).put((byte) 0).putLong(0).putInt(0).putInt(1).putLong(5).putLong(4);
    refuses(SessionRule::deserialize, run.array(), "sessions", "a run of minutes from 5 to 4");
  }
}
