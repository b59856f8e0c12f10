"""Page statistics per page and event-time hour, kept in the state store (io.kappa.operators.PageStats).

The rule is jobs/page_stats/transforms.py's `page_stats_of` over the whole log (views, distinct users, the exact
median time on page); this module only shapes the rows into the operator's and back. The operator keeps, per
user, each click's time on page and, per (page, hour), the counts the statistics need, so a batch emits the rows
it changed at the cost of the clicks it read. The input is a decoded topic read with its Kafka position; its dead
letters (the SIDE columns) pass through the operator unchanged.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kappa.contracts.topic_declarations import HOUR_MS
from kappa.operators.jvm import operators_jvm, side_input, side_output
from kappa.spark.topic_io import DELETED


def page_stats(
    clicks: DataFrame,
    gap_ms: int,
    user: str = "user_id",
    event_id: str = "event_id",
    event_time: str = "event_time",
    page: str = "page",
) -> DataFrame:
    """Clicks -> one row per (page, hour) whose statistics the batch changed, and the dead letters.

    Columns: page, hour_start (a timestamp), views, distinct_users, median_time_on_page_ms, `deleted` (true when no
    click counts in the group any more: its row goes), then the SIDE columns. Time on page: the gap to the user's
    next click (by event time, ties by event id) when at most `gap_ms`. Streaming input keeps the state in Spark's
    state store; a batch input runs the rule once over all rows.
    """
    rows = clicks.select(
        F.col(user).alias("key"), F.col("kafka_partition").cast("int"), "kafka_offset",
        F.col(event_id).alias("event_id"), F.unix_millis(event_time).alias("event_time_ms"),
        F.col(page).cast("string").alias("page"), *side_input(clicks),
    )  # fmt: skip
    jvm = operators_jvm(rows, "page statistics")
    changes = DataFrame(jvm.PageStats.apply(rows._jdf, gap_ms, HOUR_MS), rows.sparkSession)
    return changes.select(
        "page", F.timestamp_millis("hour_ms").alias("hour_start"), "views", "distinct_users",
        "median_time_on_page_ms", F.col("deleted").alias(DELETED), *side_output(),
    )  # fmt: skip
