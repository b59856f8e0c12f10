"""The pipeline's jobs: replay throughput, the raw ceiling beside it, and what limits them.

1. Load: the catalog's topics and schemas, then the seeded clickstream (`--events` clicks of `--users` users)
   into `clicks` and `user_profiles`, as fast as the Python producer goes (its rate is reported). `--reuse`
   keeps the bench stack running afterwards and, next time, reuses the topics when a stamp in the stack folder
   says they hold exactly this seed/events/users and the end offsets still match.
2. Raw ceiling: Kafka's own `ConsumerPerformance` reading all of `clicks`.
3. Replay throughput of every discovered job, in pipeline order (a job runs once its input topics were
   produced; a job whose inputs are empty is skipped and said so): `run_job(available_now=True)` with fresh
   checkpoints, beside Spark reading and decoding the same inputs into the no-op sink, and a pass-through
   (decode, encode, write back to Kafka: the job's I/O without its logic), to which each job is a ratio.
   The per-user rules of enrich_clicks and sessionize run in the JVM (kappa.operators); py-spy samples
   whatever Python the Spark workers still run.
(The live pipeline is `bench_live.py`, deployed as a user deploys it.)

Events per second are whole-machine figures; per core divides by `os.cpu_count()`. The Spark session runs on
`--spark-master` (default KAPPA_SPARK_MASTER, local[*]), or with `--spark-workers N` on N standalone workers the
bench stack starts (`--spark-worker-cores`, 1 each; the driver stays in this process, the tasks run in one
executor per worker): the `spark` section says which ran. `bench_cluster.py` runs both on the same data.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
from confluent_kafka import Consumer, TopicPartition
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from jobs.catalog import CLICKS, USER_PROFILES
from jobs.clickstream.generator import StreamConfig
from jobs.clickstream.produce import generate
from kappa.contracts.schema_rollout import apply_schemas
from kappa.contracts.topic_declarations import Cleanup, Topic, dead_letters_of
from kappa.core.security import java_client_file, librdkafka_config, registry_login
from kappa.core.settings import KappaSettings
from kappa.core.waiting import wait_until
from kappa.kafka.clients import admin_client
from kappa.kafka.topic_admin import apply
from kappa.runtime.access import grant_version
from kappa.runtime.declaration import JobSpec, version_checkpoints
from kappa.runtime.discovery import discover, load_catalog
from kappa.runtime.outputs import DeltaTable, output_of
from kappa.runtime.runner import run_job
from kappa.spark.session import get_spark
from kappa.spark.topic_io import publish, read_topic, topic_encoder
from kappa.stack.java import stack_java
from tests.benchmarks.common import (
    add_spark_arguments,
    bench_stack,
    cluster_slots,
    executor_pids,
    local_slots,
    report,
    run_main,
    spark_overrides,
    spark_setup,
    timed,
)

SEED = 11
STAMP = "bench_pipeline.json"  # in the bench stack's folder: purging the stack deletes it too
PIPELINE_ORDER = ("enrich_clicks", "sessionize")  # then every other job, by name, once its inputs are filled
TARGET_PER_CORE = {"enrich_clicks": 131_000, "sessionize": 40_000}
CORES = os.cpu_count() or 1
# Frames of a Python worker whose inclusive share says where its time goes: the per-user rule, the state's
# JSON, pandas, and Arrow (the worker's (de)serialization of batches and state).
WORKER_PHASES = ("apply (", "enrich (", "sessionize (", "state_to_json", "state_from_json", "pandas/", "pyarrow/")


# ------------------------------------------------------------------------ Kafka helpers ------------


def end_offsets(settings: KappaSettings, topic: str) -> dict[int, int]:
    """partition -> high watermark ({} when the topic does not exist)."""
    consumer = Consumer({**librdkafka_config(settings), "group.id": "bench-probe", "log_level": 0})
    try:
        meta = consumer.list_topics(topic, timeout=15).topics.get(topic)
        if meta is None or meta.error is not None:
            return {}
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=15)[1] for p in meta.partitions}
    finally:
        consumer.close()


def size(settings: KappaSettings, topic: str) -> int:
    """Records in the topic (the bench's topics are never compacted away: every key is unique or kept)."""
    return sum(end_offsets(settings, topic).values())


def recreate(settings: KappaSettings, topics: list[Topic]) -> None:
    """Delete the topics that exist, wait until they are gone, create them again empty."""
    admin = admin_client(settings)
    existing = set(admin.list_topics(timeout=15).topics)
    doomed = [t.name for t in topics if t.name in existing]
    if doomed:
        for future in admin.delete_topics(doomed, operation_timeout=30).values():
            future.result(timeout=60)
        wait_until(
            lambda: not set(doomed) & set(admin.list_topics(timeout=15).topics),
            60,
            f"topics still listed 60 s after their deletion: {doomed}",
            interval_s=0.5,
        )
    for attempt in range(20):  # a just-deleted name can be refused for a moment while the deletion finishes
        try:
            apply(admin, topics)
            return
        except Exception:
            if attempt == 19:
                raise
            time.sleep(1)


# ------------------------------------------------------------------------ 1. load -----------------


def load(settings: KappaSettings, events: int, users: int, reuse: bool) -> dict[str, Any]:
    """The clickstream in `clicks` and `user_profiles` (generated, or reused when the stamp matches)."""
    stamp_file = settings.stack_path / STAMP
    wanted = {"seed": SEED, "events": events, "users": users}
    # besides the catalog: each job input's dead letters and each job output's late side topic (a job checks
    # that every topic it writes exists before it starts)
    jobs = discover().values()
    topics = load_catalog()
    side = {t.name: t for t in topics}
    side |= {dead_letters_of(t).name: dead_letters_of(t) for spec in jobs for t in spec.inputs}
    side |= {t.name: t for s in jobs for t in output_of(s.output).topics(s.version)}  # a table's late topic too
    side_topics = [t for name, t in side.items() if name not in {t.name for t in topics}]
    derived = [t for t in topics if t not in (CLICKS, USER_PROFILES)] + side_topics
    if reuse and stamp_file.is_file():
        stamp = json.loads(stamp_file.read_text())
        now = {t.name: {str(p): o for p, o in end_offsets(settings, t.name).items()} for t in (CLICKS, USER_PROFILES)}
        if {k: stamp.get(k) for k in wanted} == wanted and stamp.get("end_offsets") == now:
            print(f"reusing the generated topics ({events:,} clicks, seed {SEED}) from {stamp_file}")
            recreate(settings, derived)  # outputs of the last run: every job starts from empty outputs
            apply_schemas(settings.schemas_path, topics, settings.registry, registry_login(settings))
            return {**stamp, "reused": True}
        print(f"{stamp_file} does not match (wanted {wanted}, end offsets {now}): generating afresh")
    stamp_file.unlink(missing_ok=True)
    recreate(settings, [*topics, *side_topics])
    apply_schemas(settings.schemas_path, topics, settings.registry, registry_login(settings))
    print(f"generating {events:,} clicks of {users:,} users (seed {SEED}) ...")
    generated = generate(settings, StreamConfig(events=events, users=users, seed=SEED), CLICKS, USER_PROFILES)
    stamp = {
        **wanted,
        "clicks": generated.clicks,
        "profiles": generated.profiles,
        "seconds": generated.seconds,
        "end_offsets": {
            t.name: {str(p): o for p, o in end_offsets(settings, t.name).items()} for t in (CLICKS, USER_PROFILES)
        },
    }
    stamp_file.write_text(json.dumps(stamp, indent=2))
    return {**stamp, "reused": False}


# ------------------------------------------------------------------------ 2. raw ceiling ----------


def consumer_performance(settings: KappaSettings, topic: str, records: int) -> dict[str, float]:
    """Kafka's ConsumerPerformance over the whole topic: its own columns (MB.sec, nMsg.sec, ...) as numbers."""
    java = stack_java(settings.stack_java)
    command = [
        java, "-Xmx512m", "-cp", f"{settings.jars_path / 'kafka'}/*", "org.apache.kafka.tools.ConsumerPerformance",
        "--bootstrap-server", settings.bootstrap, "--topic", topic, "--num-records", str(records),
        "--timeout", "60000", "--group", f"bench-ceiling-{uuid.uuid4().hex[:8]}",
    ]  # fmt: skip
    if settings.secured:  # the same login and TLS as the jobs' clients: a ceiling of the same path
        command += ["--command-config", str(java_client_file(settings))]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800, check=False)
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    header = next((i for i, line in enumerate(lines) if line.startswith("start.time")), None)
    if done.returncode != 0 or header is None or header + 1 >= len(lines):
        raise RuntimeError(f"ConsumerPerformance failed (exit {done.returncode}): {done.stderr[-1500:]}")
    names = [n.strip() for n in lines[header].split(",")]
    values = [v.strip() for v in lines[header + 1].split(",")]
    return {n: float(v) for n, v in zip(names, values, strict=True) if n not in ("start.time", "end.time")}


