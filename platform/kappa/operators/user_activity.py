"""Activity per user over their live sessions, kept in the state store (io.kappa.operators.UserActivity).

The rule is jobs/user_activity/transforms.py's `user_activity_of` over the whole `sessions` log (sessions, clicks,
first and last seen, the latest session's segment); this module only shapes the rows into the operator's and
back. The operator keeps each open session's latest value (a tombstone carries only its key: its user is known
from there) and each user's open sessions, with a summary of their final ones (a session's `final` record is its
last, so its id is forgotten), so a batch emits the rows it changed at the cost of the changes it read.
The input is a decoded read of a topic that declares deletes, with its Kafka position; its dead letters (the
SIDE columns) pass through the operator unchanged.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kappa.operators.jvm import operators_jvm, side_input, side_output
from kappa.spark.topic_io import DELETED


def user_activity(
    changes: DataFrame,
    session_id: str = "session_id",
    user: str = "user_id",
    start_time: str = "start_time",
    end_time: str = "end_time",
    clicks: str = "clicks",
    segment: str = "segment",
    final: str = "final",
) -> DataFrame:
    """`sessions` changes (records and tombstones: `deleted`, with the session id in `session_id`) -> one row per
    user whose activity the batch changed, and the dead letters.

    Columns: user_id, sessions, clicks, first_seen, last_seen (timestamps), segment, `deleted` (true when the user
    has no live session left: the row goes), then the SIDE columns. Streaming input keeps the state in Spark's
    state store; a batch input runs the rule once over all rows.
    """
    rows = changes.select(
        F.col(session_id).alias("key"), F.col("kafka_partition").cast("int"), "kafka_offset",
        F.coalesce(F.col(DELETED), F.lit(False)).alias("deleted"),
        F.coalesce(F.col(final), F.lit(False)).alias("final"), F.col(user).cast("string").alias("user"),
        F.unix_millis(start_time).alias("start_ms"), F.unix_millis(end_time).alias("end_ms"),
        F.col(clicks).cast("long").alias("clicks"), F.col(segment).cast("string").alias("segment"),
        *side_input(changes),
    )  # fmt: skip
    jvm = operators_jvm(rows, "user activity")
    activity = DataFrame(jvm.UserActivity.apply(rows._jdf), rows.sparkSession)
    return activity.select(
        "user_id", "sessions", "clicks", F.timestamp_millis("first_seen_ms").alias("first_seen"),
        F.timestamp_millis("last_seen_ms").alias("last_seen"), "segment", F.col("deleted").alias(DELETED),
        *side_output(),
    )  # fmt: skip
