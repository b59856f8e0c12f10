"""The replay protocol of docs/architecture.md, one function per step; `kappa replay ...` and Dagster call these.

    check      the version is the declared one and not live yet, its output schema is compatible with the
               dataset's, and every input's replay horizon covers the start point
    prepare    the version's own output topic (`<dataset>.v<N>`) or table, checkpoint and consumer group
    catch_up   the version with availableNow from the start point; progress: offsets done and total, events/s,
               time left. Launched again after a kill, it resumes from its checkpoint.
    verify     the dataset's quality suite on the new output, and a reconciliation against the live version
    go_live    the version runs continuously from the checkpoint where catch-up stopped (kappa.lifecycle.deployments)
    cutover    the alias moves atomically (kappa.aliases); refused unless the version passed verify
    rollback   the alias moves back to the version live before
    retire     an old version is stopped and its output, checkpoint and group deleted (never the live one)

Every step appends who, when, from and to (and what it found) to the audit trail `kappa.audit`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from kappa.contracts import compatibility
from kappa.contracts.expectations import suite_for, validate_dataframe
from kappa.contracts.registry import Registry
from kappa.contracts.schema_rollout import apply_schemas
from kappa.contracts.topic_declarations import Cleanup, Topic
from kappa.core.errors import KappaError
from kappa.core.settings import KappaSettings
from kappa.core.waiting import wait_until
from kappa.kafka.aliases import DELTA_KIND, Alias, AliasRegistry, now_ms
from kappa.kafka.clients import admin_client, require_kafka
from kappa.kafka.topic_admin import apply
from kappa.lifecycle import deployments
from kappa.runtime import start_point
from kappa.runtime.binding import (
    REPLAY,
    VersionBinding,
    bind_inputs,
    dataset_of,
    deployment_topics,
    describe_inputs,
    input_versions,
    next_version,
    physical_output,
    point_alias,
    read_topics,
    record_binding,
    recorded_binding,
)
from kappa.runtime.declaration import DeltaTable, JobContext, JobSpec, Starting, version_checkpoints
from kappa.runtime.discovery import discover, get_job
from kappa.spark.session import get_spark

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from kappa.runtime.runner import RunReport

log = logging.getLogger("kappa.replay")
SAMPLES = 5


class ReplayRefusedError(KappaError):
    """A step that must not run: the message says why and what to do."""


@dataclass(frozen=True)
class Replay:
    """One job version against the cluster: what every step works on."""

    job: JobSpec  # as declared
    version: int
    jobs: Mapping[str, JobSpec]  # every declared job (inputs resolve through their writers)
    aliases: Mapping[str, Alias]
    # What the version reads (derived input dataset -> version): recorded by its prepare, given by a cascade;
    # None: the live versions.
    inputs: Mapping[str, int] | None = None
    code_version: int | None = None  # the declared version whose code it runs; None: a version this code lacks

    @property
    def dataset(self) -> str:
        return dataset_of(self.job)

    @property
    def live(self) -> Alias | None:
        return self.aliases.get(self.dataset)

    @property
    def input_versions(self) -> dict[str, int]:
        return dict(self.inputs) if self.inputs is not None else input_versions(self.job, self.jobs, self.aliases)

    @property
    def bound(self) -> JobSpec:
        return bind_inputs(self.job, self.version, self.input_versions)

    def context(self, settings: KappaSettings) -> JobContext:
        """The version's checkpoint, query and group names (no Spark session needed for those)."""
        return JobContext(spark=None, settings=settings, spec=self.bound, version=self.version)  # type: ignore[arg-type]


def load(settings: KappaSettings, job_name: str, version: int | None = None) -> Replay:
    """The version as recorded (what it reads, whose code it runs), else the declared one on the live inputs."""
    job = get_job(job_name)
    version = version or job.version
    recorded = recorded_binding(settings, job_name, version)
    if recorded is not None:
        inputs: dict[str, int] | None = recorded.inputs
        code: int | None = recorded.code_version
    else:
        inputs, code = None, job.version if version == job.version else None
    return Replay(job, version, discover(), AliasRegistry(settings).all(), inputs, code)


