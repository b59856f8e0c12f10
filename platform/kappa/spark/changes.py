"""A compacted topic's changes, as the jobs that keep its current state read them: records and tombstones.

A topic that declares deletes (like `sessions`) holds, per key, values that replace each other and tombstones
that delete the key; its latest record per key is its current state. These helpers give a batch's changes their
key and keep the latest per key, so a Delta MERGE (or an operator's state) meets each key once per batch.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F


def changes_with_key(changes: DataFrame, key: str) -> DataFrame:
    """Rows of a topic that declares deletes (records, and tombstones with only `key` set): the key field
    filled from the Kafka key on tombstones too."""
    return changes.withColumn(key, F.coalesce(F.col(key), F.col("key")))


def last_per_key(records: DataFrame, keys: Sequence[str]) -> DataFrame:
    """The latest record of each key in a batch, by log position (a key's records share one partition).

    A MERGE fails when several source rows match one target row, and only the last one counts anyway.
    """
    latest = Window.partitionBy(*keys).orderBy(F.col("kafka_partition").desc(), F.col("kafka_offset").desc())
    # one row per key
    return records.withColumn("_rank", F.row_number().over(latest)).where(F.col("_rank") == 1).drop("_rank")
