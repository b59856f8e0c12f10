"""The independent answers (tests/oracles.py) on hand-built cases, worked out by hand below."""

from tests import oracles

MIN = 60_000


def test_sessions_merge_by_gap_keep_the_first_logged_id_and_leave_late_events_out() -> None:
    events = [  # (event_id, user, page, time, segment) in log order
        ("e1", "u", "/a", 0 * MIN, "FREE"),
        ("e2", "u", "/b", 50 * MIN, "PRO"),  # 50 min after e1: a second session
        ("e3", "u", "/c", 25 * MIN, "PRO"),  # within 30 of both: merges them; e1 (logged first) names it
        ("e4", "u", "/d", 300 * MIN, "PRO"),  # a new session, far ahead
        ("e5", "u", "/e", 100 * MIN, "PRO"),  # 200 min behind e4: beyond 120, late
        ("e6", "v", "/a", 10 * MIN, "TRIAL"),  # another user: its own session
    ]
    found, late = oracles.sessions(events, gap_ms=30 * MIN, lateness_ms=120 * MIN)
    assert late == {"e5"}
    assert found == {
        "u:e1": (0, 50 * MIN, 3, 3, "/a", "/b", "FREE"),
        "u:e4": (300 * MIN, 300 * MIN, 1, 1, "/d", "/d", "PRO"),
        "v:e6": (10 * MIN, 10 * MIN, 1, 1, "/a", "/a", "TRIAL"),
    }
    # u's greatest time is e4's 300 (e5 is behind it): u:e1 ends 250 min before it, beyond 120 + 30, so it is
    # final; u:e4 and v:e6 (v's only session ends at v's greatest time) are not.
    ends = [(sid, sid.split(":")[0], end) for sid, (_start, end, *_rest) in found.items()]
    assert oracles.final_sessions(ends, events, gap_ms=30 * MIN, lateness_ms=120 * MIN) == {"u:e1"}
    assert oracles.final_sessions(ends, events, gap_ms=30 * MIN, lateness_ms=250 * MIN - 30 * MIN) == set()


def test_sessions_break_ties_of_equal_times_by_log_order() -> None:
    """Two clicks of a user in one millisecond (a producer sending a burst): the entry is the first logged of the
    earliest, the exit the last logged of the latest, as the rule's `<` and `>=` decide
    (test_sessionize_logic.py holds the rule to the same answer)."""
    events = [
        ("e1", "u", "/first", 0, "FREE"),
        ("e2", "u", "/second", 0, "PRO"),  # the same time as e1, logged after it: not the entry
        ("e3", "u", "/third", 5 * MIN, "PRO"),
        ("e4", "u", "/fourth", 5 * MIN, "PRO"),  # the same time as e3, logged after it: the exit
    ]
    found, late = oracles.sessions(events, gap_ms=30 * MIN, lateness_ms=120 * MIN)
    assert late == set()
    assert found == {"u:e1": (0, 5 * MIN, 4, 4, "/first", "/fourth", "FREE")}


def test_a_click_gets_the_latest_version_published_in_time_for_it() -> None:
    clicks = [("c1", "u", "/a", 100 * MIN), ("c2", "u", "/b", 130 * MIN), ("c3", "w", "/c", 5 * MIN)]
    profiles = [  # (user, version, valid_from, log_time, segment, country)
        ("u", 1, 0, 0, "FREE", "DE"),
        ("u", 2, 90 * MIN, 150 * MIN, "PRO", "FR"),  # valid for both, published 50 min late: visible to c2 only
        ("u", 3, 120 * MIN, 125 * MIN, "TRIAL", "US"),  # valid from 120: only c2
    ]
    answers = oracles.enrichment(clicks, profiles, lateness_ms=20 * MIN)
    assert answers == {
        "c1": (1, "FREE", "DE", "/a"),  # v2 published at 150 > 100 + 20: not yet visible to c1
        "c2": (3, "TRIAL", "US", "/b"),  # v2 (valid 90, log 150 <= 150) and v3 visible; v3 is valid later
        "c3": (None, "UNKNOWN", None, "/c"),  # w has no profile
    }


