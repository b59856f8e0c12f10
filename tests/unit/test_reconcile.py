"""The replay's reconciliation of a new version's output against the live one: counts and samples per kind."""

import uuid
from pathlib import Path
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kappa.kafka.aliases import now_ms
from kappa.lifecycle.verification import reconcile
from kappa.runtime.outputs import commit_as_of
from tests.waiting import wait_until


def test_reconcile_counts_and_samples_each_kind_of_difference(spark: SparkSession) -> None:
    live = spark.createDataFrame(
        [("a", 1, "PRO"), ("b", 2, "FREE"), ("c", 3, "TRIAL")], "key string, version long, segment string"
    )
    new = spark.createDataFrame(
        [("a", 1, "PRO"), ("b", 2, "TRIAL"), ("d", 4, None)], "key string, version long, segment string"
    )

    report = reconcile(new, live, ["key"])

    assert {k: report[k] for k in ("rows_new", "rows_live", "only_in_new", "only_in_live", "changed")} == {
        "rows_new": 3,
        "rows_live": 3,
        "only_in_new": 1,
        "only_in_live": 1,
        "changed": 1,
    }
    assert report["samples"]["only_in_new"] == [{"key": "d", "version": 4, "segment": None}]
    assert report["samples"]["only_in_live"] == [{"key": "c", "version": 3, "segment": "TRIAL"}]
    assert report["samples"]["changed"] == [{"key": "b", "segment": {"live": "FREE", "new": "TRIAL"}}]


def test_a_kind_without_keys_costs_no_look_for_samples(spark: SparkSession) -> None:
    """Each look for samples is a Spark job at least: outputs that agree cost the join and its counts alone."""
    live = spark.createDataFrame([("a", 1), ("b", 2), ("d", 4)], "key string, version long")
    differs = spark.createDataFrame([("a", 1), ("b", 3), ("c", 5)], "key string, version long")
    tracker = spark.sparkContext.statusTracker()

    def jobs_of(new: DataFrame) -> tuple[dict[str, Any], int]:
        group = f"reconcile-{uuid.uuid4().hex}"
        spark.sparkContext.setJobGroup(group, "reconcile")
        try:
            return reconcile(new, live, ["key"]), len(tracker.getJobIdsForGroup(group))
        finally:
            spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]

    same, same_jobs = jobs_of(live)
    different, different_jobs = jobs_of(differs)
    assert (same["changed"], same["samples"]) == (0, {"only_in_new": [], "only_in_live": [], "changed": []})
    assert different["samples"] == {
        "only_in_new": [{"key": "c", "version": 5}],
        "only_in_live": [{"key": "d", "version": 4}],
        "changed": [{"key": "b", "version": {"live": 2, "new": 3}}],
    }
    # Three looks for the differing outputs, none for the agreeing ones (which looked three times in vain before).
    assert different_jobs - same_jobs >= 3, (same_jobs, different_jobs)


def test_the_live_table_is_read_as_it_was_when_the_catch_up_started(spark: SparkSession, tmp_path: Path) -> None:
    """The live version keeps committing while a replay catches up: verify compares with its table as of then."""
    path = str(tmp_path / "page_stats" / "v1")
    spark.createDataFrame([("/a", 1)], "page string, views long").write.format("delta").save(path)
    [first] = DeltaTable.forPath(spark, path).history().select(F.unix_millis("timestamp")).first() or [None]
    # The catch-up starts strictly after the first commit as Delta records it, the second commit after that.
    wait_until(lambda: now_ms() > first, timeout_s=5, what="the clock passes the first commit", interval_s=0.01)
    catch_up_started = now_ms()
    wait_until(lambda: now_ms() > catch_up_started, timeout_s=5, what="the clock moves on", interval_s=0.01)
    spark.createDataFrame([("/b", 2)], "page string, views long").write.format("delta").mode("append").save(path)

    assert commit_as_of(spark, path, catch_up_started) == 0
    assert commit_as_of(spark, path, catch_up_started - 60_000) is None  # before the table existed
    assert commit_as_of(spark, path, now_ms()) == 1  # after its last commit: that one (timestampAsOf refuses)
