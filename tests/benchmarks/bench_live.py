"""The live pipeline, deployed as a user deploys it, under a fixed click rate: does it keep up, how fresh is each
output, and what does it cost.

The bench stack gets the catalog's topics and schemas (`kappa schemas apply`, `kappa topics apply`), a profile for
every user, and the pipeline's jobs deployed with `kappa jobs start <job>` (declared versions, declared cadences,
the default launcher). Then, per rate: a warm-up, and `--minutes` of clicks at that fixed rate (event time = record
time = now), each click's produce time kept. The paths, per click:

- `enriched_clicks`: the first time a consumer (fetch wait 10 ms) receives the click's record (key = event id) on
  the live physical topic;
- `sessions`: the first time a consumer receives a record of the click's session that covers it (same user,
  `end_time` at or after the click's event time);
- Delta `page_stats`: the commit timestamp of the first `page_stats` commit of the batch that read the click's
  `enriched_clicks` record (its offset against the job's checkpoint offset log; the commit's `txn` names the batch);
- `enriched_clicks_realtime` (when its job is deployed): as `enriched_clicks`, on the real-time lane's topic, over
  every batch boundary of the lane that falls in the window.

Reported per rate: p50, p95, p99 and max per path against its target (TARGETS_MS), each job's consumer lag at the
start, middle and end of the window (records, and seconds of input), the cores used by the jobs (each JVM and its
Python driver), Kafka, the registry, this process (the producer and the measuring consumers) and the whole
machine, each job's batches (sizes, durations, Spark's phases), and a verdict: `kept up` when each job's lowest
lag in the window's last third is no higher than in its first third plus two seconds of input (the real-time lane
is judged by its latency instead: it records progress at its batch ends only).

`sustained` (in `--rates`) searches upward for the highest rate that holds: it doubles from `--search-from` while
a probe (`--probe-minutes`) keeps up, then bisects, and measures the rate found for `--minutes`; if that run falls
behind it steps down by a tenth and measures again. `--backlog JOB` stops JOB, produces at `--backlog-rate` for
`--backlog-minutes` while the rest of the pipeline runs, starts JOB again and reports how long it took to drain its
backlog (the records of each batch, bounded by its declared `max_batch_records`) and the other jobs' lag meanwhile.
`--idle` first measures the deployed pipeline with nothing produced. `--profile-seconds` records a Java Flight
Recorder profile of every job JVM during each measured window and prints where their CPU went.

`--spark-workers N` deploys the jobs onto N standalone workers the bench stack starts (KAPPA_SPARK_MASTER set to
its master): the job host's driver stays on this machine as it does, its tasks run in executors, and its slots are
the workers' cores. By default the workers offer the job host as many slots as it has on local[*] (SLOTS_PER_CORE
per core: `--spark-cores-max`) plus the real-time job's one per input partition, shared out over the workers
(`--spark-worker-cores`): on 2 cores, 2 workers of 6 cores, 8 for the host and 4 for the lane. The executors'
CPU counts among the jobs', the master's and workers' own as `spark daemons`; the `spark` section says where the
jobs ran. (With `--launcher subprocess` every job is an application of its own, each taking up to
`--spark-cores-max`: size the workers to hold them all.)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import psutil
from confluent_kafka import Consumer

from jobs.catalog import CLICKS, USER_PROFILES
from jobs.clickstream.generator import COUNTRIES, SEGMENTS, Click, ProfileVersion
from kappa.contracts.avro_serde import AvroDecoder, AvroEncoder
from kappa.contracts.registry import registry_of, value_subject
from kappa.contracts.schema_files import topic_value_schema
from kappa.core.security import librdkafka_config
from kappa.core.settings import KappaSettings, Launcher, project_root
from kappa.core.waiting import WaitTimeoutError, wait_until
from kappa.kafka.clients import Outgoing, Publisher
from kappa.kafka.partitioning import partition_for
from kappa.lifecycle.host_registry import HOST_IDLE_S, hosts, is_host
from kappa.lifecycle.job_host import SLOTS_PER_CORE
from kappa.lifecycle.lag import lag
from kappa.lifecycle.state_files import load, recorded
from kappa.runtime.binding import deployed_job, physical_output
from kappa.runtime.declaration import version_checkpoints
from kappa.runtime.discovery import discover, pipeline_order
from kappa.stack import LocalStack, process
from kappa.stack.java import spark_java_path
from kappa.stack.spark_standalone import WORKER_PREFIX, is_spark
from tests.benchmarks.common import (
    add_spark_arguments,
    bench_stack,
    cli_env,
    cluster_slots,
    executors_of,
    local_slots,
    machine_speed,
    report,
    run_main,
    spark_overrides,
    spark_setup,
)

SEED = 17
REAL_TIME_JOB = "enrich_clicks_realtime"  # its path is measured when it is among the deployed jobs
LAG_SAMPLE_S = 5.0
# The freshness each path promises at 1,000 clicks/s (issue 36), p99 from the click's produce time.
TARGETS_MS = {"enriched_clicks": 2_000, "sessions": 5_000, "page_stats": 60_000, "enriched_clicks_realtime": 100}


# ------------------------------------------------------------------------ the pipeline, deployed -----------


def kappa(settings: KappaSettings, *args: str) -> str:
    """One `kappa` CLI command against the bench stack, as a user types it; its output, or its error in full."""
    return kappa_measured(settings, *args)[0]


def kappa_measured(settings: KappaSettings, *args: str, timeout_s: float = 600) -> tuple[str, float]:
    """`kappa(...)`, and the CPU seconds its process tree used (the CLI and the JVM it starts; each process's
    last sample, taken every half second, so a process that lived less than that may be missed)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "kappa.cli", *args], env=cli_env(settings), cwd=project_root(), stdout=out,
            stderr=err, text=True,
        )  # fmt: skip
        cpu: dict[int, float] = {}
        deadline = time.monotonic() + timeout_s
        while process.poll() is None:
            if time.monotonic() > deadline:
                process.kill()
                raise RuntimeError(f"kappa {' '.join(args)} took over {timeout_s:.0f} s")
            with contextlib.suppress(psutil.Error):
                root = psutil.Process(process.pid)
                for p in [root, *root.children(recursive=True)]:
                    with contextlib.suppress(psutil.Error):
                        times = p.cpu_times()
                        cpu[p.pid] = times.user + times.system
            time.sleep(0.5)
        out.seek(0), err.seek(0)
        stdout, stderr = out.read(), err.read()
    if process.returncode != 0:
        raise RuntimeError(f"kappa {' '.join(args)} failed ({process.returncode}):\n{stdout}{stderr}")
    return stdout, sum(cpu.values())


@contextmanager
def deployed(settings: KappaSettings, jobs: list[str]) -> Iterator[None]:
    """Each job started with `kappa jobs start` (in pipeline order), stopped with `kappa jobs stop` at the end."""
    started: list[str] = []
    try:
        for job in jobs:
            print(f"kappa jobs start {job} ...", flush=True)
            kappa(settings, "jobs", "start", job)
            started.append(job)
        one_host(settings, started)
        yield
    except BaseException:
        for problem in undeploy(settings, started):  # the error that ended the run is the one to raise
            print(problem, file=sys.stderr, flush=True)
        raise
    if problems := undeploy(settings, started):
        raise RuntimeError("; ".join(problems))


def undeploy(settings: KappaSettings, jobs: list[str]) -> list[str]:
    """`kappa jobs stop` for each job, whatever the others did; then the job hosts end by themselves, or are
    killed, with the JVMs under them, after a minute beyond their idle time: a host whose batch hangs must not
    outlive the bench stack, whose purge removes the records that name it. -> one line per problem."""
    problems: list[str] = []
    for job in reversed(jobs):
        try:
            kappa(settings, "jobs", "stop", job)
        except RuntimeError as exc:
            problems.append(str(exc).strip().splitlines()[-1])
    idle_s = HOST_IDLE_S + 60
    try:
        wait_until(  # a job host ends by itself after its last job
            lambda: not any(is_host(h.pid) for h in hosts(settings)), idle_s, "the job hosts ended", interval_s=1
        )
    except WaitTimeoutError:
        for host in hosts(settings):
            if is_host(host.pid):
                with contextlib.suppress(psutil.Error):
                    root = psutil.Process(host.pid)
                    for process in [*root.children(recursive=True), root]:
                        process.kill()
                problems.append(f"the job host (pid {host.pid}) still ran {idle_s:g} s after its jobs were "
                                "stopped: killed")  # fmt: skip
    return problems


