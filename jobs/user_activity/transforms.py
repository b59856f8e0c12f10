"""Pure DataFrame transforms of user_activity: session facts, and the activity per user over the live ones."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kappa.spark.delta_views import last_per_key
from kappa.spark.topic_io import DELETED

# The private facts: one row per session id ever seen, `live` false once tombstoned (then removed after the
# view has recomputed its user). The user of a tombstoned session comes from here: a tombstone has only its key.
FACTS_SCHEMA = (
    "session_id string, user_id string, start_time timestamp, end_time timestamp, clicks long, segment string, "
    "live boolean, touched_batch long"
)
RETIRED = "NOT live"


def session_facts(changes: DataFrame, facts: DataFrame) -> DataFrame:
    """A batch of `sessions` changes (records and tombstones) and the stored facts -> the facts rows to write.

    A tombstone of a session never seen is dropped: there is nothing to take back.
    """
    latest = last_per_key(changes, ["session_id"])  # one row per session id
    known = facts.select("session_id", F.col("user_id").alias("known_user_id"))
    return (
        latest.join(known, "session_id", "left")
        .select(
            "session_id",
            F.coalesce(F.col("user_id"), F.col("known_user_id")).alias("user_id"),
            "start_time",
            "end_time",
            F.col("clicks").cast("long").alias("clicks"),
            F.col("segment").cast("string").alias("segment"),
            (~F.col(DELETED)).alias("live"),
        )
        .where(F.col("user_id").isNotNull())
    )  # one row per session id to write


def touched_users(touched_facts: DataFrame) -> DataFrame:
    return touched_facts.select("user_id").distinct()  # one row per user


def user_activity(facts: DataFrame) -> DataFrame:
    """Session facts -> one row per user with a live session.

    segment: that of the latest session by start time, ties broken by the greater session id.
    """
    live = facts.where(F.col("live"))
    return live.groupBy("user_id").agg(
        F.count("*").alias("sessions"),
        F.sum("clicks").cast("long").alias("clicks"),
        F.min("start_time").alias("first_seen"),
        F.max("end_time").alias("last_seen"),
        F.max_by("segment", F.struct("start_time", "session_id")).alias("segment"),
    )  # one row per user
