"""sessions_table on hand-made changes: the Delta table is the topic's current state, tombstones delete."""

from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.sessions_table.declaration import TABLE
from jobs.sessions_table.transforms import SESSION_COLUMNS, session_changes
from kappa.spark.delta_merge import DeltaMerge
from kappa.spark.topic_io import DELETED
from tests.unit.session_rows import BATCH_0, BATCH_1, changes, ms


def sessions(spark: SparkSession, path: str) -> set[tuple[object, ...]]:
    rows = spark.read.format("delta").load(path)
    assert tuple(rows.columns) == SESSION_COLUMNS
    picked = rows.select("session_id", "user_id", F.unix_millis("start_time"), F.unix_millis("end_time"), "clicks")
    return {tuple(r) for r in picked.collect()}


def test_last_change_per_session_wins_within_a_batch(spark: SparkSession) -> None:
    got = {(r.session_id, r.clicks, r.deleted) for r in session_changes(changes(spark, *BATCH_0, *BATCH_1)).collect()}
    assert got == {("s1", 9, False), ("s2", None, True), ("s3", None, True), ("s4", None, True), ("s9", None, True)}


def test_upserts_replace_and_tombstones_delete(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "sessions")
    merge = DeltaMerge(path, keys=TABLE.keys, app_id="sessions_table.test", deleted=DELETED)
    merge.write(session_changes(changes(spark, *BATCH_0)), 0)
    assert sessions(spark, path) == {
        ("s1", "u1", ms(10), ms(10, 20), 5),
        ("s2", "u1", ms(12), ms(12, 10), 3),
        ("s3", "u2", ms(9), ms(9, 30), 7),
    }
    merge.write(session_changes(changes(spark, *BATCH_1)), 1)
    assert sessions(spark, path) == {("s1", "u1", ms(10), ms(12, 10), 9)}
    merge.write(session_changes(changes(spark, *BATCH_0)), 1)  # a batch id already committed: skipped
    assert sessions(spark, path) == {("s1", "u1", ms(10), ms(12, 10), 9)}
    [row] = spark.read.format("delta").load(path).collect()
    assert (row.distinct_pages, row.entry_page, row.exit_page, row.segment) == (1, "/in", "/out", "FREE")
