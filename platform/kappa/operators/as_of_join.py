"""The as-of join: each event with the entity version visible at its event time (io.kappa.operators.AsOfJoin).

The rule is jobs/enrich_clicks/logic.py's (visibility, lateness L, disorder D, corrections, late versions, the
partition's clock that stamps each event); this module only shapes the two inputs into the operator's rows and
its rows back into columns. Both inputs are decoded topic reads with their Kafka position and raw values
(`ctx.read(..., with_raw=True)`: the bytes of a late version or a misplaced record); their dead letters (the SIDE
columns) pass through the operator unchanged.

The operator is keyed by Kafka partition (each partition's keys' states and its clock in one call), so both
inputs must place a key as `partition_for` does, in as many partitions: a record in another partition is a
dead letter (`partition-mismatch`), set aside before the shuffle.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from kappa.contracts.dead_letter_format import DeadLetterKind
from kappa.core.errors import KappaError
from kappa.kafka.partitioning import partition_column
from kappa.operators.jvm import operators_jvm, side_input, side_output
from kappa.spark.side_outputs import set_aside_where

EVENT, LATE = "event", "late"  # the operator's `kind`; null on a passed-through dead letter


@dataclass(frozen=True)
class AsOfJoinColumns:
    """Which columns of the two inputs play which part. Payload columns are carried as strings."""

    key: str  # shared by both inputs (and their topics' partitioning)
    event_id: str
    event_time: str  # a timestamp
    event_payload: Sequence[str]
    version: str  # the entity version's number (unique per key)
    valid_from: str  # a timestamp: when the version starts to apply
    published: str  # a timestamp: when the version was published (its Kafka timestamp)
    entity_payload: Sequence[str]


def _strings(columns: Sequence[str]) -> Column:
    return F.array(*(F.col(c).cast("string") for c in columns))


def as_of_rows(events: DataFrame, entities: DataFrame, cols: AsOfJoinColumns, partitions: tuple[int, int]) -> DataFrame:
    """Both inputs as one DataFrame of the operator's rows (io.kappa.operators.AsOfJoin.INPUT).

    `partitions`: the declared partition counts of the events' and the entities' topics, which must be equal
    (a key's events and versions share a partition number); a record outside its key's partition is set aside.
    """
    if partitions[0] != partitions[1]:
        raise KappaError(
            f"the as-of join needs its two inputs in as many partitions (a key's events and versions in one "
            f"partition number): the events' topic has {partitions[0]}, the entities' {partitions[1]}"
        )
    events, entities = (_placed(df, cols.key, partitions[0]) for df in (events, entities))
    null_long = F.lit(None).cast("long")
    position = [F.col("kafka_topic"), F.col("kafka_partition").cast("int"), F.col("kafka_offset")]
    # Only a late version is set aside with its original bytes: an event's would cross the shuffle for nothing.
    event_rows = events.select(
        F.col(cols.key).alias("key"), F.lit(False).alias("is_entity"), *position,
        F.lit(None).cast("binary").alias("raw_value"),
        F.col(cols.event_id).alias("event_id"), F.unix_millis(cols.event_time).alias("event_time_ms"),
        null_long.alias("entity_version"), null_long.alias("valid_from_ms"), null_long.alias("published_ms"),
        _strings(cols.event_payload).alias("payload"), *side_input(events),
    )  # fmt: skip
    entity_rows = entities.select(
        F.col(cols.key).alias("key"), F.lit(True).alias("is_entity"), *position, F.col("raw_value"),
        F.lit(None).cast("string").alias("event_id"), null_long.alias("event_time_ms"),
        F.col(cols.version).cast("long").alias("entity_version"),
        F.unix_millis(cols.valid_from).alias("valid_from_ms"), F.unix_millis(cols.published).alias("published_ms"),
        _strings(cols.entity_payload).alias("payload"), *side_input(entities),
    )  # fmt: skip
    return event_rows.unionByName(entity_rows)


def _placed(rows: DataFrame, key: str, partitions: int) -> DataFrame:
    """`rows` with each record outside its key's partition (`partition_for`) set aside as a dead letter."""
    home = partition_column(F.col(key), partitions)
    why = F.format_string(
        f"partition %d is not the partition of {key} '%s' (%d of {partitions}, as the platform's producers place it)",
        F.col("kafka_partition"), F.col(key), home,
    )  # fmt: skip
    return set_aside_where(rows, F.col("kafka_partition") != home, DeadLetterKind.PARTITION_MISMATCH, why)


def as_of_join(rows: DataFrame, lateness_ms: int, disorder_ms: int, late_kind: str) -> DataFrame:
    """as_of_rows(...) -> one row per event (re-)emitted with its answer, one per late version, the dead letters.

    Columns: kind (EVENT, LATE or null), key, event_id, event_time (timestamp), version, event_payload and
    entity_payload (arrays of strings, entity_payload null when no version is visible), an event's partition and
    `stamp` (a timestamp: its partition's latest event time just before it in offset order, null for the
    partition's first event), then the SIDE columns (a late version's say `late_kind` and carry its original bytes
    and position). A batch's rows come with its events' first emissions in offset order.
    Streaming inputs keep the state in Spark's state store; batch inputs run the rule once over all rows.
    """
    jvm = operators_jvm(rows, "the as-of join")
    joined = DataFrame(jvm.AsOfJoin.apply(rows._jdf, lateness_ms, disorder_ms, late_kind), rows.sparkSession)
    return joined.select(
        "kind", "key", "event_id", F.timestamp_millis("event_time_ms").alias("event_time"),
        F.col("entity_version").alias("version"), "event_payload", "entity_payload", "partition",
        F.timestamp_millis("stamp_ms").alias("stamp"),
        *side_output(),
    )  # fmt: skip