# ------------------------------------------------------------------ 1. check ----------------------------


@dataclass(frozen=True)
class Horizon:
    """How far back a topic still holds every record: None means since its first record."""

    topic: str
    since_ms: int | None
    why: str


def replay_horizon(settings: KappaSettings, topic: Topic, now: int | None = None) -> Horizon:
    """The event time from which `topic` is complete (DESIGN: a replay needing older data is refused).

    - Retention deleted records (a partition's log start offset > 0): complete from the first retained record's
      timestamp, the latest such time over the partitions.
    - A compacted entity topic (min.compaction.lag.ms > 0) keeps every version younger than the lag; once the
      cleaner has removed a record (a gap in the offsets), only the lag window is complete.
    - A compacted topic keyed by event id (no lag) loses only duplicates to compaction: complete.
    """
    now = now if now is not None else now_ms()
    consumer = Consumer({"bootstrap.servers": settings.bootstrap, "group.id": "kappa.horizon", "log_level": 0})
    try:
        since: int | None = None
        reasons = []
        gaps = False
        for p in range(topic.partitions):
            tp = TopicPartition(topic.name, p)
            try:
                low, high = consumer.get_watermark_offsets(tp, timeout=10)
            except KafkaException as exc:
                raise KappaError(f"cannot read {topic.name}: {exc} (does it exist? is Kafka up?)") from None
            if low > 0 and high > low:
                first = _first_timestamp(consumer, topic.name, p, low)
                since = first if since is None else max(since, first)
                reasons.append(f"partition {p} starts at offset {low}: retention deleted what came before")
            if topic.cleanup is not Cleanup.DELETE and topic.min_compaction_lag_ms and high > low:
                gaps = gaps or _count(consumer, topic.name, p, low, high) < high - low
        if gaps:
            window = now - topic.min_compaction_lag_ms
            since = window if since is None else max(since, window)
            reasons.append(
                f"compaction removed versions; every version is kept only for min.compaction.lag.ms "
                f"({topic.min_compaction_lag_ms} ms)"
            )
        return Horizon(topic.name, since, "; ".join(reasons) or "every record since the first is retained")
    finally:
        consumer.close()


def _first_timestamp(consumer: Consumer, topic: str, partition: int, offset: int) -> int:
    consumer.assign([TopicPartition(topic, partition, offset)])

    def first_timestamp() -> tuple[int] | None:
        message = consumer.poll(1.0)
        return (int(message.timestamp()[1]),) if message is not None and not message.error() else None

    return wait_until(first_timestamp, 15, f"could not read {topic}[{partition}]@{offset} within 15 s", interval_s=0)[0]


def _count(consumer: Consumer, topic: str, partition: int, low: int, high: int) -> int:
    """Records actually present in [low, high): fewer than high - low means the cleaner removed some."""
    consumer.assign([TopicPartition(topic, partition, low)])
    seen = 0
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        # A short wait: consume() waits out its whole timeout unless it fills the batch, which the last batch of
        # a partition never does (a full second per partition, measured).
        batch = consumer.consume(10_000, 0.05)
        seen += sum(1 for m in batch if not m.error())
        if consumer.position([TopicPartition(topic, partition)])[0].offset >= high:
            return seen
    raise KappaError(f"could not scan {topic}[{partition}] within 120 s")


def _iso(ms: int) -> str:
    return Starting(offsets="timestamp", timestamp_ms=ms).text  # as --from takes it


