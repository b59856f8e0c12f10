"""page_stats' Spark side: the rule of logic.py kept in the state store, per user and per (page, hour).

The platform's page statistics operator (kappa.operators.page_stats, two transformWithState processors in the
JVM) keeps each user's clicks with their time on page and each group's counts, and emits the (page, hour) rows a
micro-batch changed; a differential test holds it equal to logic.py after every batch.
"""

from __future__ import annotations

from pyspark.sql import DataFrame

from kappa.job import page_stats

KEYS = ("page", "hour_start")  # the view's grain: the MERGE's keys


def page_stat_changes(
    enriched: DataFrame,
    gap_ms: int,
    lateness_ms: int | None = None,
    *,
    stamp_partitions: int = 1,
    input_partitions: int | None = None,
) -> DataFrame:
    """Decoded enriched clicks with their Kafka position (and, with a lateness, their raw bytes) -> one row per
    (page, hour) the batch changed: page, hour_start, views, distinct_users, median_time_on_page_ms, `deleted`
    (the group has no click left), then the SIDE columns (the input's dead letters, the late clicks). With
    `lateness_ms`, by the stamps of `stamp_partitions` clicks partitions, which the topic read must have too."""
    return page_stats(
        enriched, gap_ms, lateness_ms, stamp_partitions=stamp_partitions, input_partitions=input_partitions
    )  # one row per changed (page, hour)
