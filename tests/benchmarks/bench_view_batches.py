"""A Delta view's cost per live batch: page_stats' FactsView.write on small batches after a long history.

No Kafka: the batches are decoded enriched clicks made here (500 users, a click every 20 s each, 37 pages), so
the figure is the view's own work (facts MERGE, recomputation, view MERGE), without the source.

1. Per history size (`--history`), write that many clicks as batch 0, then `--batches` batches of `--batch`
   clicks that follow in time, as a live job sees them.
2. Variants, alternated within each round: as deployed; Delta's state rebuilt in 4 tasks instead of the
   setting's (`delta_snapshot_partitions`); the click facts unpartitioned (before the hourly layout).
3. Per variant, the mean of the batches after the first two (warm), best of `--rounds`, and the Janino
   compilations per batch (misses of Spark's compiled-class cache, `--codegen-cache-entries`).

Batch ids only increase across variants and rounds, as in production: the batch id is a literal in generated
code, so a repeated id would find its classes cached and flatter the figure.

The README's "views' batches, profiled" table comes from this benchmark.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from jobs.page_stats.declaration import view
from kappa.core.settings import load_settings
from kappa.spark.delta_views import FactsView
from kappa.spark.session import get_spark
from tests.benchmarks.common import report, timed

USERS = 500
PAGES = 37
STEP = timedelta(seconds=20)  # between a user's clicks
GAP_MS = 30 * 60_000
ENRICHED = (
    "key string, event_id string, user_id string, page string, event_time timestamp, segment string, "
    "kafka_partition int, kafka_offset long"
)
SNAPSHOT_PARTITIONS = "spark.databricks.delta.snapshotPartitions"


def clicks(spark: SparkSession, first: int, count: int) -> DataFrame:
    """Clicks number `first` to `first + count - 1`, cached: each batch's input costs nothing to read again."""
    start = datetime(2026, 1, 1, tzinfo=UTC)
    rows = []
    for i in range(first, first + count):
        event_id = uuid.uuid4().hex
        rows.append((event_id, event_id, f"u{i % USERS}", f"/p{i % PAGES}", start + STEP * (i // USERS), "FREE", 0, i))
    frame = spark.createDataFrame(rows, ENRICHED).cache()
    frame.count()
    return frame


def as_deployed(stats: FactsView) -> FactsView:
    return stats


def unpartitioned_facts(stats: FactsView) -> FactsView:
    return dataclasses.replace(stats, facts=dataclasses.replace(stats.facts, partitioned_by=()))


# name -> (the view as the variant builds it, Spark conf set while it runs)
VARIANTS: dict[str, tuple[Callable[[FactsView], FactsView], dict[str, str]]] = {
    "as deployed": (as_deployed, {}),
    "snapshot in 4 tasks": (as_deployed, {SNAPSHOT_PARTITIONS: "4"}),
    "facts unpartitioned": (unpartitioned_facts, {}),
}


def compilations(spark: SparkSession) -> int:
    """Janino compilations of generated code so far in this JVM (each a miss of Spark's compiled-class cache)."""
    return int(spark._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME().getCount())  # type: ignore[union-attr]


def run_variant(
    spark: SparkSession, folder: Path, name: str, batches: list[DataFrame], batch_ids: Iterator[int]
) -> tuple[float, float]:
    """Mean seconds and compilations of the warm batches (all but the history and the first two after it)."""
    build, conf = VARIANTS[name]
    saved = {key: spark.conf.get(key) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        stats = build(view(str(folder / uuid.uuid4().hex / "page_stats"), "page_stats.bench", GAP_MS))
        stats.write(batches[0], next(batch_ids))
        seconds, compiled = [], []
        for batch in batches[1:]:
            before = compilations(spark)
            batch_id = next(batch_ids)
            seconds.append(timed(lambda b=batch, i=batch_id: stats.write(b, i)))
            compiled.append(compilations(spark) - before)
    finally:
        for key, value in saved.items():
            spark.conf.set(key, value)
    warm = slice(2, None) if len(seconds) > 2 else slice(None)
    return sum(seconds[warm]) / len(seconds[warm]), sum(compiled[warm]) / len(compiled[warm])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--history", default="20000,400000", help="clicks written before the measured batches")
    parser.add_argument("--batch", type=int, default=500, help="clicks per measured batch")
    parser.add_argument("--batches", type=int, default=6, help="measured batches per variant (the first two warm)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of all variants; the best counts")
    parser.add_argument(
        "--codegen-cache-entries", type=int, default=None, help="Spark's compiled-class cache (default: the setting)"
    )
    args = parser.parse_args()
    settings = load_settings()
    if args.codegen_cache_entries:
        settings = settings.model_copy(update={"spark_codegen_cache_entries": args.codegen_cache_entries})
    spark = get_spark(settings, "bench-view-batches")
    folder = Path(tempfile.mkdtemp(prefix="bench-view-batches-"))
    rows = []
    batch_ids = itertools.count()
    try:
        for history in (int(h) for h in args.history.split(",")):
            batches = [clicks(spark, 0, history)]
            batches += [clicks(spark, history + k * args.batch, args.batch) for k in range(args.batches)]
            best: dict[str, tuple[float, float]] = {}
            for _ in range(args.rounds):
                for name in VARIANTS:
                    seconds, compiled = run_variant(spark, folder, name, batches, batch_ids)
                    best[name] = min(best.get(name, (seconds, compiled)), (seconds, compiled))
                    print(f"history {history:,}: {name} {seconds:.2f} s, {compiled:.0f} compilations per batch",
                          flush=True)  # fmt: skip
            for batch in batches:
                batch.unpersist()
            rows += [
                {"history": history, "batch": args.batch, "variant": name, "seconds_per_batch": round(s, 2),
                 "compilations_per_batch": round(c), "codegen_cache_entries": settings.spark_codegen_cache_entries}
                for name, (s, c) in best.items()
            ]  # fmt: skip
    finally:
        spark.stop()
        shutil.rmtree(folder, ignore_errors=True)
    report("view_batches", rows)


if __name__ == "__main__":
    main()
