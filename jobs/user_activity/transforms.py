"""user_activity's Spark side: the rule of logic.py kept in the state store, per session and per user.

The platform's user activity operator (kappa.operators.user_activity, two transformWithState processors in the
JVM) keeps each session's latest value and each user's live sessions, and emits the user rows a micro-batch
changed; a differential test holds it equal to logic.py after every batch.
"""

from __future__ import annotations

from pyspark.sql import DataFrame

from kappa.job import changes_with_key, user_activity


def activity_changes(sessions: DataFrame) -> DataFrame:
    """Decoded `sessions` changes (records and tombstones) with their Kafka position -> one row per user the batch
    changed: user_id, sessions, clicks, first_seen, last_seen, segment, `deleted` (no live session left), then the
    SIDE columns (the input's dead letters)."""
    return user_activity(changes_with_key(sessions, "session_id"))  # one row per changed user