def test_page_stats_time_on_page_is_the_gap_to_the_users_next_click_within_the_gap() -> None:
    hour = 3_600_000
    clicks = [  # (user, event_id, page, time)
        ("u", "e1", "/a", 0),
        ("u", "e2", "/b", 10 * MIN),  # e1's time on page: 10 min
        ("u", "e3", "/a", 13 * MIN),  # e2's: 3 min
        ("u", "e4", "/a", 60 * MIN),  # e3's: 47 min > 30, none; e4 opens the next hour, the user's last: none
        ("v", "e5", "/a", 5 * MIN),
        ("v", "e6", "/a", 9 * MIN),  # e5's: 4 min; e6 the last of v: none
    ]
    assert oracles.page_stats(clicks, gap_ms=30 * MIN) == {
        ("/a", 0): (4, 2, 7 * MIN),  # e1, e3, e5, e6; times 10 and 4 min: (10 + 4) / 2
        ("/b", 0): (1, 1, 3 * MIN),
        ("/a", hour): (1, 1, None),
    }
    # The middle of two values with an odd sum drops the half (Spark's percentile cast to a long).
    odd = [("u", "a", "/p", 0), ("u", "b", "/p", 3), ("u", "c", "/p", 7)]
    assert oracles.page_stats(odd, gap_ms=30 * MIN) == {("/p", 0): (3, 1, 3)}  # times 3 and 4: 3.5 -> 3


def test_user_activity_sums_live_sessions_and_takes_the_latest_sessions_segment() -> None:
    sessions = [  # (session_id, user, start, end, clicks, segment)
        ("u:e1", "u", 0, 10, 3, "FREE"),
        ("u:e9", "u", 50, 70, 2, "PRO"),  # the latest start: its segment
        ("u:e5", "u", 50, 60, 1, "TRIAL"),  # the same start, a smaller session id
        ("v:e2", "v", 5, 5, 1, "UNKNOWN"),
    ]
    assert oracles.user_activity(sessions) == {"u": (3, 6, 0, 70, "PRO"), "v": (1, 1, 5, 5, "UNKNOWN")}


def test_a_profile_version_is_late_when_it_comes_after_a_click_it_applies_to_was_settled() -> None:
    log = [  # (user, time, version, valid_from) in log order; L = 20 min, D = 10 min
        ("u", 0, None, None),  # a click at 0
        ("u", 15 * MIN, 1, 0),  # valid from 0, published at 15 <= 0 + 20: visible to it, the click not settled
        ("u", 40 * MIN, None, None),  # the frontier at 40 settles clicks up to 10 min
        ("u", 18 * MIN, 2, 0),  # published at 18 (<= 0 + 20: visible to the click at 0), which is settled: late
        ("u", 41 * MIN, 3, 30 * MIN),  # valid from 30: applies to no settled click
        ("w", 5 * MIN, 1, 0),  # another user, no click
    ]
    assert oracles.late_profiles(log, lateness_ms=20 * MIN, disorder_ms=10 * MIN) == {("u", 2)}


def test_a_clicks_stamp_is_the_latest_time_before_it_in_its_partitions_offset_order() -> None:
    clicks = [  # (event_id, partition, event_time) in the order produced
        ("a1", 0, 10 * MIN),  # the first of partition 0: nothing before it
        ("b1", 1, 50 * MIN),  # partition 1's own clock: partition 0's clicks never move it
        ("a2", 0, 30 * MIN),  # after a1: 10
        ("a3", 0, 20 * MIN),  # behind a2 in time, after it in the log: 30
        ("b2", 1, 40 * MIN),  # 50
        ("a4", 0, 25 * MIN),  # the latest before it is still a2's 30, not a3's 20
        ("a2", 0, 30 * MIN),  # a2 produced again (a retry): its latest copy counts, after a4: 30
    ]
    assert oracles.partition_stamps(clicks) == {
        "a1": (0, None),
        "b1": (1, None),
        "a2": (0, 30 * MIN),
        "a3": (0, 30 * MIN),
        "b2": (1, 50 * MIN),
        "a4": (0, 30 * MIN),
    }
