"""Micro-batches made by hand or generated, streamed through a job's transforms: one parquet file per batch.

The file source reads one file per micro-batch (oldest first), so a test decides exactly where each batch ends,
and a stateful transform keeps its state across them in the state store, as it does reading Kafka.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, Row, SparkSession

T0 = 1_767_225_600_000  # 2026-01-01, ms: the files' modification times count up from here

_ARROW = {"boolean": pa.bool_(), "string": pa.string(), "int": pa.int32(), "long": pa.int64(),
          "binary": pa.binary(), "timestamp": pa.timestamp("ms", tz="UTC")}  # fmt: skip


def write_batches(folder: Path, batches: Sequence[Sequence[dict[str, Any]]], ddl: str) -> None:
    """One parquet file per batch (rows as dicts; a column not given is null), in batch order."""
    schema = pa.schema([(c.split()[0], _ARROW[c.split()[1]]) for c in ddl.split(", ")])
    folder.mkdir(parents=True)
    for i, batch in enumerate(batches):
        path = folder / f"batch-{i:03d}.parquet"
        rows = [dict.fromkeys(schema.names) | row for row in batch]
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
        os.utime(path, (T0 / 1000 + i, T0 / 1000 + i))  # the file source takes files oldest first


def run_batches(
    spark: SparkSession,
    files: Path,
    ddl: str,
    job: Callable[[DataFrame], DataFrame],
    shuffle_partitions: int | None = None,
    write: Callable[[DataFrame, int], None] | None = None,
) -> dict[int, list[Row]]:
    """`job` over the files as a stream, one file per micro-batch: each batch's output rows, in order. With
    `write`, each batch also goes to it (as foreachBatch hands it to a job's write)."""
    if shuffle_partitions is not None:
        spark.conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions))
    stream = spark.readStream.schema(ddl).option("maxFilesPerTrigger", 1).parquet(str(files))
    seen: dict[int, list[Row]] = {}

    def collect(batch: DataFrame, batch_id: int) -> None:
        batch.persist()
        seen[batch_id] = batch.collect()
        if write is not None:
            write(batch, batch_id)
        batch.unpersist()

    query = (
        job(stream).writeStream.foreachBatch(collect)
        .outputMode("update")
        .option("checkpointLocation", str(files.parent / f"{files.name}-checkpoint"))
        .trigger(availableNow=True)
        .start()
    )  # fmt: skip
    query.awaitTermination(600)
    assert query.exception() is None, query.exception()
    return seen


def dead_letter(i: int, columns: Sequence[str], topic: str) -> dict[str, Any]:
    """The i-th undecodable record of `topic` as a job's rows carry it: every column null but the SIDE ones."""
    return dict.fromkeys(columns) | {
        "side_kind": "undecodable", "side_message": f"bad {i}", "side_key": f"k{i}".encode(),
        "side_value": b"\x00junk", "side_topic": topic, "side_partition": 1, "side_offset": 10_000 + i,
        "side_timestamp": T0 + i * 1_000,
    }  # fmt: skip


def cut(
    rows: list[dict[str, Any]], batches: int, rng: random.Random, dead: Callable[[int], dict[str, Any]]
) -> list[list[dict[str, Any]]]:
    """The log cut at random points into non-empty batches, a dead letter (`dead(i)`) in every third."""
    cuts = sorted(rng.sample(range(1, len(rows)), batches - 1))
    parts = [rows[a:b] for a, b in zip([0, *cuts], [*cuts, len(rows)], strict=True)]
    for i, part in enumerate(parts):
        if i % 3 == 1:
            part.insert(rng.randint(0, len(part)), dead(i))
    return parts
