"""page_stats on hand-made batches: facts and recomputed (page, hour) rows in a local Delta folder, no Kafka."""

import dataclasses
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.page_stats.declaration import view
from jobs.page_stats.transforms import click_changes, page_stats
from kappa.spark.delta_views import facts_path

GAP_MS = 30 * 60_000
MIN = 60_000
ENRICHED = (
    "key string, event_id string, user_id string, page string, event_time timestamp, segment string, "
    "kafka_partition int, kafka_offset long"
)


def at(hh: int, mm: int) -> datetime:
    return datetime(2026, 1, 1, hh, mm, tzinfo=UTC)


def ms(hh: int, mm: int) -> int:
    return int(at(hh, mm).timestamp() * 1000)


def clicks(spark: SparkSession, *rows: tuple[str, str, str, datetime, str, int]) -> DataFrame:
    """(event_id, user, page, time, segment, offset) -> decoded enriched clicks, all in partition 0."""
    return spark.createDataFrame([(e, e, u, p, t, s, 0, o) for e, u, p, t, s, o in rows], ENRICHED)


def table(spark: SparkSession, path: str) -> set[tuple[object, ...]]:
    rows = (
        spark.read.format("delta")
        .load(path)
        .select("page", F.unix_millis("hour_start"), "views", "distinct_users", "median_time_on_page_ms")
    )
    return {tuple(r) for r in rows.collect()}


# Batch 0: u1 on /a at 10:50, then /b at 11:30 (40 min later: beyond the gap, so /a has no time on page), then /a
# at 11:45; u2 on /a at 10:55 and 10:57; e4 arrives twice in the batch (the later offset counts).
BATCH_0 = (
    ("e1", "u1", "/a", at(10, 50), "FREE", 0),
    ("e2", "u1", "/b", at(11, 30), "FREE", 1),
    ("e4", "u2", "/a", at(10, 55), "FREE", 2),
    ("e3", "u1", "/a", at(11, 45), "FREE", 3),
    ("e6", "u2", "/a", at(10, 57), "FREE", 4),
    ("e4", "u2", "/a", at(10, 55), "PRO", 5),
)
# Batch 1: a late click of u1 at 11:10 gives e1 (hour 10) a next click 20 min later; e2 is re-emitted with a new
# segment (an update of the same click, not a second view).
BATCH_1 = (
    ("e5", "u1", "/c", at(11, 10), "FREE", 6),
    ("e2", "u1", "/b", at(11, 30), "PRO", 7),
)
AFTER_0 = {
    ("/a", ms(10, 0), 3, 2, 2 * MIN),  # e1 none, e4 2 min, e6 none
    ("/b", ms(11, 0), 1, 1, 15 * MIN),
    ("/a", ms(11, 0), 1, 1, None),
}
AFTER_1 = {
    ("/a", ms(10, 0), 3, 2, 11 * MIN),  # e1 20 min (the late e5), e4 2 min: the mean of the two middle values
    ("/c", ms(11, 0), 1, 1, 20 * MIN),
    ("/b", ms(11, 0), 1, 1, 15 * MIN),
    ("/a", ms(11, 0), 1, 1, None),
}


def test_a_late_click_changes_its_predecessors_hour_and_a_repeat_is_no_second_view(
    spark: SparkSession, tmp_path: Path
) -> None:
    path = str(tmp_path / "page_stats")
    stats = view(path, "page_stats.test", GAP_MS)
    stats.write(clicks(spark, *BATCH_0), 0)
    assert table(spark, path) == AFTER_0
    stats.write(clicks(spark, *BATCH_1), 1)
    assert table(spark, path) == AFTER_1
    facts = {r.event_id: r.time_on_page_ms for r in spark.read.format("delta").load(facts_path(path)).collect()}
    assert facts == {"e1": 20 * MIN, "e5": 20 * MIN, "e2": 15 * MIN, "e3": None, "e4": 2 * MIN, "e6": None}


