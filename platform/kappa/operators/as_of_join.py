"""The as-of join: each event with the entity version visible at its event time (io.kappa.operators.AsOfJoin).

The rule is jobs/enrich_clicks/logic.py's (visibility, lateness L, disorder D, corrections, late versions, the
partition's clock that stamps each event); this module only shapes the two inputs into the operator's rows and
its rows back into columns. Both inputs are decoded topic reads with their Kafka position and raw values
(`ctx.read(..., with_raw=True)`: the bytes of a late version); their dead letters (the SIDE columns) pass
through the operator unchanged.

The operator is keyed by Kafka partition (each partition's keys' states and its clock in one call), so both
inputs' topics must be placed by the key (`Topic.partition_field`), in as many partitions: decoding them then
makes a record in another partition a dead letter (`partition-mismatch`), before the shuffle.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from kappa.contracts.topic_declarations import Topic
from kappa.core.errors import KappaError
from kappa.operators.jvm import operators_jvm, side_input, side_output

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


def as_of_rows(events: DataFrame, entities: DataFrame, cols: AsOfJoinColumns, topics: tuple[Topic, Topic]) -> DataFrame:
    """Both inputs as one DataFrame of the operator's rows (io.kappa.operators.AsOfJoin.INPUT).

    `topics`: the events' and the entities' topics as deployed, refused unless both are placed by the key in as
    many partitions (a key's events and versions share a partition number, and a reader's decoding sets aside a
    record outside it).
    """
    for topic in topics:
        if topic.partition_field != cols.key:
            raise KappaError(
                f"the as-of join keeps its state per Kafka partition, so its inputs must be placed by {cols.key!r}: "
                f"topic {topic.name} declares partition_field={topic.partition_field!r}"
            )
    if topics[0].partitions != topics[1].partitions:
        raise KappaError(
            f"the as-of join needs its two inputs in as many partitions (a key's events and versions in one "
            f"partition number): {topics[0].name} has {topics[0].partitions}, {topics[1].name} {topics[1].partitions}"
        )
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
