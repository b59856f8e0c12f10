"""Materialized views that stay exact under updates, deletes and late data: keep the facts, recompute what they touch.

A view row (a page's statistics in one hour, a user's activity) depends on many input records, and a record
can change after the row was written: a click re-emitted under its key, a late click that changes its
predecessor's time on page, a session merged away. Partial sums per batch cannot take anything back, and their
result would depend on the batch boundaries. So a view job keeps the current state of its input in a private
Delta table, the facts (keyed like the input), and each micro-batch:

1. MERGEs the batch's changed facts, each marked with the batch id (`touched_batch`);
2. recomputes, from the facts, every view row that a touched fact counts in (before or after its change) and
   MERGEs those rows into the view, deleting rows that no fact counts in any more;
3. optionally removes retired facts (e.g. deleted sessions) that step 2 has now taken into account.

Each MERGE carries Delta's idempotency marker with its own app id (one per table) and the batch id. When Spark
runs a batch again after a crash, a facts MERGE that had committed is skipped, and step 2 finds the same touched
facts (still marked with this batch id) and computes the same rows: every step is safe to repeat.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from kappa.spark.delta_merge import DeltaMerge
from kappa.spark.side_outputs import SIDE_COLUMNS, SIDE_KIND
from kappa.spark.topic_io import DELETED, DecodedTopic

TOUCHED = "touched_batch"  # facts column: the batch id that last changed the fact
FACTS_SUFFIX = "_facts"


def facts_path(output_path: str) -> str:
    """The private facts table of a view: next to the view's folder (`page_stats/v1` -> `page_stats/v1_facts`),
    so it is versioned with it; not inside it, where Delta would refuse to create the view's table."""
    return f"{output_path}{FACTS_SUFFIX}"


def facts_table(
    output_path: str, keys: tuple[str, ...], app_id: str, partitioned_by: tuple[str, ...] = ()
) -> DeltaMerge:
    """The MERGE into a view's private facts table: its own path and idempotency app id, derived from the view's.

    No Change Data Feed: nobody reads the facts' changes, and it would double what each batch writes.
    `partitioned_by`: a time column that a batch's changes share, so that its MERGE rewrites recent files only
    (unpartitioned, every MERGE rewrote nearly the whole table, and a batch cost more as the history grew).
    """
    return DeltaMerge(
        facts_path(output_path), keys=keys, app_id=f"{app_id}.facts", properties={}, partitioned_by=partitioned_by
    )


def with_tombstones(decoded: DecodedTopic, key: str) -> DataFrame:
    """A compacted topic's changes (batch reads): records with `deleted` false, tombstones with `deleted` true,
    their key in `key` and every value column null. The job's query gets the same rows from the runtime."""
    return changes_with_key(decoded.rows.where(F.col(SIDE_KIND).isNull()).drop(*SIDE_COLUMNS), key)


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


def recompute(
    facts: DataFrame, touched: DataFrame, keys: Sequence[str], aggregate: Callable[[DataFrame], DataFrame]
) -> DataFrame:
    """The view rows of the touched keys (distinct rows of `keys`), recomputed from all their facts.

    A touched key that no fact counts in any more comes back with `deleted` true (its other columns null).
    """
    rows = aggregate(facts.join(touched, list(keys), "left_semi")).withColumn("_present", F.lit(True))
    # one row per touched key
    return touched.join(rows, list(keys), "left").withColumn(DELETED, F.col("_present").isNull()).drop("_present")


@dataclass(frozen=True)
class FactsView:
    """A view kept exact by recomputing, from its private facts table, the rows each batch touches."""

    facts: DeltaMerge  # the private facts table: UPSERT by the input's key, columns incl. TOUCHED
    view: DeltaMerge  # the view: UPSERT by its grain, deletes through DELETED
    facts_schema: str  # DDL of the facts table (incl. TOUCHED), so the first batch can read it empty
    # (this batch's input, the stored facts) -> the facts rows to write (without TOUCHED)
    changes: Callable[[DataFrame, DataFrame], DataFrame]
    groups: Callable[[DataFrame], DataFrame]  # touched facts -> the view keys they count (or counted) in
    aggregate: Callable[[DataFrame], DataFrame]  # the facts of some view keys -> one view row per key
    retired: str | None = None  # SQL condition on facts: retired facts, deleted once the view has seen them

    def write(self, batch: DataFrame, batch_id: int) -> None:
        """foreachBatch's function: facts, then the touched view rows, each at most once per batch id."""
        spark = batch.sparkSession
        self.facts.ensure_table(spark, spark.createDataFrame([], self.facts_schema))
        batch.persist()
        try:
            stored = spark.read.format("delta").load(self.facts.path)
            changed = self.changes(batch, stored).withColumn(TOUCHED, F.lit(batch_id).cast("long"))
            self.facts.write(changed, batch_id)
        finally:
            batch.unpersist()
        facts = spark.read.format("delta").load(self.facts.path)  # as committed, by this run or an earlier one
        touched = self.groups(facts.where(F.col(TOUCHED) == batch_id)).distinct()
        self.view.write(recompute(facts, touched, self.view.keys, self.aggregate), batch_id)
        if self.retired:
            # After the view's MERGE committed: a re-run batch that no longer finds these facts needs them no more.
            DeltaTable.forPath(spark, self.facts.path).delete(f"{TOUCHED} = {batch_id} AND ({self.retired})")
