"""Side rows: the records a job sets aside instead of processing (dead letters, late records), and their write.

A job runs as one streaming query, so what it sets aside travels in the same rows as its output: the SIDE
columns, null on an output row. The decoding fills them for an input record it cannot accept (a dead letter,
bound for `<input topic>.dlq`); a stateful rule fills them for a record beyond its lateness contract (bound for
its output's `.late` topic). Either way the original key and bytes are kept, and the headers say why and where from.

The write is at least once (a batch run again after a crash sends its side records again); `kappa dlq inspect`
counts a record once by where it came from. A graceful stop never runs a batch twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from kappa.contracts.dead_letter_format import (
    H_CONTRACT_BROKEN,
    H_CONTRACT_SUITE,
    H_JOB,
    H_JOB_VERSION,
    H_KIND,
    H_MESSAGE,
    H_SOURCE_OFFSET,
    H_SOURCE_PARTITION,
    H_SOURCE_TIMESTAMP,
    H_SOURCE_TOPIC,
    H_TIME,
    SIDE_ROWS_ALL,
    SIDE_ROWS_OBSERVED,
    DeadLetterKind,
    dlq_topic,
)
from kappa.contracts.expectations import kept_in_order
from kappa.spark.clock import wall_clock_ms

# The side columns, as Spark DDL (a stateful rule's output schema ends with them) and by name.
SIDE_SCHEMA = (
    "side_kind string, side_message string, side_key binary, side_value binary, side_topic string, "
    "side_partition int, side_offset long, side_timestamp timestamp, side_broken string, side_suite string"
)
SIDE_COLUMNS = tuple(c.split()[0] for c in SIDE_SCHEMA.split(", "))
SIDE_KIND = "side_kind"  # null on every row that is not set aside
# Kinds the decoding and the contracts give a record they refuse: a dead letter of the input (to the input's `.dlq`
# topic). Every other kind is one a rule gives a record it sets aside after reading it, LATE_EVENT or a kind of the
# job's own (enrich_clicks' late profile versions): a late record (to the output's `.late` topic).
DEAD_LETTER_KINDS = frozenset(kind.value for kind in DeadLetterKind if kind is not DeadLetterKind.LATE_EVENT)


def observe_side_rows(rows: DataFrame) -> DataFrame:
    """`rows`, observed: per batch, its side rows in all and per platform kind, counted in the JVM as the batch runs
    (Spark's observed metrics: no extra pass; the query's progress event carries them, kappa.runtime.metrics
    exports them). A batch read by two actions counts once only if it is persisted (the job runtime persists every
    batch it reads twice)."""
    kind = F.col(SIDE_KIND)
    counts = [F.count(kind).alias(SIDE_ROWS_ALL)]
    counts += [F.count_if(kind == k.value).alias(k.value) for k in DeadLetterKind]
    return rows.observe(SIDE_ROWS_OBSERVED, *counts)


def side_columns(df: DataFrame) -> list[Column]:
    """The SIDE columns of `df`, null where `df` has none (a batch read of records only): for a rule's input."""
    types = dict(c.split() for c in SIDE_SCHEMA.split(", "))
    return [F.col(c) if c in df.columns else F.lit(None).cast(types[c]).alias(c) for c in SIDE_COLUMNS]


def late_side_row(rows: pd.DataFrame, i: int, kind: DeadLetterKind) -> dict[str, Any]:
    """The side values of input row `i` (with `raw_value` and its Kafka position) set aside as late by a rule."""
    return {
        SIDE_KIND: kind.value,
        "side_value": rows["raw_value"].iat[i],
        "side_topic": rows["kafka_topic"].iat[i],
        "side_partition": int(rows["kafka_partition"].iat[i]),
        "side_offset": int(rows["kafka_offset"].iat[i]),
    }


HEADER_TYPE = "struct<key: string, value: binary>"  # one Kafka header, as Spark's Kafka sink takes it
HEADERS_TYPE = f"array<{HEADER_TYPE}>"


def kafka_header(name: str, value: Column) -> Column:
    """One Kafka header (struct<key: string, value: binary>), its value as UTF-8 text."""
    return F.struct(F.lit(name).alias("key"), value.cast("string").cast("binary").alias("value"))


def side_records(
    rows: DataFrame, job: str, job_version: int, inputs: Sequence[str] = (), late_to: str | None = None
) -> DataFrame:
    """Side rows -> Kafka records (key, value, headers, topic): the original bytes, headers saying why.

    `topic` is where each goes: `<input>.dlq` for a dead letter of one of `inputs`, the topic `late_to` for a
    late record (the job version's `Output.late_events`).
    """
    columns = side_record_columns(job, job_version, inputs, late_to)
    return rows.select(*[column.alias(name) for name, column in columns.items()])


def side_record_columns(
    job: str, job_version: int, inputs: Sequence[str] = (), late_to: str | None = None
) -> dict[str, Column]:
    """The Kafka record of a side row, column by column (key, value, headers, topic): see `side_records`."""
    target: Column = F.lit(None).cast("string")  # a side row comes from an input, so never stays null
    for topic in inputs:
        target = F.when(F.col("side_topic") == topic, F.lit(dlq_topic(topic))).otherwise(target)
    if late_to is not None:
        late = ~F.col(SIDE_KIND).isin(*DEAD_LETTER_KINDS)
        target = F.when(late, F.lit(late_to)).otherwise(target)
    headers = (
        kafka_header(H_KIND, F.col(SIDE_KIND)),
        kafka_header(H_MESSAGE, F.col("side_message")),
        kafka_header(H_SOURCE_TOPIC, F.col("side_topic")),
        kafka_header(H_SOURCE_PARTITION, F.col("side_partition")),
        kafka_header(H_SOURCE_OFFSET, F.col("side_offset")),
        kafka_header(H_SOURCE_TIMESTAMP, F.unix_millis(F.col("side_timestamp"))),
        kafka_header(H_JOB, F.lit(job)),
        kafka_header(H_JOB_VERSION, F.lit(str(job_version))),
        kafka_header(H_TIME, F.date_format(F.timestamp_millis(wall_clock_ms()), "yyyy-MM-dd'T'HH:mm:ss.SSSXXX")),
        kafka_header(H_CONTRACT_BROKEN, F.col("side_broken")),
        kafka_header(H_CONTRACT_SUITE, F.col("side_suite")),
    )
    return {
        "key": F.col("side_key"),
        "value": F.col("side_value"),
        "headers": kept_in_order([(h["value"].isNotNull(), h) for h in headers], HEADER_TYPE),  # those with a value
        "topic": target,
    }