def one_host(settings: KappaSettings, jobs: list[str]) -> None:
    """The shared jobs run in one job host, as they would deployed from one code. A host runs the code it started
    with, so a file under jobs/ or platform/ edited while the jobs were started gives the later ones a host of
    their own: a second Spark application on the same cores, and figures that are not the platform's."""
    shared = [d for d in recorded(settings) if d.job in jobs and d.launcher == Launcher.SHARED.value]
    running = [h for h in hosts(settings) if is_host(h.pid) and any(d.pid == h.pid for d in shared)]
    if len(running) > 1:
        started = ", ".join(f"pid {h.pid} at {h.started_at}" for h in running)
        raise RuntimeError(f"the jobs run in {len(running)} job hosts ({started}), not one: the code changed while "
                           "they were started; run the benchmark again on a tree nobody edits meanwhile")  # fmt: skip


@dataclass(frozen=True)
class Pipeline:
    """What the deployed versions read and write: the physical topics and table the clock stops at."""

    enriched: str
    sessions: str
    page_stats_path: str
    page_stats_checkpoint: str
    page_stats_app_id: str
    # page_stats' offset log as it grew (offsets_kept): the deployed job keeps only its last batches
    page_stats_offsets: Path
    jobs: tuple[tuple[str, int], ...]
    realtime: str | None = None  # the real-time lane's topic, when its job is deployed

    @classmethod
    def of(cls, settings: KappaSettings, jobs: list[str]) -> Pipeline:
        enrich, sessionize, stats = (deployed_job(settings, j) for j in ("enrich_clicks", "sessionize", "page_stats"))
        lane = deployed_job(settings, REAL_TIME_JOB) if REAL_TIME_JOB in jobs else None
        return cls(
            realtime=physical_output(lane, settings, lane.version)[1] if lane else None,
            enriched=physical_output(enrich, settings, enrich.version)[1],
            sessions=physical_output(sessionize, settings, sessionize.version)[1],
            page_stats_path=physical_output(stats, settings, stats.version)[1],
            page_stats_checkpoint=f"{version_checkpoints(settings, stats.name, stats.version)}/output",
            page_stats_app_id=f"{stats.name}.v{stats.version}",
            page_stats_offsets=settings.state_dir / "bench" / "page_stats-offsets",
            jobs=tuple((j, deployed_job(settings, j).version) for j in jobs),
        )


def pipeline_jobs() -> list[str]:
    """Every discovered job, each after the jobs whose outputs it reads."""
    return [spec.name for spec in pipeline_order(discover())]


# ------------------------------------------------------------------------ load --------------------------------


@dataclass
class Produced:
    """One run's clicks: event id -> (user, produce ms)."""

    users: list[str] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    times: list[int] = field(default_factory=list)


def produce_profiles(settings: KappaSettings, users: int, valid_for_ms: int = 3_600_000) -> None:
    """Every user has a profile valid since `valid_for_ms` ago (an hour), published then (its Kafka timestamp,
    the rule's log time: a version published after a click's time plus the profiles' lateness is not visible to
    it): the jobs' state holds what a real pipeline's would, and every click since then finds its user's profile.
    (Published now instead, the soak's history clicks before now - L got none: the rule's answer, not the one
    the soak expected.)"""
    rng = random.Random(SEED)
    now_ms = time.time_ns() // 1_000_000
    with registry_of(settings) as registry:
        encoder = AvroEncoder(
            registry, value_subject(USER_PROFILES.name), topic_value_schema(settings.schemas_path, USER_PROFILES)
        )
    publisher = Publisher(settings)
    for u in range(users):
        user = f"user-{u:05d}"
        profile = ProfileVersion(user, 1, rng.choice(SEGMENTS), rng.choice(COUNTRIES), now_ms - valid_for_ms)
        publisher.send(
            USER_PROFILES.name,
            Outgoing(user.encode(), encoder.encode(profile.as_avro()), partition_for(user, USER_PROFILES.partitions),
                     timestamp_ms=profile.valid_from_ms),
        )  # fmt: skip
    publisher.close()


