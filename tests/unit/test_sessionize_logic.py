"""The sessionization rule on hand-made events, and its independence from batch boundaries."""

import random

from jobs.sessionize.logic import Changes, Event, Session, UserState, sessionize
from kappa.contracts.topic_declarations import MINUTE_MS

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def ev(event_id: str, minute: float, page: str = "/p") -> Event:
    return Event(event_id, T0 + int(minute * MINUTE_MS), page)


def materialize(batches: list[list[Event]]) -> dict[str, Session]:
    """Apply each batch's changes like a compacted topic would: upsert by id, tombstone deletes. A session's
    final record is its last: nothing of it may follow."""
    state, table, final = UserState(), {}, set()
    for batch in batches:
        changes = sessionize("u", state, batch)
        touched = [*changes.retractions, *(s.session_id for s in (*changes.upserts, *changes.finals))]
        assert not final & set(touched), "a record after a session's final one"
        for sid in changes.retractions:
            table.pop(sid, None)
        for session in (*changes.upserts, *changes.finals):
            table[session.session_id] = session
        final |= {s.session_id for s in changes.finals}
    return table


def finals(batches: list[list[Event]]) -> set[str]:
    """The sessions written as final over the whole log."""
    state = UserState()
    return {s.session_id for batch in batches for s in sessionize("u", state, batch).finals}