def check(settings: KappaSettings, replay: Replay, starting: Starting) -> dict[str, Any]:
    """Refuse (ReplayRefusedError) a replay that must not run; return what was checked."""
    job, version, live = replay.job, replay.version, replay.live
    if replay.code_version is None:
        raise ReplayRefusedError(
            f"{job.name} v{version} is not declared: jobs/{job.name}/declaration.py declares v{job.version}. "
            "A logic change bumps `version` there, and the replay deploys the declared version."
        )
    if replay.code_version != job.version:
        raise ReplayRefusedError(
            f"{job.name} v{version} exists already and runs the code of v{replay.code_version} (made by a cascade "
            f"replay): declare v{next_version(settings, job)} in jobs/{job.name}/declaration.py for the new logic"
        )
    if live is not None and live.version == version:
        raise ReplayRefusedError(f"{job.name} v{version} is already live for {replay.dataset}: nothing to replay")
    if live is not None and live.version > version:
        raise ReplayRefusedError(
            f"{replay.dataset} is live at v{live.version}, newer than v{version}: "
            f"go back with `kappa replay rollback {job.name}`, not a replay"
        )
    try:  # a relaunch resumes from the checkpoint, so it must ask for the start point the checkpoint began with
        start_point.refuse_another(version_checkpoints(settings, job.name, version), job.name, version, starting)
    except start_point.StartPointError as exc:
        raise ReplayRefusedError(str(exc)) from None
    found: dict[str, Any] = {"start": starting.offsets, "start_ms": starting.timestamp_ms}
    found["schema"] = _check_schema(settings, replay.bound)
    horizons = {}
    for topic in replay.bound.inputs:
        horizon = replay_horizon(settings, topic)
        horizons[topic.name] = horizon.since_ms
        if horizon.since_ms is None:
            continue
        if starting.offsets == "earliest":
            raise ReplayRefusedError(
                f"{job.name}: the replay would start at the earliest record of {topic.name}, but that topic is "
                f"complete only since {_iso(horizon.since_ms)} ({horizon.why}). Replaying from there would "
                f"compute on partial data. Start at --from {_iso(horizon.since_ms)} or later."
            )
        if starting.offsets == "timestamp" and (starting.timestamp_ms or 0) < horizon.since_ms:
            raise ReplayRefusedError(
                f"{job.name}: --from {_iso(starting.timestamp_ms or 0)} is older than the replay horizon of "
                f"{topic.name}, {_iso(horizon.since_ms)} ({horizon.why}). Start at --from "
                f"{_iso(horizon.since_ms)} or later."
            )
    found["horizons"] = {t: (_iso(h) if h is not None else "complete") for t, h in horizons.items()}
    return found


def _check_schema(settings: KappaSettings, bound: JobSpec) -> str:
    """The output's value schema must be compatible with what the dataset's readers decode (its subject)."""
    output = bound.output
    if not isinstance(output, Topic) or not output.value_schema:
        return "a Delta table: each version has its own table"
    # Lazy: imports pyspark, only where a Spark session runs (this module is imported without one).
    from kappa.spark.topic_io import value_schema

    schema = value_schema(settings, output)
    with Registry(settings.registry) as registry:
        registered = registry.versions(output.value_subject)
        if not registered:
            return f"{output.value_subject}: first schema"
        if registry.lookup(output.value_subject, schema) is not None:
            return f"{output.value_subject}: already registered"
        compatible = registry.test_compatibility(output.value_subject, schema)
    if not compatible:
        # The registry's verdict, with the field and the rule it breaks (the offline check's reasons).
        reasons = [str(r) for r in compatibility.check(schema, [r.schema for r in registered], output.compatibility)]
        raise ReplayRefusedError(
            f"schemas/{output.value_schema} is not compatible with {output.value_subject} "
            f"({output.compatibility.value}): {'; '.join(reasons) or 'the registry says no'}. Readers of "
            f"{bound.output.name} follow the alias across versions, so a breaking change needs a new dataset."
        )
    return f"{output.value_subject}: compatible, registered at prepare"


# ------------------------------------------------------------------ 2. prepare --------------------------


def prepare(settings: KappaSettings, replay: Replay) -> dict[str, Any]:
    """The version's topics exist and its output schema is registered; checkpoint and group are its own."""

    bound = replay.bound
    binding = VersionBinding.of(bound, replay.job.version, REPLAY)
    recorded = record_binding(settings, replay.job.name, replay.version, binding)  # what the version is, for good
    if recorded != binding:
        raise ReplayRefusedError(
            f"{replay.job.name} v{replay.version} was prepared reading {describe_inputs(recorded.inputs)}, not "
            f"{describe_inputs(binding.inputs)}: a version reads what it was made on. Replay the new inputs as a new "
            f"version, or retire v{replay.version} first"
        )
    created = [c.topic for c in apply(require_kafka(settings), deployment_topics(bound)) if c.kind == "created"]
    if isinstance(bound.output, Topic) and bound.output.value_schema:
        apply_schemas(settings.schemas_path, [bound.output], settings.registry)
    ctx = replay.context(settings)
    return {
        "output": physical_output(replay.job, settings, replay.version)[1],
        "created_topics": created,
        "checkpoint": ctx.checkpoint(),
        "consumer_group": ctx.consumer_group,
        "resuming": Path(ctx.checkpoint(), "commits").is_dir(),
    }


