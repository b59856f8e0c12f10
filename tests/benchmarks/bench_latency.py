"""Live latency of the deployed pipeline: from a click's produce timestamp to where a consumer can read its result.

The bench stack gets the catalog's topics and schemas (`kappa schemas apply`, `kappa topics apply`), a profile for
every user, and the pipeline's jobs deployed as a user deploys them (`kappa jobs start <job>` for each, declared
versions, declared triggers). Then, per rate: a warm-up, and `--seconds` of clicks at that fixed rate (event time =
record time = now), each click's produce time kept. The paths, per click:

- `enriched_clicks`: the first time a consumer (fetch wait 10 ms) receives the click's record (key = event id) on
  the live physical topic;
- `sessions`: the first time a consumer receives a record of the click's session that covers it (same user,
  `end_time` at or after the click's event time);
- Delta `page_stats`: the commit timestamp of the first `page_stats` commit of the batch that read the click's
  `enriched_clicks` record (its offset against the job's checkpoint offset log; the commit's `txn` names the batch).
- `enriched_clicks_realtime` (when its job is among the deployed ones): as `enriched_clicks`, on the real-time
  lane's topic.

Reported per rate: p50, p95, p99 and max in ms, the rate the producer reached, and whether the pipeline kept up
(each job's consumer lag, sampled every 5 s: `kept up` when each job's lowest lag in the run's last third is no
higher than in its first third plus two seconds of input; the real-time lane is judged by its latency instead).
Each rate starts on a drained pipeline (no job lags); a backlog that does not drain within `--drain` leaves the
later rates unmeasured, and says so. `sustained` (in
`--rates`) searches for the highest rate that keeps up: it doubles from `--search-from` while the rate keeps up, then
bisects (each probe `--probe-seconds` long), and measures the found rate for `--seconds` like the others.

CPU: per rate, and for `--idle` seconds before the first rate (the pipeline deployed, no clicks), the cores the
jobs' processes used (each deployment's process group, the job host and its Python workers included) and the
cores the whole machine was busy (the stack and the producer too). The batch profile per job counts its no-data
batches (batches that read no row) beside its batch sizes and durations.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import threading
import time
import uuid
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
from kappa.contracts.avro_serde import AvroDecoder, AvroEncoder
from kappa.contracts.registry import Registry, value_subject
from kappa.contracts.schema_files import topic_value_schema
from kappa.core.settings import KappaSettings, Launcher, project_root
from kappa.core.waiting import wait_until
from kappa.kafka.clients import Outgoing, Publisher
from kappa.kafka.partitioning import partition_for
from kappa.lifecycle import deployments
from kappa.ops.clickstream import COUNTRIES, SEGMENTS, Click, ProfileVersion
from kappa.runtime.binding import deployed_job, physical_output
from kappa.runtime.declaration import version_checkpoints
from kappa.runtime.discovery import discover, pipeline_order
from kappa.stack import process
from tests.benchmarks.common import bench_stack, cli_env, report

SEED = 17
PATHS = ("enriched_clicks", "sessions", "page_stats", "enriched_clicks_realtime")
REAL_TIME_JOB = "enrich_clicks_realtime"  # its path is measured when it is among the deployed jobs
LAG_SAMPLE_S = 5.0


# ------------------------------------------------------------------------ the pipeline, deployed -----------


def kappa(settings: KappaSettings, *args: str) -> str:
    """One `kappa` CLI command against the bench stack, as a user types it; its output, or its error in full."""
    done = subprocess.run(
        [sys.executable, "-m", "kappa.cli", *args], env=cli_env(settings), cwd=project_root(),
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"kappa {' '.join(args)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return done.stdout


@contextmanager
def deployed(settings: KappaSettings, jobs: list[str]) -> Iterator[None]:
    """Each job started with `kappa jobs start` (in pipeline order), stopped with `kappa jobs stop` at the end."""
    started: list[str] = []
    try:
        for job in jobs:
            print(f"kappa jobs start {job} ...", flush=True)
            kappa(settings, "jobs", "start", job)
            started.append(job)
        yield
    finally:
        for job in reversed(started):
            kappa(settings, "jobs", "stop", job)
        idle_s = deployments.HOST_IDLE_S + 60
        wait_until(  # a job host ends by itself after its last job
            lambda: not any(deployments.is_host(h.pid) for h in deployments.hosts(settings)),
            idle_s,
            f"a job host still runs {idle_s:g} s after its jobs were stopped (kappa jobs status)",
            interval_s=1,
        )


@dataclass(frozen=True)
class Pipeline:
    """What the deployed versions read and write: the physical topics and table the clock stops at."""

    enriched: str
    sessions: str
    page_stats_path: str
    page_stats_checkpoint: str
    page_stats_app_id: str
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
            jobs=tuple((j, deployed_job(settings, j).version) for j in jobs),
        )


def pipeline_jobs() -> list[str]:
    """Every discovered job, each after the jobs whose outputs it reads."""
    return [spec.name for spec in pipeline_order(discover())]


# ------------------------------------------------------------------------ load and clocks ------------------


@dataclass
class Produced:
    """One run's clicks: event id -> (user, produce ms)."""

    users: list[str] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    times: list[int] = field(default_factory=list)


