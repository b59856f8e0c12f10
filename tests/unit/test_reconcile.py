"""The replay's reconciliation of a new version's output against the live one: counts and samples per kind."""

from pyspark.sql import SparkSession

from kappa.replay import reconcile


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
