"""The Delta views' JVM operators (kappa.operators.page_stats, .user_activity) against their specifications, the
pure-Python rules in jobs/page_stats/logic.py and jobs/user_activity/logic.py.

Generated logs, cut at random batch boundaries (a dead letter in some), streamed through each job's transforms
one file per micro-batch at two shuffle-partition counts. The operator emits only the rows a batch changed; the
test applies them (upserts, and deletes where `deleted`) to the view as the table's MERGE does, and after every
batch the view must equal the rule computed over the whole log read so far. Every row a batch emits must change
the view, and the dead letters must pass through.

page_stats' log: clicks at and around the gap, ties in event time, late clicks that land between two others,
clicks sent again unchanged, on another page, or at another time (to another hour). user_activity's: sessions that
grow, move their start back and forward, tie on their start, get tombstoned (merged away) and come back,
tombstones of sessions never seen, and sessions' final records (nothing of the session follows one).
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import Row, SparkSession

from jobs.page_stats import logic as page_logic
from jobs.page_stats.transforms import page_stat_changes
from jobs.user_activity import logic as activity_logic
from jobs.user_activity.transforms import activity_changes
from kappa.spark.side_outputs import SIDE_SCHEMA
from tests.batch_streams import T0, cut, dead_letter, run_batches, write_batches
from tests.integration.conftest import partitions_of

MIN = 60_000
GAP = 30 * MIN
PARTITIONS = 3
View = dict[Any, tuple[Any, ...]]


def _ms(t: datetime | None) -> int | None:
    return None if t is None else int(t.astimezone(UTC).timestamp() * 1000)  # pyspark: naive local time


def _positions(rows: list[dict[str, Any]], partition_of: Callable[[dict[str, Any]], int]) -> list[dict[str, Any]]:
    """Each row's Kafka position, in the order given (the log order)."""
    offsets: dict[int, int] = defaultdict(int)
    for row in rows:
        row["kafka_partition"] = partition_of(row)
        row["kafka_offset"] = offsets[row["kafka_partition"]]
        offsets[row["kafka_partition"]] += 1
    return rows