# ------------------------------------------------------------------------ py-spy on the workers ---


class MemorySampler:
    """The resident memory of JVMs (the Spark driver's; on a cluster, its executors' together), sampled every half
    second while a job runs: its peak."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while True:
            total = 0
            for pid in self.pids:
                with contextlib.suppress(psutil.Error):  # an executor lost meanwhile
                    total += psutil.Process(pid).memory_info().rss
            self.peak_bytes = max(self.peak_bytes, total)
            if self._stop.wait(0.5):
                return

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak_bytes


def state_bytes(checkpoints: Path) -> int:
    """Bytes on disk of the state stores under a job version's checkpoints (0 for a stateless job)."""
    return sum(f.stat().st_size for d in checkpoints.rglob("state") if d.is_dir() for f in d.rglob("*") if f.is_file())


class WorkerSampler:
    """py-spy on this process's `pyspark.daemon` and the workers it forks, while a job runs (50 Hz,
    nonblocking: the workers are never paused). The daemon starts with the first Python task, so a thread
    waits for it and attaches then; `stop()` returns the collapsed stacks (stack -> samples)."""

    def __init__(self, output: Path, rate: int = 50) -> None:
        self.output = output
        self.rate = rate
        self.proc: subprocess.Popen[bytes] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._attach, daemon=True)
        self._thread.start()

    def _attach(self) -> None:
        while not self._stop.wait(0.2):
            daemon = _pyspark_daemon(os.getpid())
            if daemon is not None:
                command = [str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(daemon),
                           "--subprocesses", "--nonblocking", "--function", "--rate", str(self.rate),
                           "--format", "raw", "--output", str(self.output)]  # fmt: skip
                self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                return

    def stop(self) -> dict[str, int]:
        self._stop.set()
        self._thread.join()
        if self.proc is None:
            return {}
        self.proc.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
        try:
            _, err = self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
            err = b"py-spy did not stop within 60 s"
        if not self.output.is_file():
            raise RuntimeError(f"py-spy wrote nothing (exit {self.proc.returncode}): {err.decode()[-800:]}")
        stacks: dict[str, int] = {}
        for line in self.output.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if stack and count.isdigit():
                stacks[stack] = stacks.get(stack, 0) + int(count)
        return stacks