# ------------------------------------------------------------------ 3. catch-up -------------------------


@contextmanager
def exclusive_catch_up(settings: KappaSettings, replay: Replay) -> Iterator[None]:
    """One writer per checkpoint: refuse a catch-up while the version is deployed to run continuously (after
    go-live, even if it has just crashed: the sensor would restart it) or while anything else runs it (another
    launch of the same replay, a `kappa jobs run`). A killed catch-up's lock goes with it: a relaunch resumes."""

    job, version = replay.job.name, replay.version
    deployment = deployments.load(settings, job, version)
    if deployment is not None and deployment.desired == "running":
        health = deployments.state_of(deployment).health.value
        raise ReplayRefusedError(
            f"{job} v{version} is deployed to run continuously ({health}, pid {deployment.pid}): its checkpoint "
            f"is in use. Verify it with `kappa replay verify {job}`, or `kappa jobs stop {job} --version "
            f"{version}` first to catch up again."
        )
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(
                deployments.checkpoint_lock(settings, job, version, "the catch-up of `kappa replay start`")
            )
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
    consumer = Consumer({"bootstrap.servers": settings.bootstrap, "group.id": "kappa.progress", "log_level": 0})
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


# ------------------------------------------------------------------ 4. verify ---------------------------


@dataclass(frozen=True)
class Verification:
    passed: bool
    quality: dict[str, Any]
    reconciliation: dict[str, Any]
    problems: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "quality": self.quality,
            "reconciliation": self.reconciliation,
            "problems": list(self.problems),
        }


def read_output(
    spark: SparkSession, settings: KappaSettings, job: JobSpec, version: int, *, as_of_ms: int | None = None
) -> DataFrame:
    """One version's output as readers see it: a topic's latest value per key, or the Delta table. With
    `as_of_ms`, as it was then: the records written until then, or the table's last commit by then."""
    if isinstance(job.output, DeltaTable):
        path = job.output.path(settings, version)
        reader = spark.read.format("delta")
        if as_of_ms is not None and (commit := commit_as_of(spark, path, as_of_ms)) is not None:
            reader = reader.option("versionAsOf", commit)
        return reader.load(path)
    # Lazy: imports pyspark, only where a Spark session runs (this module is imported without one).
    from kappa.spark.compacted import latest_per_key

    return latest_per_key(spark, settings, job.output.versioned(version), written_until_ms=as_of_ms).drop(
        "kafka_partition", "kafka_offset", "kafka_timestamp"
    )


def commit_as_of(spark: SparkSession, path: str, at_ms: int) -> int | None:
    """The table's latest version committed by `at_ms` (Delta's timestampAsOf refuses a time after the last
    commit, so the history decides); None if it had none then."""
    # Lazy: pyspark, only where a Spark session runs (this module is imported without one).
    from delta.tables import DeltaTable as Delta
    from pyspark.sql import functions as F

    history = Delta.forPath(spark, path).history().where(F.col("timestamp") <= F.timestamp_millis(F.lit(at_ms)))
    found = history.agg(F.max("version")).first()
    return None if found is None or found[0] is None else int(found[0])


