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
