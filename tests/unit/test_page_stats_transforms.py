"""page_stats on hand-made batches: the rule (logic.py) and the job's operator, streamed one file per batch
through the job's transforms into a local Delta table, no Kafka."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.page_stats import logic
from jobs.page_stats.declaration import TABLE
from jobs.page_stats.transforms import page_stat_changes
from kappa.spark.delta_merge import DeltaMerge
from kappa.spark.side_outputs import SIDE_COLUMNS
from kappa.spark.topic_io import DELETED
from tests.batch_streams import run_batches, write_batches

GAP_MS = 30 * 60_000
MIN = 60_000
ENRICHED = (
    "event_id string, user_id string, page string, event_time timestamp, segment string, kafka_partition int, "
    "kafka_offset long, side_kind string, side_message string, side_key binary, side_value binary, "
    "side_topic string, side_partition int, side_offset long, side_timestamp timestamp, side_broken string, "
    "side_suite string"
)
Click = tuple[str, str, str, datetime, str, int]  # event id, user, page, time, segment, offset (partition 0)


def at(hh: int, mm: int) -> datetime:
    return datetime(2026, 1, 1, hh, mm, tzinfo=UTC)


def ms(hh: int, mm: int) -> int:
    return int(at(hh, mm).timestamp() * 1000)


# Batch 0: u1 on /a at 10:50, then /b at 11:30 (40 min later: beyond the gap, so /a has no time on page), then /a
# at 11:45; u2 on /a at 10:55 and 10:57; e4 arrives twice in the batch (the later offset counts).
BATCH_0: tuple[Click, ...] = (
    ("e1", "u1", "/a", at(10, 50), "FREE", 0),
    ("e2", "u1", "/b", at(11, 30), "FREE", 1),
    ("e4", "u2", "/a", at(10, 55), "FREE", 2),
    ("e3", "u1", "/a", at(11, 45), "FREE", 3),
    ("e6", "u2", "/a", at(10, 57), "FREE", 4),
    ("e4", "u2", "/a", at(10, 55), "PRO", 5),
)
# Batch 1: a late click of u1 at 11:10 gives e1 (hour 10) a next click 20 min later; e2 is re-emitted with a new
# segment (an update of the same click, not a second view).
BATCH_1: tuple[Click, ...] = (
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


def the_rule(*batches: tuple[Click, ...]) -> set[tuple[object, ...]]:
    log = [logic.Click(u, e, p, int(t.timestamp() * 1000)) for batch in batches for e, u, p, t, _, _ in batch]
    stats = logic.page_stats(log, GAP_MS)
    return {(page, hour, s.views, s.distinct_users, s.median_time_on_page_ms) for (page, hour), s in stats.items()}


def stream(spark: SparkSession, tmp_path: Path, *batches: tuple[Click, ...]) -> list[set[tuple[object, ...]]]:
    """The batches through the job's transforms and its table's MERGE: the table after each batch."""
    rows = [[{"event_id": e, "user_id": u, "page": p, "event_time": t, "segment": s, "kafka_partition": 0,
              "kafka_offset": o} for e, u, p, t, s, o in batch] for batch in batches]  # fmt: skip
    write_batches(tmp_path / "in", rows, ENRICHED)
    path = str(tmp_path / "page_stats")
    merge = DeltaMerge(path, keys=TABLE.keys, app_id="page_stats.test", deleted=DELETED)
    tables: list[set[tuple[object, ...]]] = []

    def write(batch: DataFrame, batch_id: int) -> None:
        merge.write(batch.drop(*SIDE_COLUMNS), batch_id)
        tables.append(table(spark, path))

    run_batches(spark, tmp_path / "in", ENRICHED, lambda s: page_stat_changes(s, GAP_MS), write=write)
    return tables


def table(spark: SparkSession, path: str) -> set[tuple[object, ...]]:
    rows = (
        spark.read.format("delta")
        .load(path)
        .select("page", F.unix_millis("hour_start"), "views", "distinct_users", "median_time_on_page_ms")
    )
    return {tuple(r) for r in rows.collect()}


def test_the_rule_counts_late_clicks_and_repeats_once() -> None:
    assert the_rule(BATCH_0) == AFTER_0
    assert the_rule(BATCH_0, BATCH_1) == AFTER_1


def test_a_late_click_changes_its_predecessors_hour_and_a_repeat_is_no_second_view(
    spark: SparkSession, tmp_path: Path
) -> None:
    assert stream(spark, tmp_path, BATCH_0, BATCH_1) == [AFTER_0, AFTER_1]


def test_one_batch_or_many_give_the_same_rows(spark: SparkSession, tmp_path: Path) -> None:
    assert stream(spark, tmp_path / "one", BATCH_0 + BATCH_1)[-1] == AFTER_1
    late_first = (BATCH_1, BATCH_0[:3], BATCH_0[3:])  # the late click first, this time
    assert stream(spark, tmp_path / "each", *late_first)[-1] == AFTER_1


def test_a_click_sent_again_on_another_page_or_time_leaves_its_old_group(spark: SparkSession, tmp_path: Path) -> None:
    moved = (
        ("e3", "u1", "/d", at(11, 45), "FREE", 8),  # the only click of (/a, 11): that row goes
        ("e6", "u2", "/a", at(12, 20), "FREE", 9),  # to another hour: e4's time on page goes with it
    )
    after = stream(spark, tmp_path, BATCH_0 + BATCH_1, moved)[-1]
    assert after == the_rule(BATCH_0, BATCH_1, moved)
    assert after == {
        ("/a", ms(10, 0), 2, 2, 20 * MIN),  # e1 20 min; e4 has no next click within the gap any more
        ("/c", ms(11, 0), 1, 1, 20 * MIN),
        ("/b", ms(11, 0), 1, 1, 15 * MIN),
        ("/d", ms(11, 0), 1, 1, None),
        ("/a", ms(12, 0), 1, 1, None),
    }


def test_a_batch_emits_only_the_rows_it_changed(spark: SparkSession, tmp_path: Path) -> None:
    write_batches(
        tmp_path / "in",
        [[{"event_id": e, "user_id": u, "page": p, "event_time": t, "kafka_partition": 0, "kafka_offset": o}
          for e, u, p, t, _, o in batch]
         for batch in (BATCH_0, (("e7", "u1", "/a", at(12, 5), "FREE", 6),))],
        ENRICHED,
    )  # fmt: skip
    seen = run_batches(spark, tmp_path / "in", ENRICHED, lambda s: page_stat_changes(s, GAP_MS))
    # u1's next click after e3 (11:45) is 20 minutes later: e3's row in hour 11 changes, and e7's own; hour 10 not
    changed = {(r.page, r.hour_start.hour, r.views, r.median_time_on_page_ms) for r in seen[1]}
    assert changed == {("/a", 11, 1, 20 * MIN), ("/a", 12, 1, None)}
