"""A Delta view's cost per live batch: page_stats' FactsView.write on small batches after a long history.

No Kafka: the batches are decoded enriched clicks made here (500 users, a click every 20 s each, 37 pages), so
the figure is the view's own work (facts MERGE, recomputation, view MERGE), without the source.

1. Per history size (`--history`), write that many clicks as batch 0, then `--batches` batches of `--batch`
   clicks that follow in time, as a live job sees them.
2. Variants, alternated within each round: as deployed; Delta's state rebuilt in 4 tasks instead of the
   setting's (`delta_snapshot_partitions`); the click facts unpartitioned (before the hourly layout).
3. Per variant, the mean of the batches after the first two (warm), best of `--rounds`.

The README's "views' batches, profiled" table comes from this benchmark.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import tempfile
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from jobs.page_stats.declaration import view
from kappa.delta_views import FactsView
from kappa.settings import load_settings
from kappa.spark import get_spark
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


def run_variant(spark: SparkSession, folder: Path, name: str, batches: list[DataFrame]) -> float:
    """Mean seconds of the warm batches (all but batch 0 and the first two after it)."""
    build, conf = VARIANTS[name]
    saved = {key: spark.conf.get(key) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        stats = build(view(str(folder / uuid.uuid4().hex / "page_stats"), "page_stats.bench", GAP_MS))
        stats.write(batches[0], 0)
        seconds = [timed(lambda b=b, i=i: stats.write(b, i)) for i, b in enumerate(batches[1:], start=1)]
    finally:
        for key, value in saved.items():
            spark.conf.set(key, value)
    warm = seconds[2:] or seconds
    return sum(warm) / len(warm)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--history", default="20000,400000", help="clicks written before the measured batches")
    parser.add_argument("--batch", type=int, default=500, help="clicks per measured batch")
    parser.add_argument("--batches", type=int, default=6, help="measured batches per variant (the first two warm)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of all variants; the best counts")
    args = parser.parse_args()
    spark = get_spark(load_settings(), "bench-view-batches")
    folder = Path(tempfile.mkdtemp(prefix="bench-view-batches-"))
    rows = []
    try:
        for history in (int(h) for h in args.history.split(",")):
            batches = [clicks(spark, 0, history)]
            batches += [clicks(spark, history + k * args.batch, args.batch) for k in range(args.batches)]
            best: dict[str, float] = {}
            for _ in range(args.rounds):
                for name in VARIANTS:
                    seconds = run_variant(spark, folder, name, batches)
                    best[name] = min(best.get(name, seconds), seconds)
                    print(f"history {history:,}: {name} {seconds:.2f} s per batch", flush=True)
            for batch in batches:
                batch.unpersist()
            rows += [
                {"history": history, "batch": args.batch, "variant": name, "seconds_per_batch": round(s, 2)}
                for name, s in best.items()
            ]
    finally:
        spark.stop()
        shutil.rmtree(folder, ignore_errors=True)
    report("view_batches", rows)


if __name__ == "__main__":
    main()
