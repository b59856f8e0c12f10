"""enrich_clicks' Spark side: both inputs as one stream grouped by user, the rule (logic.py) in the state store.

Clicks and profile versions of a user share a partition number in their topics (both partitioned by user
id), and Spark hands the function all of a user's new rows of a micro-batch together with its stored state.
The function sorts each input into its log order (partition, offset) and applies the rule. Rows out: one per
click (re-)emitted, one per profile version that arrived after a click it applies to was settled.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs.enrich_clicks.logic import Click, Profile, UserState, enrich, state_from_json, state_to_json

CLICK, PROFILE = "click", "profile"
ENRICHED, LATE_PROFILE = "enriched", "late_profile"

# Both inputs in one shape: a click's fields or a profile's fields, the other side null.
INPUT_COLUMNS = (
    "user_id", "kind", "kafka_topic", "kafka_partition", "kafka_offset", "raw_value",
    "event_id", "page", "referrer", "device", "event_time_ms",
    "profile_version", "segment", "country", "valid_from_ms", "log_time_ms",
)  # fmt: skip
OUTPUT_SCHEMA = (
    "kind string, event_id string, user_id string, page string, referrer string, event_time timestamp, "
    "device string, profile_version long, segment string, country string, "
    "late_value binary, late_topic string, late_partition int, late_offset long"
)
STATE_SCHEMA = "state string"


def _millis(column: str) -> F.Column:
    return F.unix_millis(F.col(column))


def union_inputs(clicks: DataFrame, profiles: DataFrame) -> DataFrame:
    """Decoded clicks and profile versions (with raw values) as one DataFrame of INPUT_COLUMNS."""
    null = F.lit(None)
    click_rows = clicks.select(
        "user_id", F.lit(CLICK).alias("kind"), "kafka_topic", "kafka_partition", "kafka_offset", "raw_value",
        "event_id", "page", "referrer", F.col("device").cast("string").alias("device"),
        _millis("event_time").alias("event_time_ms"),
        null.cast("long").alias("profile_version"), null.cast("string").alias("segment"),
        null.cast("string").alias("country"), null.cast("long").alias("valid_from_ms"),
        null.cast("long").alias("log_time_ms"),
    )  # fmt: skip
    profile_rows = profiles.select(
        "user_id", F.lit(PROFILE).alias("kind"), "kafka_topic", "kafka_partition", "kafka_offset", "raw_value",
        null.cast("string").alias("event_id"), null.cast("string").alias("page"),
        null.cast("string").alias("referrer"), null.cast("string").alias("device"),
        null.cast("long").alias("event_time_ms"),
        F.col("profile_version").cast("long").alias("profile_version"),
        F.col("segment").cast("string").alias("segment"), "country",
        _millis("valid_from").alias("valid_from_ms"),
        _millis("kafka_timestamp").alias("log_time_ms"),  # when the version was published
    )  # fmt: skip
    return click_rows.unionByName(profile_rows)


def enrich_user(lateness_ms: int, disorder_ms: int):  # type: ignore[no-untyped-def]
    """The function for applyInPandasWithState, with the job's contract (L and D)."""

    def apply(key: tuple[str], frames: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
        user_id = key[0]
        user_state = state_from_json(state.get[0]) if state.exists else UserState()
        rows = pd.concat(list(frames)).sort_values(["kind", "kafka_partition", "kafka_offset"])  # log order
        profile_rows = rows[rows["kind"] == PROFILE]
        click_rows = rows[rows["kind"] == CLICK]
        profiles = [
            Profile(int(r.profile_version), int(r.valid_from_ms), int(r.log_time_ms), r.segment, r.country)
            for r in profile_rows.itertuples()
        ]
        clicks = [
            Click(r.event_id, int(r.event_time_ms), (r.page, _text(r.referrer), r.device))
            for r in click_rows.itertuples()
        ]
        changes = enrich(user_state, profiles, clicks, lateness_ms, disorder_ms)
        state.update((state_to_json(user_state),))
        out: list[dict[str, Any]] = []
        for emitted in changes.emit:
            page, referrer, device = emitted.click.payload
            profile = emitted.profile
            out.append(
                {
                    "kind": ENRICHED,
                    "event_id": emitted.click.event_id,
                    "user_id": user_id,
                    "page": page,
                    "referrer": referrer,
                    "event_time": pd.Timestamp(emitted.click.event_time_ms, unit="ms", tz="UTC"),
                    "device": device,
                    "profile_version": profile.profile_version if profile else None,
                    "segment": profile.segment if profile else "UNKNOWN",
                    "country": profile.country if profile else None,
                }
            )
        late_versions = {p.profile_version for p in changes.late_profiles}
        for r in profile_rows.itertuples():
            if int(r.profile_version) in late_versions:
                late_versions.discard(int(r.profile_version))  # once, even if re-delivered in this batch
                out.append(
                    {"kind": LATE_PROFILE, "user_id": user_id, "late_value": r.raw_value, "late_topic": r.kafka_topic,
                     "late_partition": r.kafka_partition, "late_offset": r.kafka_offset}
                )  # fmt: skip
        if out:
            yield pd.DataFrame(out, columns=[c.split()[0] for c in OUTPUT_SCHEMA.split(", ")])

    return apply


def _text(value: object) -> str | None:
    return None if value is None or (isinstance(value, float) and pd.isna(value)) else str(value)


def enriched_changes(inputs: DataFrame, lateness_ms: int, disorder_ms: int) -> DataFrame:
    """union_inputs(...) -> enriched clicks to (re-)emit and late profile versions (kind column)."""
    # one row per click (re-)emitted or late profile version
    return inputs.groupBy("user_id").applyInPandasWithState(
        enrich_user(lateness_ms, disorder_ms), OUTPUT_SCHEMA, STATE_SCHEMA, "update", "NoTimeout"
    )