def reconcile(new: DataFrame, live: DataFrame, keys: list[str]) -> dict[str, Any]:
    """Counts and key-level differences between two versions' outputs, with samples of each kind.

    One full outer join, kept in memory, and one aggregation for every count: each output is read once."""
    # Lazy: pyspark, only where a Spark session runs (this module is imported without one).
    from pyspark.sql import functions as F

    values = [c for c in new.columns if c not in keys and c in live.columns]
    n = new.withColumn("_in", F.lit(True)).alias("n")
    o = live.withColumn("_in", F.lit(True)).alias("o")
    in_new, in_live = F.col("n._in").isNotNull(), F.col("o._in").isNotNull()
    differs = F.lit(False)
    for c in values:
        differs = differs | ~F.col(f"n.{c}").eqNullSafe(F.col(f"o.{c}"))
    joined = (
        n.join(o, on=[F.col(f"n.{k}").eqNullSafe(F.col(f"o.{k}")) for k in keys], how="full_outer")
        .select(
            in_new.alias("in_new"),
            in_live.alias("in_live"),
            (in_new & in_live & differs).alias("changed"),
            *[F.coalesce(F.col(f"n.{k}"), F.col(f"o.{k}")).alias(k) for k in keys],
            *[F.struct(F.col(f"o.{c}").alias("live"), F.col(f"n.{c}").alias("new")).alias(c) for c in values],
        )
        .persist()
    )
    try:
        counts = joined.agg(
            F.count(F.when(F.col("in_new"), 1)).alias("rows_new"),
            F.count(F.when(F.col("in_live"), 1)).alias("rows_live"),
            F.count(F.when(F.col("in_new") & ~F.col("in_live"), 1)).alias("only_in_new"),
            F.count(F.when(F.col("in_live") & ~F.col("in_new"), 1)).alias("only_in_live"),
            F.count(F.when(F.col("changed"), 1)).alias("changed"),
        ).first()
        assert counts is not None

        def sample(where: Any, side: str) -> list[dict[str, Any]]:
            rows = joined.where(where).select(*keys, *[F.col(f"{c}.{side}").alias(c) for c in values])
            return [r.asDict(recursive=True) for r in rows.limit(SAMPLES).collect()]

        changed = [
            {**{k: r[k] for k in keys}, **{c: r[c].asDict() for c in values if r[c]["live"] != r[c]["new"]}}
            for r in joined.where(F.col("changed")).limit(SAMPLES).collect()
        ]
        return {
            "keys": keys,
            **{name: int(counts[name]) for name in ("rows_new", "rows_live", "only_in_new", "only_in_live", "changed")},
            "samples": {
                "only_in_new": sample(F.col("in_new") & ~F.col("in_live"), "new"),
                "only_in_live": sample(F.col("in_live") & ~F.col("in_new"), "live"),
                "changed": changed,
            },
        }
    finally:
        joined.unpersist()


def output_keys(job: JobSpec, frame: DataFrame) -> list[str]:
    """What identifies a row of the output: a topic's Kafka key, a view's declared keys (else every column)."""
    if not isinstance(job.output, DeltaTable):
        return ["key"]
    return list(job.output.keys) or list(frame.columns)


def catch_up_started_ms(registry: AliasRegistry, replay: Replay) -> int | None:
    """When the version's last catch-up launch started (before its input ends were fixed), from the audit."""
    launches = [
        s.facts["started_ms"]
        for s in registry.steps(replay.job.name)
        if s.step == "catch-up"
        and s.to_version == replay.version
        and s.facts.get("dataset") == replay.dataset
        and isinstance(s.facts.get("started_ms"), int)
    ]
    return launches[-1] if launches else None


def verify(settings: KappaSettings, replay: Replay) -> Verification:
    """The quality suite on the new output, and its reconciliation against the live version."""

    log.info("verifying %s v%d: the quality suite, then the reconciliation", replay.job.name, replay.version)
    spark = get_spark(settings, f"kappa-verify-{replay.job.name}")
    new = read_output(spark, settings, replay.job, replay.version).persist()  # the suite and the join read it
    try:
        return _verify(settings, replay, new)
    finally:
        new.unpersist()


