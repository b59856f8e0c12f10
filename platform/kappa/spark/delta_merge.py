"""Exactly-once MERGE of micro-batches into Delta tables (the sink of every materialized-view job).

Structured Streaming gives foreachBatch at-least-once: after a crash between the Delta commit and the
checkpoint's commit, the same batch id runs again. Each MERGE therefore carries Delta's idempotency marker
(`txnAppId` = job and version, `txnVersion` = batch id), and Delta skips a batch id it has already committed
for that app id. Tables are created with the Change Data Feed on, so readers can follow changes. An UPSERT batch
may also delete keys (tombstones of a compacted topic): rows flagged in its `deleted` column.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, SparkSession

TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"


_CREATED: set[str] = set()  # tables this process created or found: a table is never dropped under a running job


def forget_table(path: str) -> None:
    """The table at `path` was deleted (a retire): a later write in this process creates it again."""
    _CREATED.discard(path)


class MergeMode(StrEnum):
    """How a batch's rows meet the table's rows of the same key."""

    UPSERT = "upsert"  # the batch holds whole rows: insert or replace by key
    ACCUMULATE = "accumulate"  # the batch holds partial sums per key: add them to what the table has


@dataclass(frozen=True)
class DeltaMerge:
    """One Delta table written by MERGE, each batch id at most once: `write` is a foreachBatch function.

    The table is created on its first batch, with the batch's columns (the `deleted` column left out).
    """

    path: str  # the table's path (`ctx.output_path()` for the job's output)
    keys: tuple[str, ...]  # the columns that identify a row: the MERGE's condition (null equals null)
    app_id: str  # `<job>.v<version>`: one idempotency stream per job version
    mode: MergeMode = MergeMode.UPSERT  # replace whole rows, or add partial sums
    summed: tuple[str, ...] = ()  # ACCUMULATE: the columns that add up
    # UPSERT: a boolean column of the batch; where true the row deletes its key (a tombstone). Never stored.
    deleted: str | None = None
    # Table properties set when the table is created (default: the Change Data Feed on, for followers).
    properties: dict[str, str] = field(default_factory=lambda: {"delta.enableChangeDataFeed": "true"})
    partitioned_by: tuple[str, ...] = ()  # a MERGE rewrites only the files of the partitions it touches

    def __post_init__(self) -> None:
        if self.mode is MergeMode.ACCUMULATE and not self.summed:
            raise ValueError("ACCUMULATE needs the columns to add up (summed=...)")
        if self.deleted and self.mode is not MergeMode.UPSERT:
            raise ValueError("deletes (deleted=...) need UPSERT: a partial sum cannot delete its key")

    def ensure_table(self, spark: SparkSession, batch: DataFrame) -> None:
        """Create the table on its first batch. Once per process: asking Delta on every batch costs a look at
        the table's log, two or three times per batch of a view."""

        if self.path in _CREATED:
            return
        stored = batch.drop(self.deleted) if self.deleted else batch
        builder = DeltaTable.createIfNotExists(spark).location(self.path).addColumns(stored.schema)
        if self.partitioned_by:
            builder = builder.partitionedBy(*self.partitioned_by)
        for key, value in self.properties.items():
            builder = builder.property(key, value)
        builder.execute()
        _CREATED.add(self.path)

    def write(self, batch: DataFrame, batch_id: int) -> None:
        """Merge one micro-batch, at most once per batch id (foreachBatch's function)."""

        # The batch's session is the query's own clone: its conf does not leak into other queries.
        spark = batch.sparkSession
        self.ensure_table(spark, batch)
        condition = " AND ".join(f"t.`{k}` <=> s.`{k}`" for k in self.keys)
        spark.conf.set(TXN_APP_ID, self.app_id)
        spark.conf.set(TXN_VERSION, str(batch_id))
        try:
            merge = DeltaTable.forPath(spark, self.path).alias("t").merge(batch.alias("s"), condition)
            if self.mode is MergeMode.ACCUMULATE:
                merge = merge.whenMatchedUpdate(set={c: f"t.`{c}` + s.`{c}`" for c in self.summed})
            elif self.deleted:
                flag = f"s.`{self.deleted}`"
                values: dict[str, str | Column] = {f"`{c}`": f"s.`{c}`" for c in batch.columns if c != self.deleted}
                merge = merge.whenMatchedDelete(condition=flag).whenMatchedUpdate(set=values)
                merge = merge.whenNotMatchedInsert(condition=f"NOT {flag}", values=values)
            else:
                merge = merge.whenMatchedUpdateAll()
            if not self.deleted:
                merge = merge.whenNotMatchedInsertAll()
            merge.execute()
        finally:
            spark.conf.unset(TXN_APP_ID)
            spark.conf.unset(TXN_VERSION)


def append_once(batch: DataFrame, path: str, app_id: str, batch_id: int) -> None:
    """Append one micro-batch to a Delta table, at most once per (app id, batch id): Delta's idempotent write."""
    batch.write.format("delta").mode("append").option("txnAppId", app_id).option("txnVersion", batch_id).save(path)


def foreach_batch(
    merge: DeltaMerge, prepare: Callable[[DataFrame], DataFrame] | None = None
) -> Callable[[DataFrame, int], None]:
    """A foreachBatch function: optionally reshape the batch (e.g. pre-aggregate), then merge it once."""

    def write(batch: DataFrame, batch_id: int) -> None:
        merge.write(prepare(batch) if prepare else batch, batch_id)

    return write


def committed_batch(spark: SparkSession, path: str, app_id: str) -> int | None:
    """The last batch id Delta recorded for an app id (None: none yet), read from the table's log."""
    log = spark.read.json(f"{path}/_delta_log/*.json")
    if "txn" not in log.columns:
        return None
    rows = log.where(log.txn.appId == app_id).selectExpr("max(txn.version) as v").collect()
    return None if rows[0]["v"] is None else int(rows[0]["v"])