def _pyspark_daemon(ancestor: int) -> int | None:
    """The pid of the `pyspark.daemon` that descends from `ancestor` (other sessions' daemons are not ours)."""
    try:
        daemons = [p for p in psutil.Process(ancestor).children(recursive=True) if _is_pyspark_daemon(p)]
    except psutil.Error:
        return None
    for daemon in daemons:
        with contextlib.suppress(psutil.Error):
            if not _is_pyspark_daemon(daemon.parent()):  # a forked worker's parent is the daemon itself
                return daemon.pid  # --subprocesses follows the workers
    return None


def _is_pyspark_daemon(process: psutil.Process | None) -> bool:
    with contextlib.suppress(psutil.Error):
        return process is not None and "pyspark.daemon" in " ".join(process.cmdline())
    return False


def top_frames(job: str, stacks: dict[str, int], top: int) -> list[dict[str, Any]]:
    """The functions the workers spent their samples in: own (leaf) share, and inclusive share."""
    total = sum(stacks.values())
    own: dict[str, int] = {}
    inclusive: dict[str, int] = {}
    for stack, count in stacks.items():
        frames = [f for f in stack.split(";") if not f.startswith("process ")]
        if not frames:
            continue
        own[frames[-1]] = own.get(frames[-1], 0) + count
        for frame in set(frames):
            inclusive[frame] = inclusive.get(frame, 0) + count
    ranked = sorted(own.items(), key=lambda kv: kv[1], reverse=True)[:top]
    return [
        {"job": job, "function": frame, "own_share": f"{n / total:.0%}",
         "inclusive_share": f"{inclusive[frame] / total:.0%}", "samples": n}
        for frame, n in ranked
    ]  # fmt: skip


def inclusive_of(stacks: dict[str, int], needles: tuple[str, ...]) -> dict[str, str]:
    """Share of the samples whose stack passes through a frame containing each needle."""
    total = sum(stacks.values()) or 1
    return {needle: f"{sum(n for stack, n in stacks.items() if needle in stack) / total:.0%}" for needle in needles}


