"""Pure DataFrame transform of enrich_clicks_realtime: decoded clicks joined with a table of profiles."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kappa.job import SIDE_COLUMNS

CLICK_FIELDS = ("event_id", "user_id", "page", "referrer", "event_time", "device")
PROFILE_FIELDS = ("profile_version", "segment", "country")
# enrich_clicks' partition stamp: only its per-partition operator gives it (this lane keeps no state), so null.
NO_STAMPS = {"clicks_partition": "int", "partition_time_before": "timestamp"}


def with_latest_profile(clicks: DataFrame, profiles: DataFrame) -> DataFrame:
    """Decoded clicks (with their SIDE columns) and one profile row per user -> enriched click rows.

    A click of a user without a profile gets segment UNKNOWN and no version or country, as in enrich_clicks.
    Dead letters (SIDE columns set) pass through, their user null: they match no profile. The profiles are
    broadcast: a stateless, one-stage plan, as Spark's real-time mode requires.
    """
    table = profiles.select("user_id", *PROFILE_FIELDS)
    return clicks.join(F.broadcast(table), "user_id", "left").select(
        *CLICK_FIELDS,
        "profile_version",
        F.coalesce(F.col("segment"), F.lit("UNKNOWN")).alias("segment"),
        "country",
        *(F.lit(None).cast(kind).alias(name) for name, kind in NO_STAMPS.items()),
        *SIDE_COLUMNS,
    )  # one row per click or dead letter
