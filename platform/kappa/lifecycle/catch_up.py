"""Step 3 of the replay protocol: the catch-up, one writer per checkpoint, with its progress (offsets done and
total, events/s, time left)."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, TopicPartition

from kappa.core.errors import KappaError
from kappa.core.security import librdkafka_config
from kappa.core.settings import KappaSettings
from kappa.lifecycle import deployments
from kappa.lifecycle.model import Replay, ReplayRefusedError
from kappa.lifecycle.state_files import checkpoint_lock, load
from kappa.runtime.declaration import Starting

if TYPE_CHECKING:
    from kappa.runtime.runner import RunReport

log = logging.getLogger("kappa.replay")


@contextmanager
def exclusive_catch_up(settings: KappaSettings, replay: Replay) -> Iterator[None]:
    """One writer per checkpoint: refuse a catch-up while the version is deployed to run continuously (after
    go-live, even if it has just crashed: the sensor would restart it) or while anything else runs it (another
    launch of the same replay, a `kappa jobs run`). A killed catch-up's lock goes with it: a relaunch resumes."""

    job, version = replay.job.name, replay.version
    deployment = load(settings, job, version)
    if deployment is not None and deployment.desired == "running":
        health = deployments.state_of(deployment).health.value
        raise ReplayRefusedError(
            f"{job} v{version} is deployed to run continuously ({health}, pid {deployment.pid}): its checkpoint "
            f"is in use. Verify it with `kappa replay verify {job}`, or `kappa jobs stop {job} --version "
            f"{version}` first to catch up again."
        )
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(checkpoint_lock(settings, job, version, "the catch-up of `kappa replay start`"))
        except KappaError as exc:
            raise ReplayRefusedError(f"{exc}: wait for it, or stop it and launch the replay again to resume") from None
        yield


@dataclass
class Progress:
    """Offsets a catch-up has to read and has read, per input partition."""

    start: dict[tuple[str, int], int]
    end: dict[tuple[str, int], int]
    began: float = field(default_factory=time.monotonic)
    reached: dict[tuple[str, int], int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(max(0, self.end[k] - self.start.get(k, 0)) for k in self.end)

    @property
    def done(self) -> int:
        return sum(
            max(0, min(self.reached.get(k, self.start.get(k, 0)), self.end[k]) - self.start.get(k, 0)) for k in self.end
        )

    def update(self, batch_end: Mapping[str, Mapping[int, int]]) -> None:
        for topic, partitions in batch_end.items():
            for partition, offset in partitions.items():
                self.reached[(topic, partition)] = offset

    def report(self) -> dict[str, Any]:
        elapsed = max(time.monotonic() - self.began, 1e-9)
        rate = self.done / elapsed
        left = (self.total - self.done) / rate if rate > 0 else None
        return {
            "offsets_done": self.done,
            "offsets_total": self.total,
            "percent": round(100.0 * self.done / self.total, 1) if self.total else 100.0,
            "events_per_second": round(rate),
            "seconds_left": round(left, 1) if left is not None else None,
            "elapsed_seconds": round(elapsed, 1),
        }


def describe_progress(job: str, version: int, report: Mapping[str, Any]) -> str:
    left = report["seconds_left"]
    return (
        f"catch-up {job} v{version}: {report['offsets_done']:,}/{report['offsets_total']:,} offsets "
        f"({report['percent']}%), {report['events_per_second']:,} events/s, "
        f"{'-' if left is None else f'{left:.0f} s'} left"
    )


def catch_up_progress(settings: KappaSettings, replay: Replay, starting: Starting) -> Progress:
    """Where the catch-up starts (its checkpoint if resuming, else the start point) and the inputs' ends now."""
    # Lazy: imports pyspark, only where a Spark session runs (this module is imported without one).
    from kappa.runtime.progress import checkpoint_offsets

    bound = replay.bound
    resumed = checkpoint_offsets(replay.context(settings).checkpoint())
    consumer = Consumer({**librdkafka_config(settings), "group.id": "kappa.progress", "log_level": 0})
    start: dict[tuple[str, int], int] = {}
    end: dict[tuple[str, int], int] = {}
    try:
        for topic in bound.inputs:
            partitions = [TopicPartition(topic.name, p) for p in range(topic.partitions)]
            if starting.offsets == "timestamp" and not resumed:
                wanted = [TopicPartition(topic.name, p, starting.timestamp_ms or 0) for p in range(topic.partitions)]
                found = {tp.partition: tp.offset for tp in consumer.offsets_for_times(wanted, timeout=15)}
            for tp in partitions:
                low, high = consumer.get_watermark_offsets(tp, timeout=10)
                key = (topic.name, tp.partition)
                end[key] = high
                if topic.name in resumed and tp.partition in resumed[topic.name]:
                    start[key] = resumed[topic.name][tp.partition]
                elif starting.offsets == "timestamp":
                    start[key] = found[tp.partition] if found[tp.partition] >= 0 else high
                elif starting.offsets == "latest":
                    start[key] = high
                else:
                    start[key] = low
    finally:
        consumer.close()
    return Progress(start, end)


def catch_up(
    settings: KappaSettings,
    replay: Replay,
    starting: Starting,
    *,
    max_offsets_per_trigger: int | None = None,
    on_progress: Callable[[dict[str, Any]], None] | None = None,
) -> RunReport:
    """Run the version with availableNow from the start point (or its checkpoint), reporting progress."""
    # Lazy: imports pyspark, only where a Spark session runs (this module is imported without one).
    from kappa.runtime.progress import end_offsets
    from kappa.runtime.runner import run_job

    progress = catch_up_progress(settings, replay, starting)
    output_query = replay.context(settings).query_name()
    log.info(describe_progress(replay.job.name, replay.version, progress.report()))

    def on_batch(batch: dict[str, Any]) -> None:
        if batch.get("name") != output_query:
            return  # not this version's query
        progress.update(end_offsets(batch))
        report = progress.report()
        log.info(describe_progress(replay.job.name, replay.version, report))
        if on_progress is not None:
            on_progress(report | {"batch": batch.get("batchId"), "rows": batch.get("numInputRows", 0)})

    return run_job(
        replay.bound,
        settings,
        version=replay.version,
        available_now=True,
        starting=starting,
        max_offsets_per_trigger=max_offsets_per_trigger,
        on_batch=on_batch,
    )
