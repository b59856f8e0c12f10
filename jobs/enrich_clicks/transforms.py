"""enrich_clicks' Spark side: both inputs as one stream grouped by user, the rule (logic.py) in the state store.

Clicks and profile versions of a user share a partition number in their topics (both partitioned by user
id), and Spark hands the function all of a user's new rows of a micro-batch together with its stored state.
The function sorts each input into its log order (partition, offset) and applies the rule. Rows out: one per
click (re-)emitted, one per profile version that arrived after a click it applies to was settled.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs.enrich_clicks.logic import Click, Profile, UserState, enrich, state_from_json, state_to_json
from kappa.deadletter import DeadLetterKind
from kappa.side_outputs import SIDE_SCHEMA, late_side_row, side_columns
from kappa.stateful import per_key

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
    f"{SIDE_SCHEMA}"
)
OUTPUT_COLUMNS = tuple(c.split()[0] for c in OUTPUT_SCHEMA.split(", "))
STATE_SCHEMA = "state string"


def _millis(column: str) -> F.Column:
    return F.unix_millis(F.col(column))


def union_inputs(clicks: DataFrame, profiles: DataFrame) -> DataFrame:
    """Decoded clicks and profile versions (with raw values) as one DataFrame of INPUT_COLUMNS, the inputs'
    dead letters (side columns) riding along."""
    null = F.lit(None)
    click_rows = clicks.select(
        "user_id", F.lit(CLICK).alias("kind"), "kafka_topic", "kafka_partition", "kafka_offset", "raw_value",
        "event_id", "page", "referrer", F.col("device").cast("string").alias("device"),
        _millis("event_time").alias("event_time_ms"),
        null.cast("long").alias("profile_version"), null.cast("string").alias("segment"),
        null.cast("string").alias("country"), null.cast("long").alias("valid_from_ms"),
        null.cast("long").alias("log_time_ms"), *side_columns(clicks),
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
        *side_columns(profiles),
    )  # fmt: skip
    return click_rows.unionByName(profile_rows)


def enrich_user(lateness_ms: int, disorder_ms: int):  # type: ignore[no-untyped-def]
    """The function for applyInPandasWithState, with the job's contract (L and D)."""

    def apply(key: tuple[str], frames: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
        user_id = key[0]
        user_state = state_from_json(state.get[0]) if state.exists else UserState()
        rows = pd.concat(list(frames), ignore_index=True)
        # Columns as plain lists, rows in log order (partition, offset): pandas per row costs ~100x more.
        order = np.lexsort((rows["kafka_offset"].to_numpy(), rows["kafka_partition"].to_numpy()))
        is_profile = rows["kind"].to_numpy()[order] == PROFILE
        p_rows, c_rows = order[is_profile], order[~is_profile]

        def column(name: str, at: np.ndarray) -> list[Any]:
            return list(rows[name].to_numpy()[at].tolist())

        versions = [int(v) for v in column("profile_version", p_rows)]
        profiles = [
            Profile(version, int(valid_from), int(log_time), segment, country)
            for version, valid_from, log_time, segment, country in zip(
                versions, column("valid_from_ms", p_rows), column("log_time_ms", p_rows),
                column("segment", p_rows), column("country", p_rows), strict=True,
            )
        ]  # fmt: skip
        clicks = [
            Click(event_id, int(event_time), (page, referrer, device))
            for event_id, event_time, page, referrer, device in zip(
                column("event_id", c_rows), column("event_time_ms", c_rows), column("page", c_rows),
                column("referrer", c_rows), column("device", c_rows), strict=True,
            )
        ]  # fmt: skip
        changes = enrich(user_state, profiles, clicks, lateness_ms, disorder_ms)
        state.update((state_to_json(user_state),))
        out: dict[str, list[Any]] = {name: [] for name in OUTPUT_COLUMNS}
        for emitted in changes.emit:
            page, referrer, device = emitted.click.payload
            p = emitted.profile  # None: a click before any profile, enriched by the documented rule
            version, segment, country = (p.profile_version, p.segment, p.country) if p else (None, "UNKNOWN", None)
            _append(out, kind=ENRICHED, event_id=emitted.click.event_id, user_id=user_id, page=page,
                    referrer=referrer, event_time=emitted.click.event_time_ms, device=device,
                    profile_version=version, segment=segment, country=country)  # fmt: skip
        late_versions = {p.profile_version for p in changes.late_profiles}
        for i, version in zip(p_rows, versions, strict=True):
            if version in late_versions:
                late_versions.discard(version)  # once, even if re-delivered in this batch
                _append(out, kind=LATE_PROFILE, user_id=user_id, **late_side_row(rows, i, DeadLetterKind.LATE_PROFILE))
        if out["kind"]:
            frame = pd.DataFrame(out)
            frame["event_time"] = pd.to_datetime(frame["event_time"], unit="ms", utc=True)
            yield frame

    return apply


def _append(out: dict[str, list[Any]], **values: Any) -> None:
    for name, column in out.items():
        column.append(values.get(name))


def enriched_changes(inputs: DataFrame, lateness_ms: int, disorder_ms: int) -> DataFrame:
    """union_inputs(...) -> enriched clicks to (re-)emit and late profile versions (kind column)."""
    # one row per click (re-)emitted or late profile version
    return per_key(inputs, "user_id", enrich_user(lateness_ms, disorder_ms), OUTPUT_SCHEMA, STATE_SCHEMA)