def _interleave(rng: random.Random, logs: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The users' logs merged in a random order that keeps each user's own."""
    rows: list[dict[str, Any]] = []
    while any(logs):
        rows.append(rng.choice([log for log in logs if log]).pop(0))
    return rows


def _follow(
    seen: dict[int, list[Row]],
    batches: list[list[dict[str, Any]]],
    key: Callable[[Row], Any],
    values: Callable[[Row], tuple[Any, ...]],
    rule: Callable[[list[dict[str, Any]]], View],
) -> int:
    """Applies each batch's rows to a view and compares it with the rule over the log so far; returns the rows
    emitted. Checks that each emitted row changes the view and that the batch's dead letters pass through."""
    view: View = {}
    log: list[dict[str, Any]] = []
    emitted = 0
    for batch_id, batch in enumerate(batches):
        dead = sorted(r["side_offset"] for r in batch if r["side_kind"] is not None)
        rows = seen[batch_id]
        assert sorted(r.side_offset for r in rows if r.side_kind is not None) == dead, f"batch {batch_id}"
        for row in (r for r in rows if r.side_kind is None):
            emitted += 1
            if row.deleted:
                assert key(row) in view, f"batch {batch_id}: deletes {key(row)}, which it never emitted"
                del view[key(row)]
            else:
                assert view.get(key(row)) != values(row), f"batch {batch_id}: emits {row}, which changes nothing"
                view[key(row)] = values(row)
        log += sorted(
            (r for r in batch if r["side_kind"] is None), key=lambda r: (r["kafka_partition"], r["kafka_offset"])
        )
        assert view == rule(log), f"batch {batch_id}"
    return emitted


# ------------------------------------------------------------------ page_stats ---------------------------------

CLICKS_SCHEMA = (
    "user_id string, event_id string, page string, event_time timestamp, kafka_partition int, kafka_offset long, "
    f"{SIDE_SCHEMA}"
)
CLICK_COLUMNS = [c.split()[0] for c in CLICKS_SCHEMA.split(", ")]


def _click_log(seed: int, users: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    logs = []
    for u in range(users):
        user, t, log = f"user-{u:03d}", T0 + rng.randint(0, 50) * MIN, []
        for c in range(rng.randint(0, 30)):
            step = rng.choice([0, 1, 10, 29, 30, 30, 31, 45, 120]) * MIN + rng.choice([0, 0, 1, -1, 17_000])
            t += max(step, 0)  # a step of 0: a tie in event time
            late = rng.choice([0, 0, 0, 0, 5, 25, 70]) * MIN  # lands between clicks read before
            log.append({"user_id": user, "event_id": f"{user}-e{c:02d}", "event_time": t - late,
                        "page": rng.choice(["/a", "/b", "/c", "/d", None] if c % 7 else ["/a"])})  # fmt: skip
            if rng.random() < 0.2:  # an earlier click sent again: unchanged, on another page, at another time
                again = dict(rng.choice(log))
                change = rng.choice(["same", "page", "time", "time"])
                if change == "page":
                    again["page"] = rng.choice(["/a", "/e"])
                elif change == "time":
                    again["event_time"] += rng.choice([-90, -31, -1, 1, 20, 65]) * MIN
                log.append(again)
        logs.append(log)
    rows = _interleave(rng, logs)
    return _positions([dict.fromkeys(CLICK_COLUMNS) | r for r in rows], lambda r: int(r["user_id"][5:]) % PARTITIONS)


def _page_rule(log: list[dict[str, Any]]) -> View:
    clicks = [page_logic.Click(r["user_id"], r["event_id"], r["page"], r["event_time"]) for r in log]
    stats = page_logic.page_stats(clicks, GAP)
    return {g: (s.views, s.distinct_users, s.median_time_on_page_ms) for g, s in stats.items()}


@pytest.mark.slow
@pytest.mark.parametrize("shuffle_partitions", [1, 4])
def test_the_page_stats_operator_equals_the_python_rule(
    spark: SparkSession, tmp_path: Path, shuffle_partitions: int, session_conf_restored: None
) -> None:
    rng = random.Random(20 + shuffle_partitions)
    log = _click_log(seed=shuffle_partitions, users=120)
    batches = cut(log, 12, rng, lambda i: dead_letter(i, CLICK_COLUMNS, "enriched-t"))
    write_batches(tmp_path / "in", batches, CLICKS_SCHEMA)
    # the log exercises what the rule decides on: moves, ties, gaps at the bound, groups that empty
    final = _page_rule([r for b in batches for r in b if r["side_kind"] is None])
    assert any(s[2] is None for s in final.values())
    assert any(s[2] is not None for s in final.values())

    seen = run_batches(spark, tmp_path / "in", CLICKS_SCHEMA, lambda s: page_stat_changes(s, GAP), shuffle_partitions)

    assert sorted(seen) == list(range(len(batches)))
    emitted = _follow(
        seen,
        batches,
        key=lambda r: (r.page, _ms(r.hour_start)),
        values=lambda r: (r.views, r.distinct_users, r.median_time_on_page_ms),
        rule=_page_rule,
    )
    assert emitted > len(final)  # rows were updated batch after batch, not written once
    assert partitions_of(tmp_path / "in-checkpoint") == (shuffle_partitions, shuffle_partitions)


# ------------------------------------------------------------------ page_stats, bounded ------------------------

LATENESS = 20 * MIN
STAMPED_SCHEMA = (
    "user_id string, event_id string, page string, event_time timestamp, kafka_topic string, kafka_partition int, "
    f"kafka_offset long, raw_value binary, partition_time_before timestamp, clicks_partition int, {SIDE_SCHEMA}"
)
STAMPED_COLUMNS = [c.split()[0] for c in STAMPED_SCHEMA.split(", ")]
USERS_STEP, GROUPS_STEP = 1, 0  # the operators' ids in the checkpoint: Spark numbers them from the sink back


def _stamped_log(seed: int, records: int) -> list[dict[str, Any]]:
    """enriched_clicks as enrich_clicks writes it, over hours of event time: per partition, first emissions (new
    clicks, and corrections of every case: a click's time kept, moved within the bound, moved forward past it)
    stamped with the partition's latest event time before them, and re-emissions (a click's last record again,
    its stamp kept), which often come after the click was forgotten. A few percent come more than L late, some
    exactly L (they count), and a few again after newer ones (a batch of enrich_clicks run again after a crash).
    Partitions interleave; each keeps its own order."""
    rng = random.Random(seed)
    logs: list[list[dict[str, Any]]] = []
    for p in range(PARTITIONS):
        log: list[dict[str, Any]] = []
        last: dict[str, dict[str, Any]] = {}
        clock, stamp = T0 + rng.randint(0, 30) * MIN, None
        for i in range(records):
            clock += rng.choice([0, 10_000, 40_000, 90_000, 3 * MIN, 12 * MIN])
            action = rng.random()
            if action < 0.15 and last:  # a re-emission: the click's last record, byte for byte
                log.append(dict(last[rng.choice(sorted(last))]))
                continue
            if action < 0.2 and log:  # a crash's repeat: any record sent before, maybe older than its click's last
                log.append(dict(rng.choice(log)))
                continue
            if action < 0.3 and last:  # a correction: the same click, its time kept, moved a little or far on
                r = dict(last[rng.choice(sorted(last))])
                r["event_time"] += rng.choice([0, 0, 2 * MIN, -3 * MIN, 90 * MIN])
                r["page"] = rng.choice(["/a", "/b", "/e"])
            else:
                user = f"user-{rng.randrange(40) * PARTITIONS + p:03d}"
                disorder = rng.choice([0, 0, 0, -MIN, -5 * MIN, -LATENESS, -LATENESS - 1, -45 * MIN])
                r = {"user_id": user, "event_id": f"{user}-e{i:03d}", "event_time": clock + disorder,
                     "page": rng.choice(["/a", "/b", "/c", None])}  # fmt: skip
            r |= {"partition_time_before": stamp, "clicks_partition": p}
            stamp = r["event_time"] if stamp is None else max(stamp, r["event_time"])
            last[r["event_id"]] = r
            log.append(r)
        logs.append(log)
    rows = _interleave(rng, logs)
    _positions(rows, lambda r: r["clicks_partition"])
    return [dict.fromkeys(STAMPED_COLUMNS) | r | {"kafka_topic": "enriched-t",
            "raw_value": f"{r['kafka_partition']}:{r['kafka_offset']}".encode()} for r in rows]  # fmt: skip


def _stamped_clicks(log: list[dict[str, Any]]) -> list[page_logic.Click]:
    return [page_logic.Click(r["user_id"], r["event_id"], r["page"], r["event_time"], r["partition_time_before"])
            for r in log]  # fmt: skip


def _state_rows(spark: SparkSession, checkpoint: Path, operator: int, variable: str) -> int:
    """How many entries one state variable of a transformWithState operator holds at the checkpoint's last batch
    (Spark's state data source)."""
    return (
        spark.read.format("statestore").option("path", str(checkpoint)).option("operatorId", operator)
        .option("stateVarName", variable).load().count()
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("shuffle_partitions", [1, 4])
def test_the_bounded_page_stats_operator_equals_the_rule_and_forgets_what_settled(
    spark: SparkSession, tmp_path: Path, shuffle_partitions: int, session_conf_restored: None
) -> None:
    rng = random.Random(50 + shuffle_partitions)
    log = _stamped_log(seed=shuffle_partitions, records=260)
    batches = cut(log, 24, rng, lambda i: dead_letter(i, STAMPED_COLUMNS, "enriched-t"))
    write_batches(tmp_path / "in", batches, STAMPED_SCHEMA)
    records = [r for b in batches for r in b if r["side_kind"] is None]
    late = {(r["kafka_partition"], r["kafka_offset"]) for r in records
            if page_logic.is_late(_stamped_clicks([r])[0], LATENESS)}  # fmt: skip
    # the log exercises the bound: late records, and clicks that gain a second life
    assert len(late) > 20
    counted, _ = page_logic.counted_records(_stamped_clicks(records), GAP, LATENESS)
    assert any(life > 0 for _user, _id, life in counted)

    seen = run_batches(
        spark, tmp_path / "in", STAMPED_SCHEMA,
        lambda s: page_stat_changes(s, GAP, LATENESS, stamp_partitions=PARTITIONS), shuffle_partitions,
    )  # fmt: skip

    assert sorted(seen) == list(range(len(batches)))
    view: View = {}
    so_far: list[dict[str, Any]] = []
    set_aside: dict[str, set[tuple[int, int]]] = defaultdict(set)
    for batch_id, batch in enumerate(batches):
        rows = seen[batch_id]
        dead = sorted(r["side_offset"] for r in batch if r["side_kind"] is not None)
        assert sorted(r.side_offset for r in rows if r.side_kind == "undecodable") == dead, f"batch {batch_id}"
        for row in (r for r in rows if r.side_kind is not None and r.side_kind != "undecodable"):
            # a record set aside carries its own bytes and place
            assert row.side_value == f"{row.side_partition}:{row.side_offset}".encode(), row
            set_aside[row.side_kind].add((row.side_partition, row.side_offset))
        for row in (r for r in rows if r.side_kind is None):
            if row.deleted:
                del view[(row.page, _ms(row.hour_start))]
            else:
                view[(row.page, _ms(row.hour_start))] = (row.views, row.distinct_users, row.median_time_on_page_ms)
        so_far += sorted((r for r in batch if r["side_kind"] is None),
                         key=lambda r: (r["kafka_partition"], r["kafka_offset"]))  # fmt: skip
        stats = page_logic.page_stats(_stamped_clicks(so_far), GAP, LATENESS)
        assert view == {g: (s.views, s.distinct_users, s.median_time_on_page_ms) for g, s in stats.items()}, batch_id
    assert set_aside["late-event"] == late
    # what was set aside as settled is exactly the rule's copies (each a record sent before, byte for byte)
    copies = {(records[i]["kafka_partition"], records[i]["kafka_offset"])
              for i in page_logic.copies(_stamped_clicks(records), LATENESS)}  # fmt: skip
    assert len(copies) > 20
    assert set_aside["settled"] == copies
    assert set(set_aside) == {"late-event", "settled"}

    # Forgotten: of the users' clicks, only those within L + 2 gaps of their user's largest stamp (and the bucket
    # around the horizon); of the groups, those whose hour has not ended 2 gaps and L before the partitions' least
    # largest stamp, the others a marker each.
    checkpoint = tmp_path / "in-checkpoint"
    largest: dict[str, int] = {}
    for r in records:
        if r["partition_time_before"] is not None:
            largest[r["user_id"]] = max(largest.get(r["user_id"], 0), r["partition_time_before"])
    horizon = {u: (m - LATENESS - 2 * GAP) // MIN * MIN for u, m in largest.items()}
    held = {(u, i) for (u, i, _life), c in counted.items() if c.event_time_ms >= horizon.get(u, -(2**62))}
    assert len(held) < len(counted) / 2, "most clicks must be old enough to forget"
    assert _state_rows(spark, checkpoint, USERS_STEP, "times") == len(held)
    stamps = {p: max(r["partition_time_before"] or 0 for r in records if r["clicks_partition"] == p)
              for p in range(PARTITIONS)}  # fmt: skip
    settled_through = min(stamps.values()) - LATENESS - 2 * GAP
    open_groups = {g for g in page_logic.page_stats(_stamped_clicks(records), GAP, LATENESS)
                   if g[1] + 3_600_000 > settled_through}  # fmt: skip
    assert _state_rows(spark, checkpoint, GROUPS_STEP, "summary") == len(open_groups)
    assert _state_rows(spark, checkpoint, GROUPS_STEP, "marker") >= len(view) - len(open_groups) > 10


def test_a_click_whose_stamp_went_back_is_set_aside_when_it_reaches_a_settled_group(
    spark: SparkSession, tmp_path: Path, session_conf_restored: None
) -> None:
    """A topic that breaks the stamps' contract (a first emission stamped below its partition's largest) cannot
    change a settled group, stops nothing, and says which group it reached."""
    hour = T0 // 3_600_000 * 3_600_000
    row = dict.fromkeys(STAMPED_COLUMNS) | {"kafka_topic": "enriched-t", "kafka_partition": 0, "clicks_partition": 0}
    batches = [
        [row | {"user_id": "a", "event_id": "a1", "page": "/x", "event_time": hour + 10 * MIN, "kafka_offset": 0},
         row | {"user_id": "a", "event_id": "a2", "page": "/y", "event_time": hour + 180 * MIN, "kafka_offset": 1,
                "partition_time_before": hour + 10 * MIN},
         row | {"user_id": "a", "event_id": "a3", "page": "/y", "event_time": hour + 181 * MIN, "kafka_offset": 2,
                "partition_time_before": hour + 180 * MIN}],  # T = 3:00 - 20 - 60 min: hour 0 settles
        [row | {"user_id": "b", "event_id": "b1", "page": "/x", "event_time": hour + 20 * MIN, "kafka_offset": 3,
                "partition_time_before": hour + 15 * MIN}],  # its stamp went back: hour 0 is settled
    ]  # fmt: skip
    for batch in batches:
        for r in batch:
            r["raw_value"] = f"0:{r['kafka_offset']}".encode()
    write_batches(tmp_path / "in", batches, STAMPED_SCHEMA)

    seen = run_batches(
        spark, tmp_path / "in", STAMPED_SCHEMA, lambda s: page_stat_changes(s, GAP, LATENESS, stamp_partitions=1)
    )

    assert [(r.page, r.views) for r in seen[0] if r.side_kind is None and r.page == "/x"] == [("/x", 1)]
    assert [r for r in seen[1] if r.side_kind is None] == []  # hour 0's row stays as it was
    (aside,) = [r for r in seen[1] if r.side_kind is not None]
    assert aside.side_kind == "settled-group"
    assert f"{hour}//x" in aside.side_message, aside.side_message
    assert "user b" in aside.side_message, aside.side_message


# ------------------------------------------------------------------ user_activity ------------------------------

SESSIONS_SCHEMA = (
    "key string, session_id string, user_id string, start_time timestamp, end_time timestamp, clicks int, "
    f"segment string, deleted boolean, final boolean, kafka_partition int, kafka_offset long, {SIDE_SCHEMA}"
)
SESSION_COLUMNS = [c.split()[0] for c in SESSIONS_SCHEMA.split(", ")]


def _session_log(seed: int, users: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    logs = []
    for u in range(users):
        user, log = f"user-{u:03d}", []
        for _ in range(rng.randint(0, 25)):
            sid = f"{user}/s{rng.randint(0, 6)}"  # a few ids per user: sessions change, go and come back
            if rng.random() < 0.2:
                log.append({"key": sid, "deleted": True})
                continue
            start = T0 + rng.choice([0, 0, 10, 30, 60, 90]) * MIN  # ties on the start
            log.append({"key": sid, "session_id": sid, "user_id": user, "start_time": start,
                        "end_time": start + rng.randint(0, 40) * MIN, "clicks": rng.randint(1, 20),
                        "segment": rng.choice(["FREE", "PRO", "TRIAL"]), "deleted": False})  # fmt: skip
        log.append({"key": f"{user}/never-seen", "deleted": True})
        if u % 10 == 0:  # every session of the user merged away: the user leaves the view
            log += [{"key": f"{user}/s{i}", "deleted": True} for i in range(7)]
        else:  # some sessions end for good: their last record, if a value, is final
            last = {r["key"]: r for r in log}
            for r in last.values():
                r["final"] = not r["deleted"] and rng.random() < 0.5
        logs.append(log)
    rows = _interleave(rng, logs)
    return _positions([dict.fromkeys(SESSION_COLUMNS) | r for r in rows], lambda r: int(r["key"][5:8]) % PARTITIONS)


def _activity_rule(log: list[dict[str, Any]]) -> View:
    changes = [
        activity_logic.SessionChange(r["key"], r["user_id"], r["start_time"], r["end_time"], r["clicks"],
                                     r["segment"], r["deleted"], bool(r["final"]))
        for r in log
    ]  # fmt: skip
    return {
        user: (a.sessions, a.clicks, a.first_seen_ms, a.last_seen_ms, a.segment)
        for user, a in activity_logic.user_activity(changes).items()
    }


@pytest.mark.slow
@pytest.mark.parametrize("shuffle_partitions", [1, 4])
def test_the_user_activity_operator_equals_the_python_rule(
    spark: SparkSession, tmp_path: Path, shuffle_partitions: int, session_conf_restored: None
) -> None:
    rng = random.Random(30 + shuffle_partitions)
    log = _session_log(seed=shuffle_partitions, users=120)
    assert sum(bool(r["final"]) for r in log) > 100  # final sessions, whose ids the operator forgets
    batches = cut(log, 12, rng, lambda i: dead_letter(i, SESSION_COLUMNS, "sessions-t"))
    write_batches(tmp_path / "in", batches, SESSIONS_SCHEMA)

    seen = run_batches(spark, tmp_path / "in", SESSIONS_SCHEMA, activity_changes, shuffle_partitions)

    assert sorted(seen) == list(range(len(batches)))
    emitted = _follow(
        seen,
        batches,
        key=lambda r: r.user_id,
        values=lambda r: (r.sessions, r.clicks, _ms(r.first_seen), _ms(r.last_seen), r.segment),
        rule=_activity_rule,
    )
    deleted = sum(r.deleted for rows in seen.values() for r in rows if r.side_kind is None)
    assert deleted >= 3
    assert emitted > 120
    assert partitions_of(tmp_path / "in-checkpoint") == (shuffle_partitions, shuffle_partitions)
