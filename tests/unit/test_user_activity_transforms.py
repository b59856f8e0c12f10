"""user_activity on hand-made session changes: per-user rows recomputed from live sessions, in local Delta."""

import dataclasses
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.user_activity.declaration import view
from kappa.spark.delta_views import facts_path
from tests.unit.session_rows import BATCH_0, BATCH_1, changes, ms

AFTER_0 = {
    ("u1", 2, 8, ms(10), ms(12, 10), "PRO"),  # s2 starts later: its segment
    ("u2", 1, 7, ms(9), ms(9, 30), "TRIAL"),
}
AFTER_1 = {("u1", 1, 9, ms(10), ms(12, 10), "FREE")}  # s2 merged into s1; u2 and u3 have no live session


def activity(spark: SparkSession, path: str) -> set[tuple[object, ...]]:
    rows = spark.read.format("delta").load(path)
    assert rows.columns == ["user_id", "sessions", "clicks", "first_seen", "last_seen", "segment"]
    picked = rows.select(
        "user_id", "sessions", "clicks", F.unix_millis("first_seen"), F.unix_millis("last_seen"), "segment"
    )
    return {tuple(r) for r in picked.collect()}


def test_tombstones_take_sessions_back_and_users_without_sessions_leave(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "user_activity")
    users = view(path, "user_activity.test")
    users.write(changes(spark, *BATCH_0), 0)
    assert activity(spark, path) == AFTER_0
    users.write(changes(spark, *BATCH_1), 1)
    assert activity(spark, path) == AFTER_1
    facts = {(r.session_id, r.live) for r in spark.read.format("delta").load(facts_path(path)).collect()}
    assert facts == {("s1", True)}  # retired sessions are gone once the view has taken them back


def test_one_batch_gives_the_same_rows(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "user_activity")
    view(path, "user_activity.one").write(changes(spark, *BATCH_0, *BATCH_1), 0)
    assert activity(spark, path) == AFTER_1


def test_segment_ties_on_start_time_go_to_the_greater_session_id(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "user_activity")
    first, second = BATCH_0[0], BATCH_0[1]
    same_start = (*second[:3], first[3], *second[4:])  # s2 now starts when s1 does
    view(path, "user_activity.ties").write(changes(spark, first, same_start), 0)
    assert activity(spark, path) == {("u1", 2, 7, ms(10), ms(12, 10), "PRO")}


def test_a_batch_run_again_after_a_crash_between_its_merges_reaches_the_same_rows(
    spark: SparkSession, tmp_path: Path
) -> None:
    path = str(tmp_path / "user_activity")
    users = view(path, "user_activity.crash")
    users.write(changes(spark, *BATCH_0), 0)

    def crash(_facts: DataFrame) -> DataFrame:
        raise RuntimeError("killed between the facts MERGE and the view MERGE")

    with pytest.raises(RuntimeError, match="killed"):
        dataclasses.replace(users, aggregate=crash).write(changes(spark, *BATCH_1), 1)
    assert activity(spark, path) == AFTER_0
    users.write(changes(spark, *BATCH_1), 1)  # the facts MERGE is skipped; the tombstoned sessions still tell whose
    assert activity(spark, path) == AFTER_1