def summary(table: dict[str, Session]) -> list[tuple[str, int, int, int]]:
    return sorted(
        (s.session_id, (s.start_ms - T0) // MINUTE_MS, (s.end_ms - T0) // MINUTE_MS, s.clicks) for s in table.values()
    )


def test_gap_splits_sessions_and_out_of_order_event_joins_its_session() -> None:
    events = [ev("a", 0), ev("b", 10), ev("c", 5), ev("d", 50)]  # c is out of order, inside a's session
    assert summary(materialize([events])) == [("u:a", 0, 10, 3), ("u:d", 50, 50, 1)]


def test_of_events_at_one_time_the_first_logged_is_the_entry_and_the_last_the_exit() -> None:
    """tests/unit/test_oracles.py gives the independent answer the same case."""
    events = [ev("a", 0, "/first"), ev("b", 0, "/second"), ev("c", 5, "/third"), ev("d", 5, "/fourth")]
    for batches in ([events], [[e] for e in events]):
        (session,) = materialize(batches).values()
        assert (session.entry_page, session.exit_page, session.clicks) == ("/first", "/fourth", 4)


def test_late_event_that_bridges_two_sessions_merges_them() -> None:
    state = UserState()
    first = sessionize("u", state, [ev("a", 0), ev("b", 60)])  # two sessions, 60 min apart
    assert [s.session_id for s in first.upserts] == ["u:a", "u:b"]
    bridge = sessionize("u", state, [ev("c", 30)])  # within 30 min of both: one session now
    assert bridge == Changes(
        upserts=(bridge.upserts[0],),
        retractions=("u:b",),  # the younger session is merged away: a tombstone
        late=(),
    )
    merged = bridge.upserts[0]
    assert (merged.session_id, merged.clicks, merged.start_ms, merged.end_ms) == ("u:a", 3, T0, T0 + 60 * MINUTE_MS)
    assert (merged.entry_page, merged.exit_page) == ("/p", "/p")


def test_event_beyond_allowed_lateness_goes_to_late_and_changes_nothing() -> None:
    state = UserState()
    sessionize("u", state, [ev("a", 0), ev("b", 300)])
    changes = sessionize("u", state, [ev("old", 100)])  # 200 min behind the latest, lateness is 120
    assert changes.late == (ev("old", 100),)
    assert changes.upserts == ()
    assert changes.retractions == ()


def test_settled_sessions_leave_the_state_with_a_final_record() -> None:
    state = UserState()
    changes = sessionize("u", state, [ev("a", 0), ev("b", 400)])
    assert list(state.open_sessions) == ["u:b"]  # u:a ended more than lateness + gap before 400
    # u:a is written once, final (not also as an upsert); u:b may still change.
    assert [s.session_id for s in changes.finals] == ["u:a"]
    assert [s.session_id for s in changes.upserts] == ["u:b"]
    later = sessionize("u", state, [ev("c", 551)])  # 400 ends 151 min before 551: more than 120 + 30
    assert ([s.session_id for s in later.finals], [s.session_id for s in later.upserts]) == (["u:b"], ["u:c"])
    assert (later.finals[0].clicks, later.finals[0].end_ms) == (1, T0 + 400 * MINUTE_MS)
    assert sessionize("u", state, [ev("d", 700)]).finals == ()  # 551 ends 149 min before 700: not yet


def test_a_session_is_final_at_the_end_exactly_when_it_ends_lateness_plus_gap_before_its_users_latest() -> None:
    # Sessions end at minutes 10, 200, 349 and 500; the latest time is 500 (the late click at 300 counts for
    # nothing), so those ending before 500 - 120 - 30 = 350 are final, whatever the batches: not u:e.
    events = [ev("a", 0), ev("b", 10), ev("c", 200), ev("d", 349), ev("e", 500), ev("late", 300)]
    for batches in ([events], [[e] for e in events], [events[:4], events[4:]]):
        assert finals(batches) == {"u:a", "u:c", "u:d"}


def test_any_batching_gives_the_same_sessions() -> None:
    rng = random.Random(4)
    times, events = 0.0, []
    for i in range(400):
        times += rng.choice([0.5, 1, 2, 5, 45, 90])
        jitter = -rng.choice([0, 0, 0, 3, 20, 40, 200])  # out of order, sometimes merging, sometimes late
        events.append(ev(f"e{i:03d}", max(0.0, times + jitter), f"/p{rng.randrange(5)}"))
    whole = materialize([events])
    assert len(whole) > 10
    for _ in range(20):  # live runs with arbitrary micro-batch boundaries
        cuts = sorted(rng.sample(range(1, len(events)), rng.randrange(1, 60)))
        batches = [events[a:b] for a, b in zip([0, *cuts], [*cuts, len(events)], strict=True)]
        assert materialize(batches) == whole
        assert finals(batches) == finals([events])
    assert len(finals([events])) > 5


def test_state_survives_its_json_round_trip() -> None:
    from jobs.sessionize.logic import state_from_json, state_to_json

    state = UserState()
    sessionize("u", state, [ev("a", 0, "/x"), ev("b", 3, "/y"), ev("c", 100)])
    assert state_from_json(state_to_json(state)) == state


def test_a_corrected_click_updates_its_sessions_segment_and_is_never_counted_twice() -> None:
    state = UserState()
    sessionize("u", state, [Event("a", T0, "/p", "UNKNOWN"), Event("b", T0 + MINUTE_MS, "/q", "UNKNOWN")])
    # enrich_clicks re-emits both clicks once their profile arrived: "a" opened the session, "b" did not.
    changes = sessionize("u", state, [Event("a", T0, "/p", "PRO"), Event("b", T0 + MINUTE_MS, "/q", "PRO")])
    [session] = changes.upserts
    assert (session.session_id, session.clicks, session.segment) == ("u:a", 2, "PRO")
    assert changes.late == ()
    assert state.seen == 2
    # A correction that changes nothing emits nothing.
    assert sessionize("u", state, [Event("b", T0 + MINUTE_MS, "/q", "FREE")]).upserts == ()


def test_a_repeat_of_a_click_more_than_the_lateness_behind_is_late_though_its_session_is_open() -> None:
    state = UserState()
    minutes = [m * 0.5 for m in range(400)]  # a click every 30 s for 200 minutes: one session throughout
    sessionize("u", state, [ev(f"e{i}", m) for i, m in enumerate(minutes)])
    assert list(state.open_sessions) == ["u:e0"]
    hour_back = sessionize("u", state, [Event("e280", T0 + 140 * MINUTE_MS, "/p", "PRO")])  # 59.5 min behind
    assert (hour_back.late, state.seen) == ((), 400)  # a correction: no log position taken
    three_hours_back = sessionize("u", state, [Event("e20", T0 + 10 * MINUTE_MS, "/p", "PRO")])  # 189.5 behind
    assert three_hours_back.late == (Event("e20", T0 + 10 * MINUTE_MS, "/p", "PRO"),)
    assert three_hours_back.upserts == ()
    assert state.seen == 401


def test_a_session_that_never_ends_keeps_the_times_of_its_last_lateness_only() -> None:
    state = UserState()
    for batch in range(40):  # ten hours of a click every 2 minutes, in batches of 15 clicks
        sessionize("u", state, [ev(f"e{batch * 15 + i}", (batch * 15 + i) * 2) for i in range(15)])
        assert state.latest_ms is not None
        assert min(state.click_times.values()) >= state.latest_ms - 120 * MINUTE_MS
    assert list(state.open_sessions) == ["u:e0"]
    assert len(state.click_times) == 61  # minutes 478 back to 358: the lateness's worth, both ends included