def test_one_batch_or_many_give_the_same_rows(spark: SparkSession, tmp_path: Path) -> None:
    one = str(tmp_path / "one")
    view(one, "page_stats.one", GAP_MS).write(clicks(spark, *BATCH_0, *BATCH_1), 0)
    assert table(spark, one) == AFTER_1
    each = str(tmp_path / "each")
    stats = view(each, "page_stats.each", GAP_MS)
    for batch_id, batch in enumerate((BATCH_1, BATCH_0[:3], BATCH_0[3:])):  # the late click first, this time
        stats.write(clicks(spark, *batch), batch_id)
    assert table(spark, each) == AFTER_1


def test_a_batch_run_again_after_a_crash_between_its_merges_reaches_the_same_rows(
    spark: SparkSession, tmp_path: Path
) -> None:
    path = str(tmp_path / "page_stats")
    stats = view(path, "page_stats.crash", GAP_MS)
    stats.write(clicks(spark, *BATCH_0), 0)

    def crash(_facts: DataFrame) -> DataFrame:
        raise RuntimeError("killed between the facts MERGE and the view MERGE")

    with pytest.raises(RuntimeError, match="killed"):
        dataclasses.replace(stats, aggregate=crash).write(clicks(spark, *BATCH_1), 1)
    assert table(spark, path) == AFTER_0  # the facts moved on, the view not yet
    stats.write(clicks(spark, *BATCH_1), 1)  # Spark runs batch 1 again: the facts MERGE is skipped
    assert table(spark, path) == AFTER_1
    stats.write(clicks(spark, *BATCH_1), 1)  # and once more, after everything committed
    assert table(spark, path) == AFTER_1


def test_a_click_re_emitted_on_another_page_leaves_its_old_group(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "page_stats")
    stats = view(path, "page_stats.moved", GAP_MS)
    stats.write(clicks(spark, *BATCH_0, *BATCH_1), 0)
    stats.write(clicks(spark, ("e3", "u1", "/d", at(11, 45), "FREE", 8)), 1)
    assert table(spark, path) == (AFTER_1 - {("/a", ms(11, 0), 1, 1, None)}) | {("/d", ms(11, 0), 1, 1, None)}


def test_only_clicks_whose_time_on_page_changes_are_rewritten(spark: SparkSession) -> None:
    facts_schema = "event_id string, user_id string, page string, hour_start timestamp, event_time timestamp, " + (
        "time_on_page_ms long, was_page string, was_hour_start timestamp, touched_batch long"
    )
    stored = spark.createDataFrame(
        [
            ("e1", "u1", "/a", at(10, 0), at(10, 50), None, None, None, 0),
            ("e2", "u1", "/b", at(11, 0), at(11, 30), None, None, None, 0),
            ("e0", "u1", "/z", at(9, 0), at(9, 0), None, None, None, 0),  # far before: untouched
        ],
        facts_schema,
    )
    changed = click_changes(clicks(spark, ("e5", "u1", "/c", at(11, 10), "FREE", 6)), stored, GAP_MS)
    got = {(r.event_id, r.time_on_page_ms, r.was_page) for r in changed.collect()}
    assert got == {("e5", 20 * MIN, None), ("e1", 20 * MIN, "/a")}  # e2 keeps no time on page: not rewritten
    assert {tuple(r) for r in page_stats(stored).select("page", "views").collect()} == {
        ("/a", 1),
        ("/b", 1),
        ("/z", 1),
    }


def test_a_batch_rewrites_only_the_facts_of_the_hours_it_touches(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "page_stats")
    stats = view(path, "page_stats.layout", GAP_MS)

    def files_of_hour(hour: int) -> set[str]:
        facts = spark.read.format("delta").load(facts_path(path))
        return set(facts.where(F.hour("hour_start") == hour).inputFiles())

    stats.write(clicks(spark, *BATCH_0), 0)
    hour_10 = files_of_hour(10)
    # u1's next click after e3 (11:45) is 20 minutes later: it changes e3's time on page, in hour 11 only.
    stats.write(clicks(spark, ("e7", "u1", "/a", at(12, 5), "FREE", 6)), 1)
    assert hour_10
    assert files_of_hour(10) == hour_10  # hour 10's facts were not rewritten
    assert ("/a", ms(11, 0), 1, 1, 20 * MIN) in table(spark, path)  # e3 now has a time on page