def produce_profiles(settings: KappaSettings, users: int) -> None:
    """Every user has a profile valid since an hour ago: the jobs' state holds what a real pipeline's would."""
    rng = random.Random(SEED)
    now_ms = time.time_ns() // 1_000_000
    with Registry(settings.registry) as registry:
        encoder = AvroEncoder(
            registry, value_subject(USER_PROFILES.name), topic_value_schema(settings.schemas_path, USER_PROFILES)
        )
    publisher = Publisher(settings)
    for u in range(users):
        user = f"user-{u:05d}"
        profile = ProfileVersion(user, 1, rng.choice(SEGMENTS), rng.choice(COUNTRIES), now_ms - 3_600_000)
        publisher.send(
            USER_PROFILES.name,
            Outgoing(user.encode(), encoder.encode(profile.as_avro()), partition_for(user, USER_PROFILES.partitions)),
        )
    publisher.close()


def produce_at_rate(settings: KappaSettings, rate: int, seconds: float, users: int, label: str) -> Produced:
    """Clicks at `rate` per second for `seconds`; event time = record time = the moment each is handed to Kafka."""
    rng = random.Random(f"{SEED}-{label}")
    with Registry(settings.registry) as registry:
        encoder = AvroEncoder(registry, value_subject(CLICKS.name), topic_value_schema(settings.schemas_path, CLICKS))
    publisher = Publisher(settings, **{"linger.ms": 2})
    out = Produced()
    total = int(rate * seconds)
    started = time.monotonic()
    while len(out.ids) < total:
        due = min(total, int((time.monotonic() - started) * rate) + 1)
        while len(out.ids) < due:
            now_ms = time.time_ns() // 1_000_000
            user = f"user-{rng.randrange(users):05d}"
            event_id = f"{label}-{len(out.ids):09d}"
            click = Click(event_id, user, f"/page/{rng.randrange(200):04d}", None, now_ms, "DESKTOP")
            publisher.send(
                CLICKS.name,
                Outgoing(
                    event_id.encode(), encoder.encode(click.as_avro()), partition_for(user, CLICKS.partitions),
                    timestamp_ms=now_ms,
                ),
            )  # fmt: skip
            out.ids.append(event_id)
            out.users.append(user)
            out.times.append(now_ms)
        time.sleep(0.0005)
    publisher.close()
    return out