def produce_at_rate(
    settings: KappaSettings,
    rate: int,
    seconds: float,
    users: int,
    label: str,
    since_ms: int | None = None,
    delay_ms: int = 0,
) -> Produced:
    """Clicks at `rate` per second for `seconds`, event time = record time. By default each click's time is the
    moment it is handed to Kafka. With `since_ms`, the clicks are spaced 1/rate apart from that moment on and
    each is handed over once its time has come: from a moment in the past, the clicks before now go as fast as
    Kafka takes them (the log's history), the rest at their time, so the log has no gap. `delay_ms`: each click
    goes that long after its time (a schedule that resumes after a pause, its event times still gapless)."""
    rng = random.Random(f"{SEED}-{label}")
    with registry_of(settings) as registry:
        encoder = AvroEncoder(registry, value_subject(CLICKS.name), topic_value_schema(settings.schemas_path, CLICKS))
    publisher = Publisher(settings, **{"linger.ms": 5})
    out = Produced()
    total = int(rate * seconds)
    origin_ms = time.time_ns() // 1_000_000 if since_ms is None else since_ms
    while len(out.ids) < total:
        due = min(total, (time.time_ns() // 1_000_000 - delay_ms - origin_ms) * rate // 1000 + 1)
        while len(out.ids) < due:
            at_ms = time.time_ns() // 1_000_000 if since_ms is None else origin_ms + len(out.ids) * 1000 // rate
            user = f"user-{rng.randrange(users):05d}"
            event_id = f"{label}-{len(out.ids):09d}"
            click = Click(event_id, user, f"/page/{rng.randrange(200):04d}", None, at_ms, "DESKTOP")
            publisher.send(
                CLICKS.name,
                Outgoing(
                    event_id.encode(), encoder.encode(click.as_avro()), partition_for(user, CLICKS.partitions),
                    timestamp_ms=at_ms,
                ),
            )  # fmt: skip
            out.ids.append(event_id)
            out.users.append(user)
            out.times.append(at_ms)
        time.sleep(0.0005)
    publisher.close()
    return out


# ------------------------------------------------------------------------ what the pipeline did -------------


class Receiver(threading.Thread):
    """Reads a topic from its current end as a downstream consumer does; each record's receive time (ms)."""

    def __init__(
        self, settings: KappaSettings, topic: str, decode: AvroDecoder | None = None, wait_ms: int = 50
    ) -> None:
        super().__init__(daemon=True)
        # `wait_ms`: the longest a fetch waits for a record, so the finest a receive time can be (and how often an
        # idle topic is asked: each fetch costs the broker as much as a job's)
        self.consumer = Consumer(
            {**librdkafka_config(settings), "group.id": f"bench-live-{uuid.uuid4().hex[:8]}",
             "auto.offset.reset": "latest", "enable.auto.commit": False, "fetch.wait.max.ms": wait_ms,
             "log_level": 0}
        )  # fmt: skip
        self.consumer.subscribe([topic])
        self.decode = decode
        self.rows: list[tuple[Any, ...]] = []  # (key, partition, offset, receive ms[, decoded value])
        self.halt = threading.Event()
        self.assigned = threading.Event()

    def run(self) -> None:
        try:
            while not self.halt.is_set():
                messages = self.consumer.consume(10_000, timeout=0.05)
                received = time.time_ns() // 1_000_000
                if self.consumer.assignment():
                    self.assigned.set()
                for m in messages:
                    if m.error() or m.key() is None or m.value() is None:
                        continue
                    row = (m.key().decode(), m.partition(), m.offset(), received)
                    self.rows.append((*row, self.decode.decode(m.value())) if self.decode else row)
        finally:
            self.consumer.close()

    def wait_assigned(self) -> None:
        if not self.assigned.wait(60):
            raise RuntimeError("the latency consumer got no partitions in 60 s")

    def stop(self) -> None:
        self.halt.set()
        self.join()


class LagSampler(threading.Thread):
    """Each deployed job's consumer lag, every few seconds: (seconds into the run, job -> lag)."""

    def __init__(self, settings: KappaSettings, jobs: tuple[tuple[str, int], ...]) -> None:
        super().__init__(daemon=True)
        self.settings, self.jobs = settings, jobs
        self.samples: list[tuple[float, dict[str, int]]] = []
        self.halt = threading.Event()

    def run(self) -> None:
        started = time.monotonic()
        while not self.halt.wait(LAG_SAMPLE_S):
            lags = {job: lag(self.settings, job, version).total for job, version in self.jobs}
            self.samples.append((time.monotonic() - started, lags))

    def stop(self) -> None:
        self.halt.set()
        self.join()


def _cpu_seconds(pids: set[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.Error:  # ended meanwhile
            continue
        total += times.user + times.system + times.children_user + times.children_system
    return total


class CpuMeter:
    """CPU used over a window, in cores, by each part of the machine: every JVM of the deployed jobs (with its
    Python driver and workers: a deployment's process group), Kafka, the registry, this process (the producer
    and the measuring consumers), and the whole machine (the rest included)."""

    def __init__(self, settings: KappaSettings, jobs: tuple[tuple[str, int], ...]) -> None:
        self.parts = self._parts(settings, jobs)
        self.started = time.monotonic()
        self.start = {name: self._per_pid(pids) for name, pids in self.parts.items()}
        self.machine_start, self.steal_start = self._machine()

    @staticmethod
    def _parts(settings: KappaSettings, jobs: tuple[tuple[str, int], ...]) -> dict[str, set[int]]:
        groups: dict[int, list[str]] = {}  # process group leader -> its jobs
        for job, version in jobs:
            if (deployment := load(settings, job, version)) is not None:
                groups.setdefault(deployment.pid, []).append(job)
        parts = {
            ("job host" if len(names) > 1 else names[0]): set(process.group_members(leader))
            for leader, names in groups.items()
        }
        for component in LocalStack(settings).status():
            if component.pid is None:
                continue
            if component.name.startswith(WORKER_PREFIX):  # the jobs' tasks, and the Python workers under them
                for executor in executors_of(component.pid):
                    with contextlib.suppress(psutil.Error):
                        below = psutil.Process(executor).children(recursive=True)
                        parts.setdefault(EXECUTORS, set()).update([executor, *(p.pid for p in below)])
            name = component.name
            kind = "kafka" if name.startswith("kafka") else SPARK if is_spark(name) else name
            parts.setdefault(kind, set()).add(component.pid)
        parts["bench (producer, consumers)"] = {os.getpid()}
        return parts

    @staticmethod
    def _per_pid(pids: set[int]) -> dict[int, float]:
        return {pid: _cpu_seconds({pid}) for pid in pids}

    @staticmethod
    def _machine() -> tuple[float, float]:
        """CPU seconds since boot, from one reading: this machine's busy ones, and those the hypervisor stole.
        Linux counts a guest's time in `user` too, and `steal` is not this machine's work."""
        times = psutil.cpu_times()
        busy = sum(times) - times.idle - times.iowait - times.steal - times.guest - times.guest_nice
        return busy, times.steal

    def cores(self) -> dict[str, float]:
        seconds = time.monotonic() - self.started
        used: dict[str, float] = {}
        for name, pids in self.parts.items():
            now = self._per_pid(pids)
            used[name] = round(sum(t - self.start[name].get(pid, 0.0) for pid, t in now.items()) / seconds, 2)
        jobs = sum(v for k, v in used.items() if k not in _NOT_JOBS)
        busy, stolen = self._machine()
        return {
            "jobs": round(jobs, 2),
            **used,
            "machine": round((busy - self.machine_start) / seconds, 2),
            # Cores the shared host gave to other machines while ours wanted them: a run with a large figure here
            # was measured on fewer cores than it says (compare only runs with about the same).
            "stolen": round((stolen - self.steal_start) / seconds, 2),
        }


class ThreadCpu:
    """CPU over a window by thread of every job JVM and by process of the rest of each deployment (its Python
    driver): what the JVM spends outside the jobs' tasks (JIT compilers, GC, Spark's own threads) shows here, by the
    thread names the OS knows (/proc/<pid>/task/<tid>/comm, 15 characters)."""

    def __init__(self, settings: KappaSettings, jobs: tuple[tuple[str, int], ...]) -> None:
        self.groups = {n: p for n, p in CpuMeter._parts(settings, jobs).items() if n not in _NOT_JOBS}
        self.started = time.monotonic()
        self.start = self._snapshot()

    def _snapshot(self) -> dict[tuple[str, int, int], tuple[str, float]]:
        found: dict[tuple[str, int, int], tuple[str, float]] = {}
        for group, pids in self.groups.items():
            for pid in pids:
                try:
                    proc = psutil.Process(pid)
                    if proc.name() != "java":
                        times = proc.cpu_times()
                        found[(group, pid, 0)] = (f"process {proc.name()}", times.user + times.system)
                        continue
                    for thread in proc.threads():
                        comm = Path(f"/proc/{pid}/task/{thread.id}/comm")
                        name = comm.read_text().strip() if comm.exists() else "?"
                        found[(group, pid, thread.id)] = (name, thread.user_time + thread.system_time)
                except (psutil.Error, OSError):
                    continue
        return found

    def cores(self) -> list[dict[str, Any]]:
        seconds = time.monotonic() - self.started
        per: Counter[tuple[str, str]] = Counter()
        for key, (name, cpu) in self._snapshot().items():
            was = self.start.get(key, (name, 0.0))[1]
            per[(key[0], re.sub(r"[-_ #]*\d+$", "", name) or name)] += cpu - was
        return [{"jvm": group, "thread": name, "cores": round(cpu / seconds, 3)}
                for (group, name), cpu in per.most_common(25) if cpu / seconds >= 0.005]  # fmt: skip


EXECUTORS, SPARK = "executors", "spark daemons"  # on the stack's workers: the jobs' executors, the master and workers
_NOT_JOBS = ("kafka", "registry", SPARK, "bench (producer, consumers)")


def idle_cost(
    settings: KappaSettings, pipeline: Pipeline, seconds: float, profile_s: float = 0.0, dump: Path | None = None
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """What the deployed pipeline costs while no click arrives (its queries only ask Kafka for new offsets), and
    where its JVMs spend it (with `profile_s`)."""
    print(f"idle: {seconds:.0f} s with nothing produced ...", flush=True)
    meter = CpuMeter(settings, pipeline.jobs)
    time.sleep(seconds)
    cores = {"rate": 0, "seconds": seconds, **meter.cores()}
    if not profile_s:
        return cores, []
    recorder = FlightRecorder(settings, pipeline.jobs, profile_s)  # after the meter: the recorder costs CPU too
    time.sleep(profile_s)
    return cores, [{"rate": 0, **row} for row in recorder.summary(keep_in=dump, window="idle")]


# ------------------------------------------------------------------------ where each click landed ----------


def enriched_latency(produced: pd.DataFrame, enriched: pd.DataFrame) -> pd.Series:
    first = enriched.groupby("key").agg(received=("received", "min"), partition=("partition", "first"),
                                        offset=("offset", "min"))  # fmt: skip
    joined = produced.join(first, on="event_id", how="left")
    return joined["received"] - joined["produced"]


def sessions_latency(produced: pd.DataFrame, sessions: pd.DataFrame) -> pd.Series:
    """Per click: the first session record of its user whose end_time is at or after the click's event time.
    (Within a run each user's clicks come in event-time order, so its session records grow in end_time.)"""
    if sessions.empty:
        return pd.Series([float("nan")] * len(produced))
    records = sessions.sort_values(["end_ms", "received"]).drop_duplicates(["user", "end_ms"])
    clicks = produced.sort_values("produced")
    matched = pd.merge_asof(
        clicks, records[["user", "end_ms", "received"]].sort_values("end_ms"), left_on="produced",
        right_on="end_ms", by="user", direction="forward",
    )  # fmt: skip
    return matched["received"] - matched["produced"]


@contextmanager
def offsets_kept(pipeline: Pipeline) -> Iterator[None]:
    """page_stats' offset log copied as it grows, into `pipeline.page_stats_offsets`: the page_stats path is timed
    from it. The deployed jobs keep only the platform's last batches (KAPPA_STREAMING_BATCHES_RETAINED), as a
    deployment does: keeping every batch would also keep every state store version, and time jobs whose
    changelogs pile up and whose batches slow down with them."""
    shutil.rmtree(pipeline.page_stats_offsets, ignore_errors=True)
    pipeline.page_stats_offsets.mkdir(parents=True)
    halt = threading.Event()

    def keep_copying() -> None:
        while not halt.wait(2):  # the platform's 20 batches are ten minutes of page_stats'
            copy_offsets(pipeline)

    copier = threading.Thread(target=keep_copying, daemon=True)
    copier.start()
    try:
        yield
    finally:
        halt.set()
        copier.join()
        shutil.rmtree(pipeline.page_stats_offsets, ignore_errors=True)  # read inside the block only


def copy_offsets(pipeline: Pipeline) -> None:
    """The entries of page_stats' offset log not copied yet, each whole (a reader never sees half a copy)."""
    source, kept = Path(pipeline.page_stats_checkpoint) / "offsets", pipeline.page_stats_offsets
    for entry in source.iterdir() if source.exists() else ():
        if entry.name.isdigit() and not (kept / entry.name).exists():
            partial = kept / f".{entry.name}.{threading.get_ident()}"
            with contextlib.suppress(FileNotFoundError):  # purged by Spark since it was listed: copied before
                shutil.copyfile(entry, partial)  # Spark renames a whole entry into place
                partial.replace(kept / entry.name)


def batch_end_offsets(folder: Path, topic: str) -> dict[int, dict[int, int]]:
    """An offset log (Spark's, or a copy of it): batch id -> {partition: end offset (exclusive)} of `topic`."""
    ends: dict[int, dict[int, int]] = {}
    for entry in folder.iterdir() if folder.exists() else ():
        if not entry.name.isdigit():
            continue
        for line in entry.read_text().splitlines()[2:]:
            source = json.loads(line) if line.startswith("{") else {}
            if topic in source:
                ends[int(entry.name)] = {int(p): int(o) for p, o in source[topic].items()}
    return ends


def commit_times(table_path: str, app_id: str) -> dict[int, int]:
    """Delta log: batch id (the commit's txn version for `app_id`) -> its commit timestamp (ms)."""
    times: dict[int, int] = {}
    for entry in sorted((Path(table_path) / "_delta_log").glob("*.json")):
        batch, stamp = None, None
        for line in entry.read_text().splitlines():
            action = json.loads(line)
            if action.get("txn", {}).get("appId") == app_id:
                batch = int(action["txn"]["version"])
            if "commitInfo" in action:
                stamp = int(action["commitInfo"]["timestamp"])
        if batch is not None and stamp is not None:
            times.setdefault(batch, stamp)
    return times


def page_stats_latency(produced: pd.DataFrame, enriched: pd.DataFrame, pipeline: Pipeline, topic: str) -> pd.Series:
    """Per click: the commit time of the page_stats batch that read its enriched record (or of the first later
    batch that committed, if that one changed no row)."""
    copy_offsets(pipeline)  # what the copier has not reached yet
    ends = batch_end_offsets(pipeline.page_stats_offsets, topic)
    commits = commit_times(pipeline.page_stats_path, pipeline.page_stats_app_id)
    batches = sorted(ends)
    # first commit at or after each batch: a suffix minimum over the commits' batch ids
    at_or_after = np.full(len(batches), np.nan)
    soonest = np.nan
    for i in range(len(batches) - 1, -1, -1):
        if batches[i] in commits:
            soonest = commits[batches[i]] if np.isnan(soonest) else min(soonest, commits[batches[i]])
        at_or_after[i] = soonest
    where = enriched.groupby("key").agg(partition=("partition", "first"), offset=("offset", "min"))
    joined = produced.join(where, on="event_id", how="left")
    visible = np.full(len(joined), np.nan)
    for partition in joined["partition"].dropna().unique():
        rows = np.flatnonzero((joined["partition"] == partition).to_numpy())
        partition_ends = np.array([ends[b].get(int(partition), -1) for b in batches])
        # batch ends only grow: the first batch whose end offset passed the record read it
        first = np.searchsorted(partition_ends, joined["offset"].to_numpy()[rows], side="right")
        found = first < len(batches)
        visible[rows[found]] = at_or_after[first[found]]
    return pd.Series(visible, index=joined.index) - joined["produced"]


# ------------------------------------------------------------------------ per-batch profile ----------------

BATCH_LINE = re.compile(
    r"^(?P<at>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),\d{3} kappa\.progress (?P<query>\S+) batch (?P<batch>\d+): "
    r"(?P<rows>\d+) rows, "
    r"[\d,]+ rows/s, (?P<ms>\d+) ms(?: \((?P<phases>[^)]*)\))?"
)


def job_batches(settings: KappaSettings, job: str, version: int, since: float) -> list[dict[str, int]]:
    """From the deployment's log: each batch since `since` (epoch s): rows, ms and Spark's phases."""
    log_file = settings.deployments_path / f"{job}.v{version}.log"
    batches: list[dict[str, int]] = []
    seen: set[str] = set()  # a batch retried after a restart is counted once
    for line in log_file.read_text(errors="replace").splitlines() if log_file.exists() else []:
        match = BATCH_LINE.match(line)
        if not match or match["query"] != f"{job}_v{version}" or match["batch"] in seen:
            continue
        seen.add(match["batch"])
        at = datetime.strptime(match["at"], "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp()
        if at < since:
            continue
        batch = {"rows": int(match["rows"]), "ms": int(match["ms"])}
        for phase in (match["phases"] or "").split(", "):
            if phase:
                name, ms = phase.rsplit(" ", 1)
                batch[name] = int(ms)
        batches.append(batch)
    return batches


def batch_profile(settings: KappaSettings, jobs: tuple[tuple[str, int], ...], since: float) -> list[dict[str, Any]]:
    """Per job: its batches since `since`, median rows and ms, and the median of each phase Spark timed (addBatch
    is the job's own write; the rest is Spark's bookkeeping per batch)."""
    rows = []
    for job, version in jobs:
        batches = job_batches(settings, job, version, since)
        if not batches:
            rows.append({"job": job, "batches": 0})
            continue
        frame = pd.DataFrame(batches).fillna(0)
        medians = frame.median().round().astype(int).to_dict()
        rows.append({"job": job, "batches": len(frame), "no_data": int((frame["rows"] == 0).sum()),
                     **{f"{k}_p50": v for k, v in medians.items()},
                     "rows_max": int(frame["rows"].max()), "ms_max": int(frame["ms"].max())})  # fmt: skip
    return rows


# ------------------------------------------------------------------------ task CPU per job ------------------


class StageCpu(threading.Thread):
    """The executor CPU of every Spark stage that completes in a window, by scheduler pool: in the job host each
    job's batches run in a pool named after the job, so this is each job's task CPU. Read from the Spark UI's REST
    API of each job application (the deployments run with KAPPA_SPARK_UI=true for it), every few seconds."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.halt = threading.Event()
        self.started_ms = time.time() * 1000
        self.seen: dict[tuple[str, int, int], tuple[str, float, float, int]] = {}  # (app, stage, attempt) -> ...

    def run(self) -> None:
        while not self.halt.wait(10):
            self._collect()

    def _collect(self) -> None:
        import urllib.request

        for port in range(4040, 4051):
            base = f"http://127.0.0.1:{port}/api/v1/applications"
            try:
                with urllib.request.urlopen(base, timeout=2) as response:
                    apps = json.load(response)
                for app in apps:
                    url = f"{base}/{app['id']}/stages?status=complete&details=false"
                    with urllib.request.urlopen(url, timeout=10) as response:
                        stages = json.load(response)
                    for stage in stages:
                        done = stage.get("completionTime")
                        ended_ms = datetime.strptime(done[:23], "%Y-%m-%dT%H:%M:%S.%f").replace(
                            tzinfo=UTC).timestamp() * 1000 if done else 0  # fmt: skip
                        if ended_ms < self.started_ms:
                            continue
                        pool = stage.get("schedulingPool") or "default"
                        name = app["name"] if pool == "default" else pool
                        self.seen[(app["name"], stage["stageId"], stage["attemptId"])] = (
                            name,
                            stage["executorCpuTime"] / 1e9,
                            stage["executorRunTime"] / 1e3,
                            stage["numTasks"],
                        )
            except (OSError, ValueError, KeyError):
                continue

    def stop(self) -> list[dict[str, Any]]:
        self.halt.set()
        self.join()
        self._collect()
        seconds = time.time() - self.started_ms / 1000
        per: dict[str, list[float]] = {}
        for name, cpu_s, run_s, tasks in self.seen.values():
            totals = per.setdefault(name, [0, 0.0, 0.0, 0])
            totals[0] += 1
            totals[1] += cpu_s
            totals[2] += run_s
            totals[3] += tasks
        return [
            {"job": name, "stages": int(stages), "tasks": int(tasks), "task_cpu_cores": round(cpu / seconds, 3),
             "task_run_cores": round(run / seconds, 3), "cpu_ms_per_stage": round(1000 * cpu / stages)}
            for name, (stages, cpu, run, tasks) in sorted(per.items(), key=lambda kv: -kv[1][1])
        ]  # fmt: skip


# ------------------------------------------------------------------------ a JVM profile ----------------------


def profiled_jvms(settings: KappaSettings, jobs: tuple[tuple[str, int], ...]) -> dict[str, int]:
    """Name -> pid of each JVM that runs deployed jobs (the job host's, a single deployment's), and Kafka's."""
    found: dict[str, int] = {}
    for name, pids in CpuMeter._parts(settings, jobs).items():
        if name in ("registry", SPARK, "bench (producer, consumers)"):
            continue
        for pid in sorted(pids):
            try:
                if psutil.Process(pid).name() == "java":
                    found[name if name not in found else f"{name} {pid}"] = pid  # executors: one JVM each
            except psutil.Error:
                continue
    return found


class FlightRecorder:
    """A Java Flight Recorder profile of the job JVMs and Kafka over a window: CPU samples by thread and by code."""

    def __init__(self, settings: KappaSettings, jobs: tuple[tuple[str, int], ...], seconds: float) -> None:
        self.jvms = profiled_jvms(settings, jobs)
        self.folder = Path(tempfile.mkdtemp(prefix="bench-live-jfr-"))
        self.seconds = seconds
        java_bin = spark_java_path().resolve().parent
        self.jcmd, self.jfr = str(java_bin / "jcmd"), str(java_bin / "jfr")
        for pid in self.jvms.values():
            # Spark's stacks run deeper than JFR's default 64 frames, which cut off the outermost ones (the batch,
            # the action, the planning phase): a recording cannot say which phase its samples belong to. Takes
            # effect only before a JVM's first recording.
            subprocess.run([self.jcmd, str(pid), "JFR.configure", "stackdepth=512"], capture_output=True, check=False)
            subprocess.run(
                [self.jcmd, str(pid), "JFR.start", "name=bench", "settings=profile", f"duration={seconds:.0f}s",
                 f"filename={self.folder / f'{pid}.jfr'}"],
                capture_output=True, text=True, check=False,
            )  # fmt: skip

    def summary(self, keep_in: Path | None = None, window: str = "") -> list[dict[str, Any]]:
        """Per JVM: the share of CPU samples by thread kind and, within Spark's tasks and stream threads, by the
        code on top of the stack (the first frame of a known library). `keep_in`: a folder that keeps the
        recordings (`<window>-<jvm>-<pid>.jfr`, one per measured window, for `jfr print` or JDK Mission Control);
        otherwise they are deleted."""
        deadline = time.monotonic() + 60
        rows: list[dict[str, Any]] = []
        for name, pid in self.jvms.items():
            path = self.folder / f"{pid}.jfr"
            while not path.exists() and time.monotonic() < deadline:
                time.sleep(1)
            if not path.exists():
                rows.append({"jvm": name, "note": "no recording"})
                continue
            printed = subprocess.run(
                [self.jfr, "print", "--json", "--stack-depth", "40", "--events", "jdk.ExecutionSample", str(path)],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            try:
                events = json.loads(printed.stdout)["recording"]["events"]
            except (json.JSONDecodeError, KeyError):
                rows.append({"jvm": name, "note": f"unreadable recording: {printed.stderr[:200]}"})
                continue
            threads: Counter[str] = Counter()
            code: Counter[str] = Counter()
            methods: Counter[str] = Counter()  # the platform's or Spark's own frame nearest the top
            for event in events:
                values = event["values"]
                threads[_thread_kind(values["sampledThread"]["javaName"] or "")] += 1
                frames = [(f["method"]["type"]["name"].replace("/", "."), f["method"]["name"])
                          for f in values["stackTrace"]["frames"]]  # fmt: skip
                code[_code_kind([cls for cls, _ in frames])] += 1
                methods[_own_frame(frames)] += 1
            total = sum(threads.values()) or 1
            for by, counter, top in (("thread", threads, 12), ("code", code, 15), ("method", methods, 15)):
                rows += [{"jvm": name, "by": by, "what": k, "share": f"{100 * n / total:.1f} %"}
                         for k, n in counter.most_common(top)]  # fmt: skip
        if keep_in is not None:
            keep_in.mkdir(parents=True, exist_ok=True)
            for name, pid in self.jvms.items():
                if (recording := self.folder / f"{pid}.jfr").exists():
                    shutil.move(recording, keep_in / f"{window}-{name.replace(' ', '-')}-{pid}.jfr")
        shutil.rmtree(self.folder, ignore_errors=True)
        return rows


def _thread_kind(thread: str) -> str:
    if thread.startswith("stream execution thread for "):
        return "stream thread " + thread.removeprefix("stream execution thread for ").split(" ")[0]
    if thread.startswith("Executor task launch worker"):
        return "Spark tasks"
    return re.sub(r"[-_ #]*\d+$", "", thread) or thread


# The first frame (from the top) of one of these says where a sample's CPU went.
_CODE = (
    ("org.codehaus.janino", "code generation (Janino)"),
    ("org.codehaus.commons", "code generation (Janino)"),
    ("org.apache.spark.sql.catalyst.expressions.codegen", "code generation (Spark)"),
    ("org.rocksdb", "RocksDB"),
    ("io.kappa.operators", "the platform's operators"),
    ("kafka.", "Kafka broker"),
    ("org.apache.kafka.storage", "Kafka broker (log)"),
    ("org.apache.kafka.server", "Kafka broker"),
    ("org.apache.kafka.common.network", "Kafka network"),
    ("org.apache.kafka.common.record", "Kafka records"),
    ("org.apache.kafka", "Kafka clients"),
    ("org.apache.spark.sql.kafka010", "Spark's Kafka connector"),
    ("org.apache.spark.sql.avro", "Avro (Spark)"),
    ("org.apache.avro", "Avro"),
    ("org.apache.parquet", "Parquet"),
    ("org.apache.spark.sql.delta", "Delta"),
    ("io.delta", "Delta"),
    ("org.apache.spark.sql.execution.streaming.state", "state store"),
    ("org.apache.spark.sql.execution.streaming", "streaming engine"),
    ("org.apache.spark.sql.catalyst.optimizer", "planning (optimizer)"),
    ("org.apache.spark.sql.catalyst.analysis", "planning (analyzer)"),
    ("org.apache.spark.sql.catalyst.trees", "planning (tree walks)"),
    ("org.apache.spark.sql.catalyst.plans", "planning (plans)"),
    ("org.apache.spark.sql.execution.adaptive", "adaptive execution"),
    ("org.apache.spark.sql.catalyst", "Catalyst (expressions, rows)"),
    ("org.apache.spark.sql.execution", "Spark SQL execution"),
    ("org.apache.spark.scheduler", "Spark scheduler"),
    ("org.apache.spark.shuffle", "shuffle"),
    ("org.apache.spark.storage", "block manager"),
    ("org.apache.spark.util.collection", "sort and spill"),
    ("org.apache.spark.unsafe", "unsafe rows"),
    ("org.apache.hadoop", "Hadoop file system"),
    ("com.fasterxml.jackson", "JSON (Jackson)"),
    ("org.json4s", "JSON (json4s)"),
    ("py4j", "Py4J"),
    ("org.apache.spark", "Spark (other)"),
    ("scala.", "Scala library"),
    ("java.util.zip", "compression (zip)"),
    ("com.github.luben.zstd", "compression (zstd)"),
    ("org.xerial.snappy", "compression (snappy)"),
    ("java.", "JDK"),
    ("jdk.", "JDK"),
    ("sun.", "JDK"),
)


def _own_frame(frames: list[tuple[str, str]]) -> str:
    """The first frame (from the top) of Spark, Delta, Kafka or the platform: which of their methods spent it."""
    for cls, method in frames:
        if cls.startswith(("org.apache.spark", "io.delta", "kafka.", "org.apache.kafka", "io.kappa")):
            return f"{cls.rsplit('.', 1)[-1]}.{method}"
    return "?"


def _code_kind(frames: list[str]) -> str:
    for frame in frames:
        for prefix, kind in _CODE:
            if frame.startswith(prefix):
                return kind
    return frames[0] if frames else "?"


# ------------------------------------------------------------------------ one rate --------------------------


def percentiles(latency: pd.Series, total: int) -> dict[str, Any]:
    seen = latency.dropna()
    if seen.empty:
        return {"seen": f"0/{total}"}
    q = seen.quantile([0.5, 0.95, 0.99])
    return {"seen": f"{len(seen)}/{total}", "p50": int(q[0.5]), "p95": int(q[0.95]), "p99": int(q[0.99]),
            "max": int(seen.max())}  # fmt: skip


def kept_up(samples: list[tuple[float, dict[str, int]]], rate: int) -> tuple[bool, str]:
    """Each micro-batch job's lowest lag in the run's last third is no higher than its lowest in the first third
    plus 2 s of input. The lowest, not the mean: a job's lag is a saw-tooth (it falls at each batch's commit), and
    the troughs grow only when the job falls behind. The real-time lane is left out: it records its progress at its
    batch ends only, so its lag climbs for a whole batch whatever its speed (its latency says whether it keeps
    up)."""
    if len(samples) < 6:
        return True, "too short to say"
    third = len(samples) // 3
    notes, ok = [], True
    for job in samples[0][1]:
        if job == REAL_TIME_JOB:
            continue
        early = min(lags[job] for _, lags in samples[:third])
        late = min(lags[job] for _, lags in samples[-third:])
        ok &= late <= early + 2 * rate
        if late > early + 2 * rate:
            notes.append(f"{job} {early:,}->{late:,}")
    return ok, ("lowest lag grew: " + ", ".join(notes)) if notes else "every job's lowest lag flat"


def lag_table(samples: list[tuple[float, dict[str, int]]], rate: int) -> list[dict[str, Any]]:
    """Per job: its lag (records, and seconds of input at `rate`) at the window's start, middle and end, and its
    highest."""
    if not samples:
        return []
    picks = {"start": samples[0], "middle": samples[len(samples) // 2], "end": samples[-1]}
    rows = []
    for job in samples[0][1]:
        row: dict[str, Any] = {"job": job}
        for name, (_, lags) in picks.items():
            row[name] = f"{lags[job]:,} ({lags[job] / max(rate, 1):.1f} s)"
        highest = max(lags[job] for _, lags in samples)
        row["highest"] = f"{highest:,} ({highest / max(rate, 1):.1f} s)"
        rows.append(row)
    return rows


def measure(
    settings: KappaSettings,
    pipeline: Pipeline,
    rate: int,
    seconds: float,
    warmup: float,
    users: int,
    drain: float,
    profile_s: float = 0.0,
    dump: Path | None = None,
) -> dict[str, Any]:
    label = f"r{rate}-{uuid.uuid4().hex[:6]}"
    print(f"{rate:,} clicks/s: {warmup:.0f} s warm-up, then {seconds:.0f} s measured ...", flush=True)
    produce_at_rate(settings, rate, warmup, users, f"{label}w")
    with registry_of(settings) as registry:
        session_decoder = AvroDecoder(registry, topic_value_schema(settings.schemas_path, deployed_job(
            settings, "sessionize").output))  # fmt: skip
        receivers = {"enriched": Receiver(settings, pipeline.enriched),
                     "sessions": Receiver(settings, pipeline.sessions, session_decoder)}  # fmt: skip
        if pipeline.realtime:
            receivers["realtime"] = Receiver(settings, pipeline.realtime, wait_ms=10)  # a target of 100 ms
        # the path that sees a click first: the run waits for the last click on it
        # (none when only views run: their lag says when they have read everything)
        first_path = (
            "enriched" if any(job == "enrich_clicks" for job, _ in pipeline.jobs)
            else "realtime" if pipeline.realtime else None
        )  # fmt: skip
        for r in receivers.values():
            r.start()
        for r in receivers.values():
            r.wait_assigned()
        lag = LagSampler(settings, pipeline.jobs)
        lag.start()
        clock_started = time.time()
        started = time.monotonic()
        meter = CpuMeter(settings, pipeline.jobs)
        threads = ThreadCpu(settings, pipeline.jobs)
        recorder = FlightRecorder(settings, pipeline.jobs, min(profile_s, seconds)) if profile_s else None
        stage_cpu = StageCpu() if settings.spark_ui else None
        if stage_cpu is not None:
            stage_cpu.start()
        produced = produce_at_rate(settings, rate, seconds, users, label)
        tasks = [{"rate": rate, **row} for row in stage_cpu.stop()] if stage_cpu is not None else []
        cpu = {"rate": rate, "seconds": seconds, **meter.cores()}
        thread_cpu = [{"rate": rate, **row} for row in threads.cores()]
        achieved = len(produced.ids) / (time.monotonic() - started)
        lag.stop()
        ok, lag_note = kept_up(lag.samples, rate)
        # What was produced may still be on its way: wait (bounded) until every path has seen the last click.
        deadline, last_id = time.monotonic() + drain, produced.ids[-1]

        def seen_last() -> bool:
            return first_path is None or any(row[0] == last_id for row in receivers[first_path].rows[-50_000:])

        while time.monotonic() < deadline and not seen_last():
            time.sleep(1)
        # the sessions and the Delta commit of the batches after it follow the enriched record
        drained(settings, pipeline, drain)
        for r in receivers.values():
            r.stop()
    clicks = pd.DataFrame({"event_id": produced.ids, "user": produced.users, "produced": produced.times})
    enriched = pd.DataFrame(receivers["enriched"].rows, columns=["key", "partition", "offset", "received"])
    sessions = pd.DataFrame(
        [(v["user_id"], round(v["end_time"].timestamp() * 1000), received)
         for _, _, _, received, v in receivers["sessions"].rows],
        columns=["user", "end_ms", "received"],
    )  # fmt: skip
    paths = {
        "enriched_clicks": enriched_latency(clicks, enriched),
        "sessions": sessions_latency(clicks, sessions),
        "page_stats": page_stats_latency(clicks, enriched, pipeline, pipeline.enriched),
    }
    if "realtime" in receivers:
        lane = pd.DataFrame(receivers["realtime"].rows, columns=["key", "partition", "offset", "received"])
        paths["enriched_clicks_realtime"] = enriched_latency(clicks, lane)
    if dump is not None:  # each click's latency per path, for a look at when the slow ones came
        frame = clicks[["produced"]].assign(**{path: latency.to_numpy() for path, latency in paths.items()})
        dump.mkdir(parents=True, exist_ok=True)
        frame.to_csv(dump / f"latency-{rate}-{label}.csv", index=False)
    rows = []
    for path, latency in paths.items():
        shown = percentiles(latency, len(clicks))
        target = TARGETS_MS[path]
        met = "p99 met" if shown.get("p99", target + 1) < target else "p99 MISSED"
        rows.append({"rate": rate, "achieved": round(achieved), "path": path, **shown, "target_p99": target,
                     "latency": met if rate <= 1000 else "", "kept_up": "yes" if ok else "NO"})  # fmt: skip
    profile = [{"rate": rate, **row} for row in batch_profile(settings, pipeline.jobs, clock_started)]
    lags = [{"rate": rate, **row} for row in lag_table(lag.samples, rate)]
    jfr = [{"rate": rate, **row} for row in recorder.summary(keep_in=dump, window=f"r{rate}")] if recorder else []
    print(f"  {rate:,} clicks/s: {'kept up' if ok else 'fell behind'} ({lag_note})", flush=True)
    return {"rows": rows, "kept_up": ok, "lag_note": lag_note, "profile": profile, "cpu": cpu, "lags": lags,
            "jfr": jfr, "tasks": tasks, "threads": thread_cpu}  # fmt: skip


def backlog(settings: KappaSettings, pipeline: Pipeline) -> dict[str, Any]:
    """Each deployed job's consumer lag and last batch."""
    return {job: lag(settings, job, version) for job, version in pipeline.jobs}


def drained(settings: KappaSettings, pipeline: Pipeline, timeout_s: float) -> int:
    """Wait (bounded) until no micro-batch job lags and each has run a batch: a rate's clock must not start on an
    earlier rate's backlog. (The real-time lane records its progress at the end of its long batches only: its
    lag says nothing until then.) Returns the records still behind (0: drained)."""
    deadline = time.monotonic() + timeout_s
    while True:
        lags = {job: lag for job, lag in backlog(settings, pipeline).items() if job != REAL_TIME_JOB}
        behind = sum(lag.total for lag in lags.values())
        ran = all(lag.last_batch for lag in lags.values())
        if behind == 0 and ran:
            return 0
        if time.monotonic() > deadline:
            return max(behind, 1)
        time.sleep(2)


def settle(settings: KappaSettings, pipeline: Pipeline, users: int, timeout_s: float = 600) -> None:
    """A few clicks through the whole pipeline, until no job lags: the jobs' first batches are start-up, not
    latency."""
    print("settling: 1,000 clicks until every job has read everything ...", flush=True)
    produce_at_rate(settings, 100, 10, users, f"settle-{uuid.uuid4().hex[:6]}")
    if behind := drained(settings, pipeline, timeout_s):
        raise RuntimeError(f"the pipeline did not settle in {timeout_s:.0f} s ({behind:,} records behind)")


def sustained(
    settings: KappaSettings, pipeline: Pipeline, args: argparse.Namespace
) -> tuple[int, dict[str, Any] | None, list[dict[str, Any]]]:
    """The highest rate that keeps up for `--minutes`: probes (`--probe-minutes`) double from `--search-from` while
    they keep up, then bisect (to within 10 %); the rate found is measured for `--minutes`, a tenth lower each
    time that run falls behind. Returns the rate, its full measurement, and one line per probe."""
    low, high, rate = 0, None, args.search_from
    probes: list[dict[str, Any]] = []
    probe_s = args.probe_minutes * 60
    while high is None or high - low > max(low // 10, 25):
        if drained(settings, pipeline, args.drain):
            print("the pipeline did not drain after the last probe: search ended", flush=True)
            break
        result = measure(settings, pipeline, rate, probe_s, probe_s / 4, args.users, args.drain)
        probes.append({"probe": rate, "seconds": probe_s, "kept_up": "yes" if result["kept_up"] else "NO",
                       "why": result["lag_note"], **{f"{k}_cores": v for k, v in result["cpu"].items()
                                                     if k in ("jobs", "machine", "stolen")}})  # fmt: skip
        if result["kept_up"]:
            low = rate
        else:
            high = rate
        rate = rate * 2 if high is None else (low + high) // 2
    while low > 0:
        if drained(settings, pipeline, args.drain):
            break
        result = measure(settings, pipeline, low, args.minutes * 60, args.warmup, args.users, args.drain,
                         args.profile_seconds)  # fmt: skip
        probes.append({"probe": low, "seconds": args.minutes * 60, "kept_up": "yes" if result["kept_up"] else "NO",
                       "why": result["lag_note"]})  # fmt: skip
        if result["kept_up"]:
            return low, result, probes
        low = int(low * 0.9)
    return low, None, probes


def backlog_drain(settings: KappaSettings, pipeline: Pipeline, args: argparse.Namespace) -> list[dict[str, Any]]:
    """`--backlog JOB`: JOB stopped while the rest runs and `--backlog-rate` clicks/s arrive for
    `--backlog-minutes`, then started again: how long until its batches have read as many records as it was behind
    (the backlog read), and until its lag is back under 2 s of input (drained: that also needs the rest of the
    machine to leave it its live pace); the sizes of its catch-up batches; the other jobs' highest lag meanwhile."""
    job = args.backlog
    version = dict(pipeline.jobs)[job]
    rate = args.backlog_rate
    others = tuple((j, v) for j, v in pipeline.jobs if j != job and j != REAL_TIME_JOB)
    print(f"backlog: {job} stopped, {rate:,} clicks/s for {args.backlog_minutes:g} min ...", flush=True)
    kappa(settings, "jobs", "stop", job)
    produce_at_rate(settings, rate, args.backlog_minutes * 60, args.users, f"backlog-{uuid.uuid4().hex[:6]}")
    stopped = lag(settings, job, version)
    behind, rows_before = stopped.total, stopped.rows
    print(f"backlog: {job} is {behind:,} records behind; kappa jobs start {job}, clicks go on ...", flush=True)
    samples = LagSampler(settings, others)
    samples.start()
    meter = CpuMeter(settings, pipeline.jobs)
    started_at, started = time.time(), time.monotonic()
    kappa(settings, "jobs", "start", job)
    done = threading.Event()
    drained_after: list[float] = []
    consumed_after: list[float] = []  # its batches have read as many records as it was behind

    def keep_producing() -> None:
        while not done.is_set():
            produce_at_rate(settings, rate, 5, args.users, f"during-{uuid.uuid4().hex[:6]}")

    producer = threading.Thread(target=keep_producing, daemon=True)
    producer.start()
    try:
        while time.monotonic() - started < args.drain:
            now = lag(settings, job, version)
            if not consumed_after and now.rows - rows_before >= behind:
                consumed_after.append(time.monotonic() - started)
            if now.total <= 2 * rate and now.last_batch:
                drained_after.append(time.monotonic() - started)
                break
            time.sleep(2)
        cores = meter.cores()
    finally:
        done.set()
        producer.join()
        samples.stop()
    batches = job_batches(settings, job, version, started_at)

    def after(seen_at: list[float]) -> float | str:  # seconds, or why there are none
        return round(seen_at[0], 1) if seen_at else f"not within {args.drain:.0f} s"

    highest = {j: max((lags[j] for _, lags in samples.samples), default=0) for j, _ in others}
    row: dict[str, Any] = {
        "job": job,
        "backlog": behind,
        "backlog_read_s": after(consumed_after),
        "drained_s": after(drained_after),
        "batches": len(batches),
        "largest_batch": max((b["rows"] for b in batches), default=0),
        "longest_batch_ms": max((b["ms"] for b in batches), default=0),
        "others_highest_lag": ", ".join(f"{j} {n:,} ({n / rate:.1f} s)" for j, n in highest.items()),
        "jobs_cores": cores["jobs"],
        "machine_cores": cores["machine"],
        "stolen_cores": cores["stolen"],
    }
    read, drained = (f"{v} s" if isinstance(v, float) else v for v in (row["backlog_read_s"], row["drained_s"]))
    print(f"backlog: read in {read}; lag under 2 s of input in {drained}", flush=True)
    return [row]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", default="1000,sustained", help="clicks/s; `sustained` searches for it")
    parser.add_argument("--minutes", type=float, default=10.0, help="measured minutes per rate (after the warm-up)")
    parser.add_argument("--warmup", type=float, default=30.0, help="seconds at the rate before the clock runs")
    parser.add_argument("--probe-minutes", type=float, default=2.0, help="length of each probe of the search")
    parser.add_argument("--search-from", type=int, default=1000, help="the sustained search's first rate")
    parser.add_argument("--users", type=int, default=2000)
    parser.add_argument("--drain", type=float, default=300.0, help="at most this long to wait for a backlog to go")
    parser.add_argument("--jobs", default="", help="comma-separated jobs to deploy (default: the whole pipeline)")
    parser.add_argument(
        "--launcher",
        choices=[Launcher.SUBPROCESS.value, Launcher.SHARED.value],
        default=Launcher.SHARED.value,
        help="KAPPA_DEPLOY_LAUNCHER of the deployments: a driver JVM per job, or one Spark application",
    )
    parser.add_argument("--idle", type=float, default=60.0, help="first measure this many seconds with no clicks")
    parser.add_argument("--polling-delay-ms", type=int, default=None, help="KAPPA_SPARK_POLLING_DELAY_MS of the jobs")
    parser.add_argument("--backlog", default="", help="a job to stop, let fall behind, and start again (at the end)")
    parser.add_argument("--backlog-rate", type=int, default=1000, help="clicks/s while the --backlog job is stopped")
    parser.add_argument("--backlog-minutes", type=float, default=10.0, help="how long the --backlog job is stopped")
    parser.add_argument("--profile-seconds", type=float, default=0.0, help="JFR-profile the job JVMs this long")
    parser.add_argument("--task-cpu", action="store_true", help="each job's task CPU, from the Spark UI's REST API")
    parser.add_argument(
        "--dump",
        type=Path,
        default=None,
        help="a folder for each click's latency per path (CSV) and the --profile-seconds recordings",
    )
    parser.add_argument("--also-ran", default="nothing else", help="what else ran on the machine, for the report")
    add_spark_arguments(parser)
    args = parser.parse_args()

    jobs = [j for j in args.jobs.split(",") if j] or pipeline_jobs()
    # On workers: the job host's slots as on local[*], and the real-time job's (it takes one per input partition)
    host_slots = SLOTS_PER_CORE * (os.cpu_count() or 1)
    lane_slots = sum(t.partitions for t in discover()[REAL_TIME_JOB].inputs) if REAL_TIME_JOB in jobs else 0
    workers = max(args.spark_workers, 1)
    cluster = spark_overrides(args, worker_cores=-(-(host_slots + lane_slots) // workers), cores_max=host_slots)
    rows: list[dict[str, Any]] = []
    sections: dict[str, list[dict[str, Any]]] = {
        name: [] for name in ("lag", "cpu", "batch_profile", "task_cpu", "thread_cpu", "jvm_profile",
                              "sustained_search", "backlog")
    }  # fmt: skip
    verdicts: list[dict[str, Any]] = []
    speed = machine_speed()  # before anything starts: the machine's own pace today
    print(f"machine speed: {speed}", flush=True)

    def keep(result: dict[str, Any]) -> None:
        nonlocal rows
        rows += result["rows"]
        sections["lag"] += result["lags"]
        sections["cpu"].append(result["cpu"])
        sections["batch_profile"] += result["profile"]
        sections["jvm_profile"] += result["jfr"]
        sections["task_cpu"] += result["tasks"]
        sections["thread_cpu"] += result["threads"]

    with bench_stack(**cluster) as settings:
        star = host_slots if args.launcher == Launcher.SHARED.value else os.cpu_count() or 1  # the host's local[*]
        local = settings.spark_master.startswith("local")
        setup = spark_setup(settings, local_slots(settings.spark_master, star) if local else cluster_slots(settings))
        print(f"Spark: {setup}", flush=True)
        kappa(settings, "schemas", "apply")
        kappa(settings, "topics", "apply")
        produce_profiles(settings, args.users)
        pipeline = Pipeline.of(settings, jobs)
        chosen: dict[str, Any] = {"deploy_launcher": Launcher(args.launcher)}
        if args.polling_delay_ms is not None:
            chosen["spark_polling_delay_ms"] = args.polling_delay_ms
        if args.task_cpu:
            chosen["spark_ui"] = True
        settings = settings.model_copy(update=chosen)
        with deployed(settings, jobs), offsets_kept(pipeline):
            settle(settings, pipeline, args.users)
            if args.idle:
                drained(settings, pipeline, args.drain)
                idle, idle_profile = idle_cost(settings, pipeline, args.idle, args.profile_seconds, args.dump)
                sections["cpu"].append(idle)
                sections["jvm_profile"] += idle_profile
                verdicts.append({"what": "idle: the jobs' cores", "measured": idle["jobs"], "target": "< 0.1",
                                 "verdict": "met" if idle["jobs"] < 0.1 else "MISSED"})  # fmt: skip
            for rate in (r for r in args.rates.split(",") if r):  # --rates '': none (the idle cost, a backlog)
                if behind := drained(settings, pipeline, args.drain):
                    rows.append({"rate": rate, "path": f"not measured: {behind:,} records of backlog after "
                                 f"{args.drain:.0f} s"})  # fmt: skip
                    continue
                if rate == "sustained":
                    found, result, probes = sustained(settings, pipeline, args)
                    sections["sustained_search"] += probes
                    print(f"highest rate that kept up for {args.minutes:g} min: {found:,} clicks/s", flush=True)
                    verdicts.append({"what": f"sustained for {args.minutes:g} min", "measured": f"{found:,} clicks/s",
                                     "target": "5,000 clicks/s",
                                     "verdict": "met" if found >= 5000 else "MISSED"})  # fmt: skip
                    if result is not None:
                        keep(result)
                    continue
                result = measure(settings, pipeline, int(rate), args.minutes * 60, args.warmup, args.users,
                                 args.drain, args.profile_seconds, args.dump)  # fmt: skip
                keep(result)
                verdicts.append({"what": f"{int(rate):,} clicks/s for {args.minutes:g} min",
                                 "measured": result["lag_note"], "target": "every job's lag flat",
                                 "verdict": "met" if result["kept_up"] else "MISSED"})  # fmt: skip
            if args.backlog:
                drained(settings, pipeline, args.drain)
                sections["backlog"] = backlog_drain(settings, pipeline, args)
    for row in rows:
        if row.get("latency"):
            verdicts.append({"what": f"{row['path']} p99 at {row['rate']:,} clicks/s", "measured": row.get("p99"),
                             "target": f"< {row['target_p99']:,} ms", "verdict": row["latency"]})  # fmt: skip
    notes = [
        {
            "note": f"{os.cpu_count()} cores; jobs deployed (KAPPA_DEPLOY_LAUNCHER={args.launcher}, "
            f"KAPPA_SPARK_MASTER={settings.spark_master}, "
            f"KAPPA_SPARK_POLLING_DELAY_MS={settings.spark_polling_delay_ms}): "
            f"{', '.join(jobs)}; also ran: {args.also_ran}"
        },
        {"note": "latency in ms from each click's produce timestamp; `seen`: clicks whose result was found"},
    ]
    report("live", rows, args.json_out, **sections, spark=[setup], machine_speed=[speed], verdict=verdicts, notes=notes)


if __name__ == "__main__":
    run_main(main)
