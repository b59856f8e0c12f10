"""user_activity on hand-made session changes: the rule (logic.py) and the job's operator, streamed one file per
batch through the job's transforms into a local Delta table, no Kafka."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.user_activity import logic
from jobs.user_activity.declaration import TABLE
from jobs.user_activity.transforms import activity_changes
from kappa.spark.delta_merge import DeltaMerge
from kappa.spark.side_outputs import SIDE_COLUMNS, SIDE_SCHEMA
from kappa.spark.topic_io import DELETED
from tests.batch_streams import run_batches, write_batches
from tests.unit.session_rows import BATCH_0, BATCH_1, CHANGES, at, ms, tombstone, upsert

AFTER_0 = {
    ("u1", 2, 8, ms(10), ms(12, 10), "PRO"),  # s2 starts later: its segment
    ("u2", 1, 7, ms(9), ms(9, 30), "TRIAL"),
}
AFTER_1 = {("u1", 1, 9, ms(10), ms(12, 10), "FREE")}  # s2 merged into s1; u2 and u3 have no live session
COLUMNS = [c.split()[0] for c in CHANGES.split(", ")]


def _ms(t: object) -> int | None:
    return int(t.timestamp() * 1000) if isinstance(t, datetime) else None


def the_rule(*batches: tuple[tuple[object, ...], ...]) -> set[tuple[object, ...]]:
    log = []
    for batch in batches:
        for row in batch:
            r = dict(zip(COLUMNS, row, strict=True))
            log.append(logic.SessionChange(str(r["key"]), r["user_id"], _ms(r["start_time"]), _ms(r["end_time"]),
                                           r["clicks"], r["segment"], deleted=bool(r["deleted"]),
                                           final=bool(r["final"])))  # fmt: skip
    return {(u, a.sessions, a.clicks, a.first_seen_ms, a.last_seen_ms, a.segment)
            for u, a in logic.user_activity(log).items()}  # fmt: skip


def stream(
    spark: SparkSession, tmp_path: Path, *batches: tuple[tuple[object, ...], ...]
) -> list[set[tuple[object, ...]]]:
    """The batches through the job's transforms and its table's MERGE: the table after each batch."""
    ddl = f"{CHANGES}, {SIDE_SCHEMA}"
    write_batches(tmp_path / "in", [[dict(zip(COLUMNS, row, strict=True)) for row in b] for b in batches], ddl)
    path = str(tmp_path / "user_activity")
    merge = DeltaMerge(path, keys=TABLE.keys, app_id="user_activity.test", deleted=DELETED)
    tables: list[set[tuple[object, ...]]] = []

    def write(batch: DataFrame, batch_id: int) -> None:
        merge.write(batch.drop(*SIDE_COLUMNS), batch_id)
        tables.append(activity(spark, path))

    run_batches(spark, tmp_path / "in", ddl, activity_changes, write=write)
    return tables


def activity(spark: SparkSession, path: str) -> set[tuple[object, ...]]:
    rows = spark.read.format("delta").load(path)
    assert rows.columns == ["user_id", "sessions", "clicks", "first_seen", "last_seen", "segment"]
    picked = rows.select(
        "user_id", "sessions", "clicks", F.unix_millis("first_seen"), F.unix_millis("last_seen"), "segment"
    )
    return {tuple(r) for r in picked.collect()}


def test_the_rule_takes_tombstoned_sessions_back() -> None:
    assert the_rule(BATCH_0) == AFTER_0
    assert the_rule(BATCH_0, BATCH_1) == AFTER_1


def test_tombstones_take_sessions_back_and_users_without_sessions_leave(spark: SparkSession, tmp_path: Path) -> None:
    assert stream(spark, tmp_path, BATCH_0, BATCH_1) == [AFTER_0, AFTER_1]


def test_one_batch_gives_the_same_rows(spark: SparkSession, tmp_path: Path) -> None:
    assert stream(spark, tmp_path, BATCH_0 + BATCH_1) == [AFTER_1]


def test_segment_ties_on_start_time_go_to_the_greater_session_id(spark: SparkSession, tmp_path: Path) -> None:
    first, second = BATCH_0[0], BATCH_0[1]
    same_start = (*second[:3], first[3], *second[4:])  # s2 now starts when s1 does
    assert stream(spark, tmp_path, (first, same_start)) == [{("u1", 2, 7, ms(10), ms(12, 10), "PRO")}]


def test_the_latest_session_moving_back_gives_the_segment_to_another(spark: SparkSession, tmp_path: Path) -> None:
    # s2 (PRO, the latest) is corrected to start before s1: s1's FREE becomes the user's segment, and the first
    # seen moves back with it; the operator finds both again among the user's sessions.
    moved = (upsert(10, "s2", "u1", at(9), at(12, 10), 3, "PRO"),)
    after = stream(spark, tmp_path, BATCH_0, moved)
    assert (
        after[-1]
        == the_rule(BATCH_0, moved)
        == {
            ("u1", 2, 8, ms(9), ms(12, 10), "FREE"),
            ("u2", 1, 7, ms(9), ms(9, 30), "TRIAL"),
        }
    )


# Batch 2: u1's s1 is final (its last record); u5's s5 is created final within the batch (a replay writes a session
# it forgot once, final). Batch 3: s6, u1's latest session and the holder of its last seen, is tombstoned: the
# operator reads u1's sessions again, and must find s1's extremes among the final ones, which it no longer keeps
# by id.
BATCH_2 = (
    upsert(10, "s1", "u1", at(10), at(12, 10), 9, "FREE", final=True),
    upsert(11, "s6", "u1", at(14), at(14, 30), 2, "PRO"),
    upsert(12, "s5", "u5", at(7), at(7, 40), 6, "TRIAL", final=True),
)
BATCH_3 = (tombstone(13, "s6"),)
AFTER_2 = {("u1", 2, 11, ms(10), ms(14, 30), "PRO"), ("u5", 1, 6, ms(7), ms(7, 40), "TRIAL")}
AFTER_3 = {("u1", 1, 9, ms(10), ms(12, 10), "FREE"), ("u5", 1, 6, ms(7), ms(7, 40), "TRIAL")}


def test_the_rule_keeps_final_sessions_counted() -> None:
    assert the_rule(BATCH_0, BATCH_1, BATCH_2) == AFTER_2
    assert the_rule(BATCH_0, BATCH_1, BATCH_2, BATCH_3) == AFTER_3


def test_final_sessions_stay_counted_when_an_open_one_holding_the_extremes_goes(
    spark: SparkSession, tmp_path: Path
) -> None:
    assert stream(spark, tmp_path, BATCH_0, BATCH_1, BATCH_2, BATCH_3) == [AFTER_0, AFTER_1, AFTER_2, AFTER_3]
