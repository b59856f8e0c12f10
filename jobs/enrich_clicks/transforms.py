"""enrich_clicks' Spark side: both inputs as one stream grouped by user, the rule (logic.py) in the JVM.

Clicks and profile versions of a user share a partition number in their topics (both partitioned by user
id). The platform's as-of join operator (kappa.operators, a Spark transformWithState processor) hands each
user's new rows of a micro-batch, in log order (partition, offset), to the rule of logic.py with the user's
stored state; a differential test holds the operator equal to logic.py. Rows out: one per click
(re-)emitted, one per profile version that arrived after a click it applies to was settled.

The operator runs per Kafka partition (a partition's users in one call), which also gives each click its
partition's stamp (logic.py's `PartitionClock`), and writes the clicks' first emissions in offset order: what
page_stats' bound reads (docs/bounded_view_state.md).
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kappa.job import EVENT, LATE, SIDE_COLUMNS, SIDE_SCHEMA, AsOfJoinColumns, Topic, as_of_join, as_of_rows

ENRICHED, LATE_PROFILE = "enriched", "late_profile"  # the kind column of OUTPUT_SCHEMA
# The kind (`kappa.error.kind` header) of a late profile version on the output's `.late` topic: a version
# published after clicks it applies to were settled.
LATE_PROFILE_KIND = "late-profile"
NO_PROFILE_SEGMENT = "UNKNOWN"  # a click before any profile version (the documented rule)

COLUMNS = AsOfJoinColumns(
    key="user_id",
    event_id="event_id",
    event_time="event_time",
    event_payload=("page", "referrer", "device"),
    version="profile_version",
    valid_from="valid_from",
    published="kafka_timestamp",  # when the version was published
    entity_payload=("segment", "country"),
)
OUTPUT_SCHEMA = (
    "kind string, event_id string, user_id string, page string, referrer string, event_time timestamp, "
    "device string, profile_version long, segment string, country string, clicks_partition int, "
    f"partition_time_before timestamp, {SIDE_SCHEMA}"
)


def union_inputs(clicks: DataFrame, profiles: DataFrame, topics: tuple[Topic, Topic]) -> DataFrame:
    """Decoded clicks and profile versions (with raw values) as the operator's rows, the inputs' dead letters
    (side columns) riding along. `topics`: the two topics as deployed (both placed by user, in as many
    partitions)."""
    return as_of_rows(clicks, profiles, COLUMNS, topics)


def enriched_changes(inputs: DataFrame, lateness_ms: int, disorder_ms: int) -> DataFrame:
    """union_inputs(...) -> enriched clicks to (re-)emit and late profile versions (kind column), OUTPUT_SCHEMA."""
    joined = as_of_join(inputs, lateness_ms, disorder_ms, LATE_PROFILE_KIND)
    is_event = F.col("kind") == EVENT
    click, profile = F.col("event_payload"), F.col("entity_payload")
    return joined.select(
        F.when(is_event, ENRICHED).when(F.col("kind") == LATE, LATE_PROFILE).alias("kind"),
        "event_id", F.col("key").alias("user_id"),
        click[0].alias("page"), click[1].alias("referrer"), "event_time", click[2].alias("device"),
        F.col("version").alias("profile_version"),
        F.when(is_event & F.col("version").isNull(), NO_PROFILE_SEGMENT).otherwise(profile[0]).alias("segment"),
        profile[1].alias("country"),
        F.col("partition").alias("clicks_partition"),
        F.col("stamp").alias("partition_time_before"),
        *SIDE_COLUMNS,
    )  # fmt: skip
