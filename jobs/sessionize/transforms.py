"""sessionize's Spark side: the per-user rule (logic.py) run in the JVM, one user at a time.

The platform's sessions operator (kappa.operators, a Spark transformWithState processor) hands each user's
new rows of a micro-batch, in log order (partition, offset), to the rule of logic.py with the user's stored
state; a differential test holds the operator equal to logic.py. Rows out: one per session change (upsert,
retraction, or final: a session's last record, once the state forgets it) and one per late event.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kappa.job import FINAL, LATE, RETRACT, SIDE_COLUMNS, UPSERT, DeadLetterKind, sessions

__all__ = ["FINAL", "LATE", "RETRACT", "UPSERT", "session_changes"]


def session_changes(clicks: DataFrame, gap_ms: int, lateness_ms: int) -> DataFrame:
    """Decoded (enriched) clicks with their raw value and Kafka position -> session changes and late events
    (kind, session_id, user_id, start_time, end_time, clicks, distinct_pages, entry_page, exit_page, segment,
    then the SIDE columns)."""
    changes = sessions(clicks, gap_ms, lateness_ms, DeadLetterKind.LATE_EVENT.value)
    return changes.select(
        "kind", "session_id", F.col("key").alias("user_id"), "start_time", "end_time", "clicks", "distinct_pages",
        "entry_page", "exit_page", "segment", *SIDE_COLUMNS,
    )  # fmt: skip
