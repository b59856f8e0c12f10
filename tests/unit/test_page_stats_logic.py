"""page_stats' rule with its lateness bound (jobs/page_stats/logic.py, cases 1 to 3), worked by hand, and the rule
against its SQL restatement (tests/oracles.py) on random logs with every kind of correction."""

from __future__ import annotations

import random

from jobs.page_stats.logic import Click, PageHour, copies, counted_records, late_records, page_stats
from tests import oracles

GAP, LATENESS = 10, 50  # ms: small numbers keep the arithmetic readable; every time below is in hour 0


def view(log: list[Click], lateness_ms: int | None = LATENESS) -> dict[tuple[str | None, int], PageHour]:
    return page_stats(log, GAP, lateness_ms)


def test_a_record_more_than_the_lateness_behind_its_stamp_is_set_aside_and_changes_nothing() -> None:
    on_time = Click("u", "e1", "/a", 180, stamp_ms=200)  # 180 >= 200 - 50
    late = Click("u", "e2", "/b", 149, stamp_ms=200)  # 149 < 150
    assert late_records([on_time, late], LATENESS) == [late]
    assert view([on_time, late]) == view([on_time]) == {("/a", 0): PageHour(1, 1, None)}
    # e1's time on page would have been... nothing: e2 is before it. A late record between two clicks:
    before, after = Click("u", "e3", "/c", 100, stamp_ms=100), Click("u", "e4", "/c", 108, stamp_ms=100)
    between = Click("u", "e5", "/d", 104, stamp_ms=160)  # 104 < 110: late, so e3 keeps e4 as its next click
    assert view([before, after, between]) == {("/c", 0): PageHour(2, 1, 8)}
    assert view([before, after, between], lateness_ms=None) == {  # unbounded: e5 counts, and splits e3's 8 ms
        ("/c", 0): PageHour(2, 1, 4),
        ("/d", 0): PageHour(1, 1, 4),
    }


def test_a_record_without_a_stamp_is_never_late_and_never_settles_anything() -> None:
    old = Click("u", "e1", "/a", 0)
    moved = Click("u", "e1", "/b", 5_000)  # no stamp (written before enrich_clicks v2): replaces, as in v1
    assert late_records([old, moved], LATENESS) == []
    assert view([old, moved]) == {("/b", 0): PageHour(1, 1, None)}


def test_a_correction_that_keeps_the_time_of_a_settled_click_is_late() -> None:
    click = Click("u", "c1", "/a", 100, stamp_ms=100)
    corrected = Click("u", "c1", "/b", 100, stamp_ms=1_000)  # its page changed, its time kept: 100 < 950
    assert late_records([click, corrected], LATENESS) == [corrected]
    assert view([click, corrected]) == {("/a", 0): PageHour(1, 1, None)}


def test_a_click_moved_forward_past_the_settled_bound_is_a_new_click_beside_the_old() -> None:
    click, next_click = Click("u", "c1", "/a", 100, stamp_ms=100), Click("u", "c2", "/a", 105, stamp_ms=100)
    moved = Click("u", "c1", "/b", 960, stamp_ms=1_000)  # not late (960 >= 950); c1's 100 < 1,000 - 50 - 10
    assert late_records([click, next_click, moved], LATENESS) == []
    assert view([click, next_click, moved]) == {
        ("/a", 0): PageHour(2, 1, 5),  # c1 at 100 stays, its next click c2 5 ms later; c2's next is 855 ms on
        ("/b", 0): PageHour(1, 1, None),
    }
    assert view([click, next_click, moved], lateness_ms=None) == {  # unbounded, the move replaces c1
        ("/a", 0): PageHour(1, 1, None),
        ("/b", 0): PageHour(1, 1, None),
    }


def test_a_click_moved_within_the_bound_replaces_the_old_record() -> None:
    click = Click("u", "c1", "/a", 945, stamp_ms=900)
    moved = Click("u", "c1", "/b", 990, stamp_ms=1_000)  # 945 >= 1,000 - 50 - 10 = 940: not settled
    assert view([click, moved]) == {("/b", 0): PageHour(1, 1, None)}


