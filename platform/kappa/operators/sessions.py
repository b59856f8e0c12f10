"""Sessionization per key in log order (io.kappa.operators.Sessions).

The rule is jobs/sessionize/logic.py's (lateness from log order, gap, merges, stable ids, corrections); this
module only shapes the rows into the operator's and back. The input is a decoded topic read with its Kafka
position and raw value; its dead letters (the SIDE columns) pass through the operator unchanged.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kappa.operators.jvm import operators_jvm, side_input, side_output

# The operator's `kind`; null on a dead letter. FINAL: a session's last record, written when the state forgets it.
UPSERT, RETRACT, FINAL, LATE = "upsert", "retract", "final", "late"


def sessions(
    events: DataFrame,
    gap_ms: int,
    lateness_ms: int,
    late_kind: str,
    key: str = "user_id",
    event_id: str = "event_id",
    event_time: str = "event_time",
    page: str = "page",
    segment: str = "segment",
) -> DataFrame:
    """Events -> one row per session change (UPSERT, RETRACT, or FINAL: the last record of a session the state
    forgot), one per late event row, the dead letters.

    Columns: kind, session_id, key, start_time, end_time (timestamps), clicks, distinct_pages, entry_page,
    exit_page, segment (the session's first click's), then the SIDE columns (a late event's say `late_kind`
    and carry its original bytes and position). Streaming input keeps the state in Spark's state store;
    a batch input runs the rule once over all rows.
    """
    rows = events.select(
        F.col(key).alias("key"), "kafka_topic", F.col("kafka_partition").cast("int"), "kafka_offset", "raw_value",
        F.col(event_id).alias("event_id"), F.unix_millis(event_time).alias("event_time_ms"),
        F.col(page).cast("string").alias("page"), F.col(segment).cast("string").alias("segment"),
        *side_input(events),
    )  # fmt: skip
    jvm = operators_jvm(rows, "sessionization")
    changes = DataFrame(jvm.Sessions.apply(rows._jdf, gap_ms, lateness_ms, late_kind), rows.sparkSession)
    return changes.select(
        "kind", "session_id", "key",
        F.timestamp_millis("start_ms").alias("start_time"), F.timestamp_millis("end_ms").alias("end_time"),
        "clicks", "distinct_pages", "entry_page", "exit_page", "segment", *side_output(),
    )  # fmt: skip