def _verify(settings: KappaSettings, replay: Replay, new: DataFrame) -> Verification:
    problems: list[str] = []
    quality = _quality(settings, replay, new)
    if not quality.get("success", True):
        problems.append(f"the quality suite {quality.get('suite')} failed: {quality.get('failed')}")
    live = replay.live
    if live is None:
        reconciliation: dict[str, Any] = {"against": None, "note": "nothing live yet: this is the first version"}
    else:
        # The live version keeps processing while the new one catches up to the input ends it saw at its start:
        # compare with the live output as it was then, or keys the live version wrote since would count as lost.
        as_of = catch_up_started_ms(AliasRegistry(settings), replay)
        old = read_output(new.sparkSession, settings, replay.job, live.version, as_of_ms=as_of)
        against = f"v{live.version}" + (f" as of {_iso(as_of)} (the catch-up's start)" if as_of else "")
        reconciliation = {"against": against} | reconcile(new, old, output_keys(replay.job, new))
        if reconciliation["only_in_live"]:
            problems.append(
                f"{reconciliation['only_in_live']} key(s) of the live v{live.version} are missing from "
                f"v{replay.version} (samples in the report)"
            )
    return Verification(not problems, quality, reconciliation, tuple(problems))


def _quality(settings: KappaSettings, replay: Replay, frame: DataFrame) -> dict[str, Any]:
    """The output's expectation suite on the whole output (none kept for it: nothing to run)."""

    output = replay.job.output
    name = output.dataset_name if isinstance(output, Topic) else output.name  # a table's suite is its name
    suite = suite_for(settings, name)
    if suite is None:
        return {"suite": None, "note": f"no expectation suite kept for {name}"}
    result: dict[str, Any] = validate_dataframe(frame, suite).as_dict()
    return result


# ------------------------------------------------------------------ 5-8. go live, cut over, roll back, retire


def verified(registry: AliasRegistry, job: str, version: int, dataset: str) -> bool:
    """Did the latest verification of this version of the dataset pass?"""
    outcomes = [
        s.outcome
        for s in registry.steps(job)
        if s.step == "verify" and s.to_version == version and s.facts.get("dataset") == dataset
    ]
    return bool(outcomes) and outcomes[-1] == "ok"


def running(settings: KappaSettings, job: str, version: int) -> bool:
    deployment = deployments.load(settings, job, version)
    return deployment is not None and deployment.desired == "running" and deployments.is_running(deployment)


def require_running(settings: KappaSettings, job: str, version: int, doing: str) -> None:
    if not running(settings, job, version):
        raise ReplayRefusedError(
            f"{job} v{version} is not running: {doing} would point readers at a version nobody updates. "
            f"Start it first: `kappa replay golive {job} --version {version}`"
        )


def require_caught_up(settings: KappaSettings, job: str, version: int) -> int:
    behind = deployments.lag(settings, job, version).total
    if behind > settings.cutover_max_lag:
        raise ReplayRefusedError(
            f"{job} v{version} is {behind:,} records behind its inputs, more than the cutover allows "
            f"({settings.cutover_max_lag:,}, KAPPA_CUTOVER_MAX_LAG): let it catch up (`kappa jobs status`), then "
            "cut over"
        )
    return behind


def cutover(settings: KappaSettings, replay: Replay, *, by: str | None = None, force: bool = False) -> Alias:
    registry = AliasRegistry(settings)
    live = replay.live
    if live is not None and live.version == replay.version:
        raise ReplayRefusedError(f"{replay.dataset} already points at v{replay.version}")
    if not force and not verified(registry, replay.job.name, replay.version, replay.dataset):
        raise ReplayRefusedError(
            f"{replay.job.name} v{replay.version} has not passed verification: run "
            f"`kappa replay verify {replay.job.name} --version {replay.version}` (or `replay start`) first"
        )
    require_running(settings, replay.job.name, replay.version, "the cutover")
    require_caught_up(settings, replay.job.name, replay.version)
    reason = "cutover" + (" (forced past verification)" if force else "")
    expected = live.version if live else None
    return point_alias(settings, registry, replay.job, replay.version, expected=expected, reason=reason, by=by)