# ------------------------------------------------------------------------ 3. throughput -----------


def pipeline_order(specs: dict[str, JobSpec], filled: set[str]) -> Iterator[tuple[JobSpec, str | None]]:
    """(job, None) in an order where each job's input topics were produced before it runs; (job, why not)
    for the jobs whose inputs nothing produces. `filled` grows as the caller reports outputs."""
    pending = dict(specs)
    while pending:
        ready = [s for s in pending.values() if all(t.name in filled for t in s.inputs)]
        if not ready:
            break
        ready.sort(key=lambda s: (PIPELINE_ORDER.index(s.name) if s.name in PIPELINE_ORDER else 99, s.name))
        yield ready[0], None
        del pending[ready[0].name]
    for spec in pending.values():
        missing = [t.name for t in spec.inputs if t.name not in filled]
        yield spec, f"inputs never produced here: {', '.join(missing)}"


def fresh_outputs(settings: KappaSettings, spec: JobSpec) -> None:
    shutil.rmtree(f"{settings.checkpoint_root}/{spec.name}", ignore_errors=True)
    if isinstance(spec.output, DeltaTable):
        shutil.rmtree(spec.output.path(settings, spec.version), ignore_errors=True)


def decode_only(spark: SparkSession, settings: KappaSettings, spec: JobSpec) -> float:
    """Seconds for Spark to read and decode the job's inputs into the no-op sink: the job minus its logic."""
    checkpoint = f"{settings.checkpoint_root}/decode-only"
    shutil.rmtree(checkpoint, ignore_errors=True)

    def run() -> None:
        queries = [
            read_topic(spark, settings, topic, job="bench", job_version=1, with_raw=True)
            .records.writeStream.format("noop")
            .option("checkpointLocation", f"{checkpoint}/{topic.name}")
            .trigger(availableNow=True)
            .start()
            for topic in spec.inputs
        ]
        for query in queries:
            query.awaitTermination()
            if query.exception():
                raise RuntimeError(query.exception())

    return timed(run)


def pass_through(spark: SparkSession, settings: KappaSettings, spec: JobSpec) -> float:
    """Seconds for Spark to read, decode, re-encode (Confluent Avro, the registered schema) and write the job's
    inputs back to Kafka, each record to its own partition number of a copy topic: the job's I/O, no logic."""
    checkpoint = f"{settings.checkpoint_root}/pass-through"
    shutil.rmtree(checkpoint, ignore_errors=True)
    copies = [Topic(f"{t.name}.pass-through", partitions=t.partitions, cleanup=Cleanup.DELETE) for t in spec.inputs]
    recreate(settings, copies)

    def copy_of(topic: Topic, copy: Topic) -> StreamingQuery:
        encode = topic_encoder(settings, topic)
        key = F.col(topic.key_field) if topic.key_field else F.lit(None)

        def write(batch: DataFrame, batch_id: int) -> None:
            publish(encode(batch, key, F.col("kafka_partition")), settings, copy.name)

        records = read_topic(spark, settings, topic, job="bench", job_version=1, with_raw=True).records
        return (
            records.writeStream.foreachBatch(write)
            .option("checkpointLocation", f"{checkpoint}/{topic.name}")
            .trigger(availableNow=True)
            .start()
        )

    def run() -> None:
        queries = [copy_of(topic, copy) for topic, copy in zip(spec.inputs, copies, strict=True)]
        for query in queries:
            query.awaitTermination()
            if query.exception():
                raise RuntimeError(query.exception())

    return timed(run)


