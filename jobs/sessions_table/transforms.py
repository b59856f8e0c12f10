"""Pure DataFrame transforms of sessions_table (no sources, no sinks)."""

from __future__ import annotations

from pyspark.sql import DataFrame

from kappa.job import DELETED, changes_with_key, last_per_key

SESSION_COLUMNS = (
    "session_id",
    "user_id",
    "start_time",
    "end_time",
    "clicks",
    "distinct_pages",
    "entry_page",
    "exit_page",
    "segment",
)


def session_changes(changes: DataFrame) -> DataFrame:
    """A batch of `sessions` changes (records and tombstones: `deleted`, only the Kafka key set) -> one row per
    session id: its latest value, or a deletion when the latest record is a tombstone."""
    keyed = changes_with_key(changes, "session_id")
    return last_per_key(keyed, ["session_id"]).select(*SESSION_COLUMNS, DELETED)  # one row per session id