def test_a_re_emission_keeps_its_stamp_and_changes_nothing() -> None:
    click = Click("u", "c1", "/a", 100, stamp_ms=120)
    later = Click("u", "c9", "/z", 5_000, stamp_ms=5_000)  # the partition's clock moves far on
    again = Click("u", "c1", "/a", 100, stamp_ms=120)  # enrich_clicks re-emits c1 (a new profile): same stamp
    assert late_records([click, later, again], LATENESS) == []
    assert view([click, later, again]) == view([click, later])
    moved = Click("u", "c9", "/y", 4_990, stamp_ms=5_000)  # c9 corrected at once: the stamp has not moved
    on, on2 = Click("u", "c10", "/x", 5_010, stamp_ms=5_000), Click("u", "c11", "/x", 5_020, stamp_ms=5_010)
    log = [click, later, moved, on, on2]
    assert view([*log, again, later]) == view(log)  # once the stamps move on, a copy of c9's first changes nothing
    assert view([click, later, moved, later]) == view([click, later])  # before they do, it ties, and counts


def test_a_crashs_copy_of_an_older_record_after_a_correction_changes_nothing() -> None:
    click = Click("u", "c1", "/a", 100, stamp_ms=100)
    moved = Click("u", "c1", "/b", 130, stamp_ms=140)  # 100 >= 140 - 50 - 10: replaces c1
    copy = Click("u", "c1", "/a", 100, stamp_ms=100)  # enrich_clicks' batch run again sends the first record again
    assert view([click, moved, copy]) == view([click, moved]) == {("/b", 0): PageHour(1, 1, None)}
    assert view([click, moved, copy], lateness_ms=None) == {("/a", 0): PageHour(1, 1, None)}  # unbounded: it does
    assert view([click, moved, moved]) == view([click, moved])  # a copy of the latest: the same stamp, no change
    assert copies([click, moved, copy, moved], LATENESS) == [2]


def test_the_rule_equals_its_sql_restatement_on_random_logs_with_every_kind_of_correction() -> None:
    rng = random.Random(40)
    seen = {"late": 0, "new life": 0, "replaced": 0, "copies": 0}
    for trial in range(60):
        log: list[Click] = []
        clock = {p: 0 for p in range(3)}  # each clicks partition's latest event time so far: the stamps
        for n in range(rng.randint(5, 80)):
            user = f"u{rng.randrange(6)}"
            partition = int(user[1:]) % 3
            stamp = None if rng.random() < 0.05 else clock[partition]  # a few written before the stamps
            if log and rng.random() < 0.1:  # a copy of an earlier record (a crash's duplicate, a re-emission)
                log.append(rng.choice(log))
                continue
            if log and rng.random() < 0.35:  # a record of an earlier click: kept, moved back, moved forward
                earlier = rng.choice(log)
                user, partition = earlier.user_id, int(earlier.user_id[1:]) % 3
                stamp = None if stamp is None else clock[partition]
                moved = max(0, earlier.event_time_ms + rng.choice([0, 0, -3, -70, 4, 25, 90]))
                record = Click(user, earlier.event_id, rng.choice(["/a", "/b"]), moved, stamp)
            else:
                time = max(0, clock[partition] + rng.randint(-80, 30))  # out of order, some far behind
                record = Click(user, f"e{n}", rng.choice(["/a", "/b", "/c"]), time, stamp)
            clock[partition] = max(clock[partition], record.event_time_ms)
            log.append(record)
        expected, late_at, copies_at = oracles.bounded_page_stats(
            [(c.user_id, c.event_id, c.page, c.event_time_ms, c.stamp_ms) for c in log], GAP, LATENESS
        )
        rows = {g: (s.views, s.distinct_users, s.median_time_on_page_ms) for g, s in view(log).items()}
        assert rows == expected, f"trial {trial}"
        assert late_records(log, LATENESS) == [log[i] for i in late_at], f"trial {trial}"
        assert copies(log, LATENESS) == copies_at, f"trial {trial}"
        counted, late = counted_records(log, GAP, LATENESS)
        seen["late"] += len(late)
        seen["new life"] += sum(life > 0 for _u, _e, life in counted)
        seen["copies"] += len(copies_at)
        seen["replaced"] += len(log) - len(late) - len(copies_at) - len(counted)  # records that replaced their click
    assert min(seen.values()) >= 10, seen  # every case ran, many times