def throughput(
    spark: SparkSession, settings: KappaSettings, max_offsets: int | None, py_spy: bool, only: set[str] | None
) -> tuple[list[dict[str, Any]], list[str], list[tuple[str, dict[str, int]]]]:
    """Each job's replay beside its decode-only run; with `py_spy`, the workers' stacks of each job too."""
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    samples: list[tuple[str, dict[str, int]]] = []
    filled = {CLICKS.name, USER_PROFILES.name}
    specs = {name: spec for name, spec in discover().items() if only is None or name in only}
    for spec, why_not in pipeline_order(specs, filled):
        if why_not:
            notes.append(f"{spec.name}: skipped, {why_not}")
            continue
        sizes = {t.name: size(settings, t.name) for t in spec.inputs}
        if not all(sizes.values()):
            empty = [name for name, n in sizes.items() if not n]
            notes.append(f"{spec.name}: skipped, its input topic(s) {', '.join(empty)} are empty")
            continue
        events = sum(sizes.values())
        if not rows:
            decode_only(spark, settings, spec)  # warm-up: the session's first query pays for JIT and metadata
        seconds = decode_only(spark, settings, spec)
        rows.append(_rate_row(f"{spec.name}: Spark read+decode only", events, seconds, "no job logic, noop sink"))
        copied = _rate_row(f"{spec.name}: Spark pass-through", events, pass_through(spark, settings, spec),
                           "decode, encode, write to Kafka; no job logic")  # fmt: skip
        rows.append(copied)
        fresh_outputs(settings, spec)
        if settings.secured:  # the job runs as its own principal (as_job), allowed what it declares
            grant_version(settings, spec, spec.version)
        print(f"running {spec.name} over {events:,} input records ({sizes}) ...")
        sampler = WorkerSampler(Path(f"{settings.checkpoint_root}/{spec.name}.pyspy")) if py_spy else None
        memory = MemorySampler([spark._jvm.ProcessHandle.current().pid()])  # type: ignore[union-attr]
        # on a cluster the tasks and their state stores are in the executors (started with the session)
        executors = None if settings.spark_master.startswith("local") else MemorySampler(executor_pids(settings))
        state_ops = StateOperatorTimes()
        run = run_job(spec, settings, available_now=True, max_offsets_per_trigger=max_offsets, on_batch=state_ops.add)
        rss = memory.stop()
        executors_rss = executors.stop() if executors is not None else None
        state = state_bytes(Path(version_checkpoints(settings, spec.name, run.version)))
        if sampler is not None:
            stacks = sampler.stop()
            if stacks:
                samples.append((spec.name, stacks))
                note_sampled = " (py-spy sampling the workers at 50 Hz)"
            else:
                notes.append(f"{spec.name}: no Python worker appeared for py-spy to sample")
                note_sampled = ""
        else:
            note_sampled = ""
        query = f"{spec.name}_v{run.version}"
        note = f"{run.batches.get(query, 0)} batch(es), {run.input_rows.get(query, 0):,} rows read by {query}"
        note += note_sampled
        if state_ops.seen:
            notes.append(f"{spec.name}: {state_ops}")
        row = _rate_row(f"{spec.name}: job (availableNow)", events, run.seconds, note)
        row |= {"driver_rss_mb": round(rss / 2**20), "state_mb": round(state / 2**20, 1)}
        if executors_rss is not None:
            row["executors_rss_mb"] = round(executors_rss / 2**20)
        row["of_pass_through"] = f"{row['events_per_s'] / copied['events_per_s']:.0%}" if copied["events_per_s"] else ""
        if spec.name in TARGET_PER_CORE:
            row["target_per_core"] = TARGET_PER_CORE[spec.name]
        rows.append(row)
        print(f"{spec.name}: {row['events_per_s']:,.0f} events/s ({row['per_core']:,.0f} per core), "
              f"{row['of_pass_through']} of the pass-through ({copied['events_per_s']:,.0f} events/s)")  # fmt: skip
        if isinstance(spec.output, Topic):
            produced = size(settings, spec.output.name)
            notes.append(f"{spec.name}: wrote {produced:,} records to {spec.output.name}")
            if produced:
                filled.add(spec.output.name)
    return rows, notes, samples


