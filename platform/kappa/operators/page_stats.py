"""Page statistics per page and event-time hour, kept in the state store (io.kappa.operators.PageStats).

The rule is jobs/page_stats/logic.py's (views, distinct users, the exact median time on page; with a lateness, the
records that count by their partition stamps); this module only shapes the rows into the operator's and back.
The operator keeps, per user, each click's time on page and, per (page, hour), the counts the statistics need, so
a batch emits the rows it changed at the cost of the clicks it read. With a lateness it forgets what no record
that counts can reach: a user's clicks older than the user's largest stamp - L - 2 gap, and each (page, hour) once
every partition's stamps are that far past its end. The input is a decoded topic read with its Kafka position
and raw value; its dead letters (the SIDE columns) pass through the operator unchanged.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kappa.contracts.dead_letter_format import DeadLetterKind
from kappa.contracts.topic_declarations import HOUR_MS
from kappa.core.errors import SettingsError
from kappa.operators.jvm import operators_jvm, side_input, side_output
from kappa.spark.topic_io import DELETED

# The side kind of a copy, which changes nothing: a record stamped below an earlier one of its user (a re-emission,
# or a record sent again by a batch of enrich_clicks run again after a crash). To `.late`, the same in every run.
SETTLED = "settled"


def page_stats(
    clicks: DataFrame,
    gap_ms: int,
    lateness_ms: int | None = None,
    *,
    stamp_partitions: int = 1,
    input_partitions: int | None = None,
    late_kind: str = DeadLetterKind.LATE_EVENT.value,
    settled_kind: str = SETTLED,
    user: str = "user_id",
    event_id: str = "event_id",
    event_time: str = "event_time",
    page: str = "page",
    stamp: str = "partition_time_before",
    stamp_partition: str = "clicks_partition",
) -> DataFrame:
    """Clicks -> one row per (page, hour) whose statistics the batch changed, the records set aside, and the dead
    letters.

    Columns: page, hour_start (a timestamp), views, distinct_users, median_time_on_page_ms, `deleted` (true when no
    click counts in the group any more: its row goes), then the SIDE columns. Time on page: the gap to the user's
    next click (by event time, ties by event id) when at most `gap_ms`.

    With `lateness_ms` (L), each click's `stamp` (the latest event time before it in its `stamp_partition`, one of
    `stamp_partitions`) decides: a record more than L behind it is set aside as `late_kind`; a copy (stamped below
    an earlier record of its user: it changes nothing) as `settled_kind`; both with their bytes
    (the input needs `kafka_topic` and `raw_value`). Without it (None), every click is kept for ever. Streaming
    input keeps the state in Spark's state store; a batch input runs the rule once over all rows.

    `input_partitions`: the partitions of the topic read, when known. Bounded, it must equal `stamp_partitions`: a
    clicks partition's stamps are in order only along one partition of the topic read (a SettingsError otherwise).
    """
    bounded = lateness_ms is not None
    if bounded and input_partitions is not None and input_partitions != stamp_partitions:
        raise SettingsError(
            f"page statistics judges lateness by the clicks partitions' stamps, which are in order only when the "
            f"topic it reads has as many partitions as the clicks topic: {input_partitions} against "
            f"{stamp_partitions} (declare the two topics with the same partitions)"
        )
    rows = clicks.select(
        F.col(user).alias("key"),
        F.col("kafka_topic") if bounded else F.lit(None).cast("string").alias("kafka_topic"),
        F.col("kafka_partition").cast("int"), "kafka_offset",
        F.col("raw_value") if bounded else F.lit(None).cast("binary").alias("raw_value"),
        F.col(event_id).alias("event_id"), F.unix_millis(event_time).alias("event_time_ms"),
        F.col(page).cast("string").alias("page"),
        (F.unix_millis(stamp) if bounded else F.lit(None).cast("long")).alias("stamp_ms"),
        (F.col(stamp_partition).cast("int") if bounded else F.lit(None).cast("int")).alias("stamp_partition"),
        *side_input(clicks),
    )  # fmt: skip
    jvm = operators_jvm(rows, "page statistics")
    changes = DataFrame(  # py4j passes the lateness to the Long parameter as is, None as null
        jvm.PageStats.apply(rows._jdf, gap_ms, HOUR_MS, lateness_ms, stamp_partitions, late_kind, settled_kind),
        rows.sparkSession,
    )
    return changes.select(
        "page", F.timestamp_millis("hour_ms").alias("hour_start"), "views", "distinct_users",
        "median_time_on_page_ms", F.col("deleted").alias(DELETED), *side_output(),
    )  # fmt: skip