def rollback(settings: KappaSettings, replay: Replay, *, by: str | None = None) -> Alias:
    live = replay.live
    if live is None or live.previous_version is None:
        raise ReplayRefusedError(f"{replay.dataset} has no earlier version to roll back to")
    back = live.previous_version
    if live.reason.startswith("rollback"):  # a second rollback would undo the first, unverified
        raise ReplayRefusedError(
            f"{replay.dataset} is at v{live.version} by a rollback from v{back}: nothing earlier to roll back to. "
            f"To return to v{back}, cut over to it (`kappa replay cutover {replay.job.name} --version {back}`), "
            "which needs its verification to have passed"
        )
    if not output_exists(settings, replay.job, back):
        raise ReplayRefusedError(f"{replay.job.name} v{back} was retired: its output is gone; replay it instead")
    require_running(settings, replay.job.name, back, "the rollback")
    reason = f"rollback from v{live.version}"
    return point_alias(settings, AliasRegistry(settings), replay.job, back, expected=live.version, reason=reason, by=by)


def output_exists(settings: KappaSettings, job: JobSpec, version: int) -> bool:
    kind, physical = physical_output(job, settings, version)
    if kind == DELTA_KIND:
        return Path(physical.removeprefix("file:"), "_delta_log").is_dir()

    return physical in admin_client(settings).list_topics(timeout=15).topics


def retire(settings: KappaSettings, replay: Replay) -> dict[str, Any]:
    """Stop the version and delete its output, side topic, checkpoint and consumer group."""
    live = replay.live
    if live is not None and live.version == replay.version:
        raise ReplayRefusedError(
            f"{replay.job.name} v{replay.version} is live for {replay.dataset}: cut over to another version first"
        )

    output = physical_output(replay.job, settings, replay.version)[1]
    readers = []  # a Delta output is read by no job: only a topic can be another running version's input
    for d in (s.deployment for s in deployments.status(settings) if s.health is deployments.Health.RUNNING):
        try:
            reads = read_topics(settings, d.job, d.version)
        except KappaError as exc:
            raise ReplayRefusedError(
                f"cannot tell whether {d.job} v{d.version}, which runs, reads {output} ({exc}): stop it first "
                f"(`kappa jobs stop {d.job} --version {d.version}`)"
            ) from None
        if output in reads:
            readers.append(f"{d.job} v{d.version}")
    if readers:
        raise ReplayRefusedError(
            f"{', '.join(readers)} read {output} and run: retiring it would pull their input from under them. "
            "Cut them over to versions that read the new one (`kappa replay start <changed job> --downstream`), "
            "roll them over, and stop or retire them first"
        )
    stopped = deployments.stop_if_running(settings, replay.job.name, replay.version)
    with deployments.checkpoint_lock(settings, replay.job.name, replay.version, "a retire"):  # refused while in use
        deleted = _delete_version(settings, replay)
    checkpoints = version_checkpoints(settings, replay.job.name, replay.version)
    return {"stopped": stopped, "deleted": deleted, "checkpoint": checkpoints}


def _delete_version(settings: KappaSettings, replay: Replay) -> list[str]:
    """The version's output, side topic, checkpoint and consumer group."""

    ctx = replay.context(settings)
    admin = admin_client(settings)
    deleted: list[str] = []
    if isinstance(replay.bound.output, Topic):
        names = [t.name for t in deployment_topics(replay.bound)[:2]]  # the output and its .late topic
        existing = admin.list_topics(timeout=15).topics
        for name, future in admin.delete_topics([n for n in names if n in existing], operation_timeout=30).items():
            future.result(timeout=30)
            deleted.append(name)
    else:
        # Lazy: imports pyspark, only where a Spark session runs (this module is imported without one).
        from kappa.spark.delta_merge import forget_table

        table = physical_output(replay.job, settings, replay.version)[1]
        if Path(table.removeprefix("file:")).exists():
            shutil.rmtree(table.removeprefix("file:"))
            forget_table(table)
            deleted.append(table)
    # Every query's checkpoint, and the start point the version was pinned to (kappa.runtime.start_point).
    checkpoints = version_checkpoints(settings, replay.job.name, replay.version)
    shutil.rmtree(checkpoints.removeprefix("file:"), ignore_errors=True)
    try:
        for future in admin.delete_consumer_groups([ctx.consumer_group], request_timeout=15).values():
            future.result(timeout=15)
    except KafkaException as exc:
        log.info("group %s: %s", ctx.consumer_group, exc)  # no group recorded yet: nothing to delete
    return deleted


def as_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)