class Receiver(threading.Thread):
    """Reads a topic from its current end as a downstream consumer does; each record's receive time (ms)."""

    def __init__(self, settings: KappaSettings, topic: str, decode: AvroDecoder | None = None) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer(
            {"bootstrap.servers": settings.bootstrap, "group.id": f"bench-latency-{uuid.uuid4().hex[:8]}",
             "auto.offset.reset": "latest", "enable.auto.commit": False, "fetch.wait.max.ms": 10,
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
            lags = {job: deployments.lag(self.settings, job, version).total for job, version in self.jobs}
            self.samples.append((time.monotonic() - started, lags))

    def stop(self) -> None:
        self.halt.set()
        self.join()


class CpuMeter:
    """CPU used over a window, in cores: the deployed jobs' processes (each deployment's process group: wrapper,
    Python driver, Spark JVM, Python workers) and the whole machine (the stack, the bench and anything else)."""

    def __init__(self, settings: KappaSettings, jobs: tuple[tuple[str, int], ...]) -> None:
        self.settings, self.jobs = settings, jobs
        self.started = time.monotonic()
        self.jobs_start = self._jobs_cpu()
        self.machine_start = self._machine_busy()

    def _jobs_cpu(self) -> dict[int, float]:
        leaders = {d.pid for job, version in self.jobs if (d := deployments.load(self.settings, job, version))}
        cpu = {}
        for pid in (p for leader in leaders for p in process.group_members(leader)):
            try:
                times = psutil.Process(pid).cpu_times()
            except psutil.Error:  # ended meanwhile
                continue
            cpu[pid] = times.user + times.system
        return cpu

    @staticmethod
    def _machine_busy() -> float:
        times = psutil.cpu_times()
        return sum(times) - times.idle - times.iowait

    def cores(self) -> dict[str, float]:
        seconds = time.monotonic() - self.started
        jobs = sum(t - self.jobs_start.get(pid, 0.0) for pid, t in self._jobs_cpu().items())
        machine = self._machine_busy() - self.machine_start
        return {"jobs_cores": round(jobs / seconds, 2), "machine_cores": round(machine / seconds, 2)}


def idle_cost(settings: KappaSettings, pipeline: Pipeline, seconds: float) -> dict[str, Any]:
    """What the deployed pipeline costs while no click arrives: its queries only ask Kafka for new offsets."""
    print(f"idle: {seconds:.0f} s with nothing produced ...", flush=True)
    meter = CpuMeter(settings, pipeline.jobs)
    time.sleep(seconds)
    return {"rate": 0, "seconds": seconds, **meter.cores()}


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


def batch_end_offsets(checkpoint: str, topic: str) -> dict[int, dict[int, int]]:
    """Spark's offset log: batch id -> {partition: end offset (exclusive)} of `topic`."""
    ends: dict[int, dict[int, int]] = {}
    folder = Path(checkpoint) / "offsets"
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
    ends = batch_end_offsets(pipeline.page_stats_checkpoint, topic)
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


def batch_profile(settings: KappaSettings, jobs: tuple[tuple[str, int], ...], since: float) -> list[dict[str, Any]]:
    """From each deployment's log (or the one application's): its batches since `since` (epoch s), median rows
    and ms, and the median of each phase Spark timed (addBatch is the job's own write; the rest is Spark's
    bookkeeping per batch)."""
    rows = []
    for job, version in jobs:
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
        if not batches:
            rows.append({"job": job, "batches": 0})
            continue
        frame = pd.DataFrame(batches).fillna(0)
        medians = frame.median().round().astype(int).to_dict()
        rows.append({"job": job, "batches": len(frame), "no_data": int((frame["rows"] == 0).sum()),
                     **{f"{k}_p50": v for k, v in medians.items()},
                     "ms_max": int(frame["ms"].max())})  # fmt: skip
    return rows


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
    1-minute batch ends only, so its lag climbs for a minute whatever its speed (its latency says whether it keeps
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
        notes.append(f"{job} {early:,}->{late:,}")
    return ok, "lowest lag, first -> last third: " + ", ".join(notes)


def measure(
    settings: KappaSettings, pipeline: Pipeline, rate: int, seconds: float, warmup: float, users: int, drain: float
) -> dict[str, Any]:
    label = f"r{rate}-{uuid.uuid4().hex[:6]}"
    print(f"{rate:,} clicks/s: {warmup:.0f} s warm-up, then {seconds:.0f} s measured ...", flush=True)
    produce_at_rate(settings, rate, warmup, users, f"{label}w")
    with Registry(settings.registry) as registry:
        session_decoder = AvroDecoder(registry, topic_value_schema(settings.schemas_path, deployed_job(
            settings, "sessionize").output))  # fmt: skip
        receivers = {"enriched": Receiver(settings, pipeline.enriched),
                     "sessions": Receiver(settings, pipeline.sessions, session_decoder)}  # fmt: skip
        if pipeline.realtime:
            receivers["realtime"] = Receiver(settings, pipeline.realtime)
        # the path that sees a click first: the run waits for the last click on it
        first_path = "enriched" if any(job == "enrich_clicks" for job, _ in pipeline.jobs) else "realtime"
        for r in receivers.values():
            r.start()
        for r in receivers.values():
            r.wait_assigned()
        lag = LagSampler(settings, pipeline.jobs)
        lag.start()
        clock_started = time.time()
        started = time.monotonic()
        meter = CpuMeter(settings, pipeline.jobs)
        produced = produce_at_rate(settings, rate, seconds, users, label)
        cpu = {"rate": rate, "seconds": seconds, **meter.cores()}
        achieved = len(produced.ids) / (time.monotonic() - started)
        lag.stop()
        ok, lag_note = kept_up(lag.samples, rate)
        # What was produced may still be on its way: wait (bounded) until every path has seen the last click.
        deadline, last_id = time.monotonic() + drain, produced.ids[-1]
        seen_last = lambda: any(row[0] == last_id for row in receivers[first_path].rows[-50_000:])  # noqa: E731
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
    rows = []
    for path, latency in paths.items():
        rows.append({"rate": rate, "achieved": round(achieved), "path": path, **percentiles(latency, len(clicks)),
                     "kept_up": "yes" if ok else "NO", "lag": lag_note})  # fmt: skip
    profile = [{"rate": rate, **row} for row in batch_profile(settings, pipeline.jobs, clock_started)]
    return {"rows": rows, "kept_up": ok, "profile": profile, "cpu": cpu}


def backlog(settings: KappaSettings, pipeline: Pipeline) -> dict[str, Any]:
    """Each deployed job's consumer lag and last batch."""
    return {job: deployments.lag(settings, job, version) for job, version in pipeline.jobs}


def drained(settings: KappaSettings, pipeline: Pipeline, timeout_s: float) -> int:
    """Wait (bounded) until no job lags and each has run a batch: a rate's clock must not start on an earlier
    rate's backlog. Returns the records still behind (0: drained)."""
    deadline = time.monotonic() + timeout_s
    while True:
        lags = backlog(settings, pipeline)
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


def sustained(settings: KappaSettings, pipeline: Pipeline, start: int, probe_s: float, users: int, drain: float) -> int:
    """The highest rate that keeps up: doubling from `start` while it does, then bisecting (to within 10 %).
    Each probe starts on a drained pipeline; one that cannot drain ends the search."""
    low, high = 0, None
    rate = start
    while high is None or high - low > max(low // 10, 25):
        if drained(settings, pipeline, drain):
            print("the pipeline did not drain after the last probe: search ended", flush=True)
            break
        result = measure(settings, pipeline, rate, probe_s, probe_s / 3, users, drain)
        print(f"  {'kept up' if result['kept_up'] else 'fell behind'} ({result['rows'][0]['lag']})", flush=True)
        if result["kept_up"]:
            low = rate
        else:
            high = rate
        rate = rate * 2 if high is None else (low + high) // 2
    return low


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", default="sustained,1000,10000", help="clicks/s; `sustained` searches for it")
    parser.add_argument("--seconds", type=float, default=180.0, help="measured seconds per rate (after the warm-up)")
    parser.add_argument("--warmup", type=float, default=30.0, help="seconds at the rate before the clock runs")
    parser.add_argument("--probe-seconds", type=float, default=60.0, help="length of each probe of the search")
    parser.add_argument("--search-from", type=int, default=100, help="the sustained search's first rate")
    parser.add_argument("--users", type=int, default=2000)
    parser.add_argument("--drain", type=float, default=300.0, help="at most this long to wait for a backlog to go")
    parser.add_argument("--jobs", default="", help="comma-separated jobs to deploy (default: the whole pipeline)")
    parser.add_argument(
        "--launcher",
        choices=[Launcher.SUBPROCESS.value, Launcher.SHARED.value],
        default=Launcher.SHARED.value,
        help="KAPPA_DEPLOY_LAUNCHER of the deployments: a driver JVM per job, or one Spark application",
    )
    parser.add_argument("--idle", type=float, default=0.0, help="first measure this many seconds with no clicks")
    parser.add_argument("--polling-delay-ms", type=int, default=None, help="KAPPA_SPARK_POLLING_DELAY_MS of the jobs")
    parser.add_argument("--also-ran", default="nothing else", help="what else ran on the machine, for the report")
    args = parser.parse_args()

    jobs = [j for j in args.jobs.split(",") if j] or pipeline_jobs()
    rows: list[dict[str, Any]] = []
    profile: list[dict[str, Any]] = []
    cpu: list[dict[str, Any]] = []
    with bench_stack() as settings:
        kappa(settings, "schemas", "apply")
        kappa(settings, "topics", "apply")
        produce_profiles(settings, args.users)
        pipeline = Pipeline.of(settings, jobs)
        chosen: dict[str, Any] = {"deploy_launcher": Launcher(args.launcher)}
        if args.polling_delay_ms is not None:
            chosen["spark_polling_delay_ms"] = args.polling_delay_ms
        settings = settings.model_copy(update=chosen)
        with deployed(settings, jobs):
            settle(settings, pipeline, args.users)
            if args.idle:
                drained(settings, pipeline, args.drain)
                cpu.append(idle_cost(settings, pipeline, args.idle))
            found = None
            for rate in args.rates.split(","):
                if behind := drained(settings, pipeline, args.drain):
                    rows.append({"rate": rate, "path": f"not measured: {behind:,} records of backlog after "
                                 f"{args.drain:.0f} s"})  # fmt: skip
                    continue
                if rate == "sustained":
                    found = sustained(settings, pipeline, args.search_from, args.probe_seconds, args.users, args.drain)
                    print(f"highest rate that kept up: {found:,} clicks/s", flush=True)
                    if not found:
                        continue
                    rate = str(found)
                result = measure(settings, pipeline, int(rate), args.seconds, args.warmup, args.users, args.drain)
                rows += result["rows"]
                profile += result["profile"]
                cpu.append(result["cpu"])
    notes = [
        {
            "note": f"{os.cpu_count()} cores; jobs deployed (KAPPA_DEPLOY_LAUNCHER={args.launcher}, "
            f"KAPPA_SPARK_POLLING_DELAY_MS={settings.spark_polling_delay_ms}): "
            f"{', '.join(jobs)}; also ran: {args.also_ran}"
        },
        {"note": "latency in ms from each click's produce timestamp; `seen`: clicks whose result was found"},
    ]
    report("latency", rows, batch_profile=profile, cpu=cpu, notes=notes)


if __name__ == "__main__":
    main()