class StateOperatorTimes:
    """Where a stateful job's batches spent their state store time: summed over the batches' stateful operators
    (Spark's progress: updating the state, committing it, and RocksDB's own counts and latencies)."""

    SUMMED = ("allUpdatesTimeMs", "commitTimeMs", "numRowsUpdated", "numRowsRemoved")
    ROCKSDB = (
        "rocksdbGetCount",
        "rocksdbPutCount",
        "rocksdbGetLatency",
        "rocksdbPutLatency",
        "rocksdbCommitWriteBatchLatency",
        "rocksdbCommitCheckpointLatency",
        "rocksdbCommitFlushLatency",
    )

    def __init__(self) -> None:
        self.seen = False
        self.totals: dict[str, int] = {}

    def add(self, progress: dict[str, Any]) -> None:
        for op in progress.get("stateOperators") or []:
            self.seen = True
            figures = {k: op.get(k, 0) for k in self.SUMMED} | {
                k: (op.get("customMetrics") or {}).get(k, 0) for k in self.ROCKSDB
            }
            for k, v in figures.items():
                self.totals[k] = self.totals.get(k, 0) + int(v or 0)

    def __str__(self) -> str:
        t = {k: v / 1000 if k.endswith(("Ms", "Latency")) else v for k, v in self.totals.items()}  # ms -> s
        return (f"state operators: updates {t['allUpdatesTimeMs']:.1f} s, commits {t['commitTimeMs']:.1f} s; "
                f"{t['numRowsUpdated']:,} rows updated, {t['numRowsRemoved']:,} removed; RocksDB "
                f"{t['rocksdbGetCount']:,} gets ({t['rocksdbGetLatency']:.1f} s), {t['rocksdbPutCount']:,} puts "
                f"({t['rocksdbPutLatency']:.1f} s), commit: write batch "
                f"{t['rocksdbCommitWriteBatchLatency']:.1f} s, flush {t['rocksdbCommitFlushLatency']:.1f} s, "
                f"checkpoint {t['rocksdbCommitCheckpointLatency']:.1f} s")  # fmt: skip


def _rate_row(what: str, events: int, seconds: float, note: str = "") -> dict[str, Any]:
    rate = events / seconds if seconds > 0 else 0.0
    return {"what": what, "events": events, "seconds": round(seconds, 2), "events_per_s": rate,
            "per_core": rate / CORES, "target_per_core": "", "of_pass_through": "", "note": note}  # fmt: skip


# ------------------------------------------------------------------------ main ---------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=5_000_000, help="clicks to generate (default 5,000,000)")
    parser.add_argument("--users", type=int, default=5000)
    parser.add_argument("--reuse", action="store_true", help="keep the bench stack and reuse its generated topics")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=None, help="cap each replay batch")
    parser.add_argument("--no-py-spy", action="store_true", help="do not sample the Spark Python workers")
    parser.add_argument("--top", type=int, default=12, help="frames shown per job's worker profile")
    parser.add_argument("--jobs", default=None, help="comma-separated jobs to replay (default: every job)")
    add_spark_arguments(parser)
    args = parser.parse_args()

    rows: list[dict[str, Any]] = []
    workers: list[dict[str, Any]] = []
    notes: list[str] = []
    # with --reuse, the workers start on the kept stack too (bench_stack stops another run's Spark daemons first)
    with bench_stack(keep=args.reuse, **spark_overrides(args, worker_cores=1)) as settings:
        local = settings.spark_master.startswith("local")
        setup = spark_setup(settings, local_slots(settings.spark_master, CORES) if local else cluster_slots(settings))
        print(f"Spark: {setup}", flush=True)
        py_spy = not args.no_py_spy and local  # it finds the Python workers under this process, not an executor's
        if not args.no_py_spy and not local:
            notes.append("py-spy off: on a cluster the Python workers run under the executors")
        loaded = load(settings, args.events, args.users, args.reuse)
        note = f"+{loaded['profiles']:,} profile versions" + (", reused" if loaded["reused"] else "")
        rows.append(_rate_row("generate (Python producer)", loaded["clicks"], loaded["seconds"], note))
        perf = consumer_performance(settings, CLICKS.name, loaded["clicks"])
        ceiling = _rate_row("raw ceiling: Kafka ConsumerPerformance on clicks", int(perf["data.consumed.in.nMsg"]),
                            loaded["clicks"] / perf["nMsg.sec"] if perf["nMsg.sec"] else 0.0,
                            f"{perf['MB.sec']:.1f} MB/s, fetch {perf['fetch.nMsg.sec']:,.0f} msg/s")  # fmt: skip
        rows.append(ceiling)
        spark = get_spark(settings, "bench-pipeline")  # started before the first job: its start is not timed
        job_rows, job_notes, samples = throughput(
            spark,
            settings,
            args.max_offsets_per_trigger,
            py_spy,
            set(args.jobs.split(",")) if args.jobs else None,
        )
        rows += job_rows
        notes += job_notes
        for job, stacks in samples:
            workers += top_frames(job, stacks, args.top)
            shares = inclusive_of(stacks, WORKER_PHASES)
            notes.append(f"{job} workers (py-spy, {sum(stacks.values()):,} samples), inclusive: {shares}")
        spark.stop()
    notes_rows = [{"note": n} for n in notes]
    report("pipeline", rows, args.json_out, spark=[setup], worker_profile=workers, notes=notes_rows)


if __name__ == "__main__":
    run_main(main)
