"""Day two, measured: the whole pipeline deployed as a user deploys it (`kappa jobs start`, declared versions and
cadences, the job host), clicks at a steady `--rate` for `--minutes`, the tables maintained as Dagster's hourly
schedule maintains them (`kappa tables maintain`, every `--maintain-every` minutes here, with the retention
shortened to `--retention-minutes` so that what weeks would pile up shows within the run).

Every `--every` minutes it prints, for the window just ended: each job's batches, p50 and p99 batch duration and
lag; each Delta table's files (those of its current version, and on disk: the replaced ones not yet vacuumed
included), bytes and log files; each job's checkpoint folder (files, bytes); the job host's RSS and its JVM's parts:
heap committed, the least heap in use after a collection in the window (from the JVM's GC log: the floor a leak
pushes up), old generation in use, native memory (the JVM's RSS beyond its heap), and the Python processes'.

The verdict (issue 40), between the second and the last 10 minutes (for a run under 30 minutes: its second window
and its last): each job's p99 batch duration within 20 % of itself, files per table and checkpoint sizes bounded
(the last no more than 20 % above the second), the host's RSS flat (within 10 %); and, once the producer stopped
and the pipeline drained (at most `--drain-minutes`), every output exact against the answer computed from the input
topics (tests.benchmarks.soak_exactness).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from deltalake import DeltaTable as DeltaRsTable

from kappa.core.settings import KappaSettings, load_settings
from kappa.lifecycle.host_registry import hosts, is_host
from kappa.lifecycle.lag import lag
from kappa.lifecycle.maintenance import OnDisk
from kappa.runtime.binding import deployed_job, physical_output
from kappa.runtime.declaration import version_checkpoints
from kappa.runtime.outputs import output_of
from kappa.stack.java import spark_java_path
from tests.benchmarks import soak_exactness
from tests.benchmarks.bench_live import (
    Pipeline,
    deployed,
    drained,
    job_batches,
    kappa,
    pipeline_jobs,
    produce_at_rate,
    produce_profiles,
    settle,
)
from tests.benchmarks.common import bench_stack, machine_speed, print_table, report, run_main

MB = 1_000_000


@dataclass
class Window:
    """What one interval's samples say, by what they measure."""

    minute: float
    jobs: list[dict[str, Any]]
    tables: list[dict[str, Any]]
    checkpoints: list[dict[str, Any]]
    host: dict[str, Any]


class Producer(threading.Thread):
    """Clicks at a steady rate until stopped, a minute's worth at a time (nothing kept: the soak counts rows)."""

    def __init__(self, settings: KappaSettings, rate: int, users: int) -> None:
        super().__init__(daemon=True)
        self.settings, self.rate, self.users = settings, rate, users
        self.halt = threading.Event()
        self.sent = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.halt.is_set():
                produced = produce_at_rate(self.settings, self.rate, 60, self.users, f"soak-{uuid.uuid4().hex[:8]}")
                self.sent += len(produced.ids)
        except BaseException as exc:  # reported by the main thread, which stops the soak
            self.error = exc

    def stop(self) -> None:
        self.halt.set()
        self.join()


def folder(path: str) -> tuple[int, int]:
    """(files, bytes) under a local folder."""
    files = size = 0
    for root, _, names in os.walk(path.removeprefix("file:")):
        for name in names:
            files += 1
            try:
                size += (Path(root) / name).stat().st_size
            except FileNotFoundError:  # deleted meanwhile (a purge of old batches)
                files -= 1
    return files, size


GC_PAUSE = re.compile(r"^\[([\d.]+)s\].*Pause .* (\d+)M->(\d+)M\((\d+)M\)")


def gc_logging(folder: Path) -> str:
    """The JVM option that logs each collection to `folder`, one file per JVM (by pid): the soak's own probe."""
    folder.mkdir(parents=True, exist_ok=True)
    return f"-Xlog:gc:file={folder}/gc-%p.log:uptime"


def heap_after_gc(log: Path, since_uptime_s: float) -> int | None:
    """The least heap in use right after a collection (MB) among the pauses since `since_uptime_s` of the JVM's
    uptime: the live data plus what that collection left, a bound a leak pushes up; None before a pause."""
    if not log.exists():
        return None
    after = [int(m[3]) for line in log.read_text().splitlines() if (m := GC_PAUSE.match(line))
             and float(m[1]) >= since_uptime_s]  # fmt: skip
    return min(after) if after else None


def host_memory(settings: KappaSettings, since: float, gc_logs: Path) -> dict[str, Any]:
    """The running job host's memory: RSS of its processes (the JVM's apart), the JVM's heap committed (jstat)
    and its least heap in use after a collection since `since` (the GC log); the rest of the JVM's RSS is native
    memory (RocksDB's state stores, metaspace, threads)."""
    running = [h for h in hosts(settings) if is_host(h.pid)]
    if not running:
        return {"host_rss_mb": None}
    root = psutil.Process(running[0].pid)
    tree = [root, *root.children(recursive=True)]
    rss = {p.pid: p.memory_info().rss for p in tree if p.is_running()}
    jvm = next((p for p in tree if p.name() == "java"), None)
    row: dict[str, Any] = {"host_rss_mb": round(sum(rss.values()) / MB)}
    if jvm is not None:
        jstat = Path(spark_java_path()).with_name("jstat")
        out = subprocess.run([str(jstat), "-gc", str(jvm.pid)], capture_output=True, text=True, timeout=30).stdout
        header, values = out.split("\n")[:2]
        gc = {k: float(v) for k, v in zip(header.split(), values.split(), strict=False)}
        committed = (gc["S0C"] + gc["S1C"] + gc["EC"] + gc["OC"]) / 1000  # KB
        jvm_rss = rss.get(jvm.pid, 0) / MB
        uptime = since - jvm.create_time()
        row |= {"jvm_rss_mb": round(jvm_rss), "heap_committed_mb": round(committed),
                "heap_after_gc_mb": heap_after_gc(gc_logs / f"gc-{jvm.pid}.log", uptime),
                "old_gen_in_use_mb": round(gc["OU"] / 1000), "jvm_native_mb": round(jvm_rss - committed),
                "python_rss_mb": round(sum(rss.values()) / MB - jvm_rss)}  # fmt: skip
    return row


def sample(settings: KappaSettings, jobs: list[tuple[str, int]], since: float, minute: float, gc_logs: Path) -> Window:
    rows, tables, checkpoints = [], [], []
    for job, version in jobs:
        batches = job_batches(settings, job, version, since)
        ms = np.array([b["ms"] for b in batches]) if batches else np.array([0])
        rows.append({"minute": minute, "job": job, "batches": len(batches), "p50_ms": int(np.percentile(ms, 50)),
                     "p99_ms": int(np.percentile(ms, 99)), "lag": lag(settings, job, version).total})  # fmt: skip
        files, size = folder(version_checkpoints(settings, job, version))
        checkpoints.append({"minute": minute, "job": job, "files": files, "mb": round(size / MB, 1)})
        spec = deployed_job(settings, job)
        if output_of(spec.output).storage == "delta":
            path = physical_output(spec, settings, version)[1]
            disk = OnDisk.of(path)
            tables.append({"minute": minute, "table": output_of(spec.output).name,
                           "live_files": len(DeltaRsTable(path).file_uris()), "files_on_disk": disk.data_files,
                           "mb_on_disk": round(disk.data_bytes / MB, 1), "log_files": disk.log_files})  # fmt: skip
    return Window(minute, rows, tables, checkpoints, {"minute": minute, **host_memory(settings, since, gc_logs)})


def verdict(windows: list[Window], minutes: float) -> list[dict[str, Any]]:
    """The issue's comparison: the second 10 minutes against the last 10 (short runs: second window, last)."""
    if len(windows) < 3:
        return [{"what": "verdict", "verdict": "not enough windows (3 at least)"}]
    if minutes >= 30:
        second = [w for w in windows if 10 < w.minute <= 20]
        last = [w for w in windows if w.minute > windows[-1].minute - 10]
    else:
        second, last = [windows[1]], [windows[-1]]
    found: list[dict[str, Any]] = []

    def worst(ws: list[Window], pick: str, key: str, name: str, value: str) -> float:
        return max(r[value] for w in ws for r in getattr(w, pick) if r[key] == name)

    for row in windows[-1].jobs:
        a, b = (worst(ws, "jobs", "job", row["job"], "p99_ms") for ws in (second, last))
        found.append({"what": f"{row['job']} p99 batch (ms)", "second": a, "last": b,
                      "verdict": "flat" if b <= 1.2 * max(a, 1) else "GREW"})  # fmt: skip
        a, b = (
            worst(second, "checkpoints", "job", row["job"], "mb"),
            worst(last, "checkpoints", "job", row["job"], "mb"),
        )
        found.append({"what": f"{row['job']} checkpoint (MB)", "second": a, "last": b,
                      "verdict": "bounded" if b <= 1.2 * max(a, 0.1) else "GREW"})  # fmt: skip
    for row in windows[-1].tables:
        name = row["table"]
        a, b = (
            worst(second, "tables", "table", name, "files_on_disk"),
            worst(last, "tables", "table", name, "files_on_disk"),
        )
        found.append({"what": f"{name} data files on disk", "second": a, "last": b,
                      "verdict": "bounded" if b <= 1.2 * max(a, 1) else "GREW"})  # fmt: skip
        # Delta deletes expired log entries by whole days (its cleanup cuts at the start of a day): within a run
        # shorter than a day the log grows with the commits, then stays at about a day and the retention's worth.
        a, b = worst(second, "tables", "table", name, "log_files"), worst(last, "tables", "table", name, "log_files")
        found.append({"what": f"{name} log files", "second": a, "last": b,
                      "verdict": "grows until Delta's daily cleanup"})  # fmt: skip
    floor = [w.host.get("heap_after_gc_mb") or 0 for w in second], [w.host.get("heap_after_gc_mb") or 0 for w in last]
    found.append({"what": "job host heap after GC, least (MB)", "second": max(floor[0]), "last": max(floor[1]),
                  "verdict": "flat" if max(floor[1]) <= 1.2 * max(max(floor[0]), 1) else "GREW"})  # fmt: skip
    rss = [w.host["host_rss_mb"] or 0 for w in second], [w.host["host_rss_mb"] or 0 for w in last]
    found.append({"what": "job host RSS (MB)", "second": max(rss[0]), "last": max(rss[1]),
                  "verdict": "flat" if max(rss[1]) <= 1.1 * max(max(rss[0]), 1) else "GREW"})  # fmt: skip
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, default=1000, help="clicks/s, steady")
    parser.add_argument("--minutes", type=float, default=60.0, help="how long the soak runs (after settling)")
    parser.add_argument("--every", type=float, default=5.0, help="minutes between two samples")
    parser.add_argument("--maintain-every", type=float, default=10.0, help="minutes between two maintenances")
    parser.add_argument("--retention-minutes", type=float, default=10.0, help="Delta file and log retention")
    parser.add_argument("--batches-retained", type=int, default=20, help="KAPPA_STREAMING_BATCHES_RETAINED")
    parser.add_argument("--users", type=int, default=2000)
    parser.add_argument("--drain-minutes", type=float, default=15.0, help="at most this long to drain, then check")
    parser.add_argument("--also-ran", default="nothing else", help="what else ran on the machine, for the report")
    args = parser.parse_args()

    speed = machine_speed()  # before anything starts: an hour's figures are compared only beside the machine's pace
    print(f"machine speed: {speed}", flush=True)
    names = pipeline_jobs()
    windows: list[Window] = []
    maintained: list[dict[str, Any]] = []
    hours = args.retention_minutes / 60
    gc_logs = load_settings().state_dir / "bench" / "soak-gc"
    with bench_stack(delta_file_retention_hours=hours, delta_log_retention_hours=hours,
                     streaming_batches_retained=args.batches_retained,
                     spark_driver_java_options=gc_logging(gc_logs)) as settings:  # fmt: skip
        kappa(settings, "schemas", "apply")
        kappa(settings, "topics", "apply")
        produce_profiles(settings, args.users)
        jobs = [(job, deployed_job(settings, job).version) for job in names]
        with deployed(settings, names):
            settle(settings, Pipeline.of(settings, names), args.users)  # the jobs' first batches are start-up
            producer = Producer(settings, args.rate, args.users)
            producer.start()
            began = time.monotonic()
            window_start, next_maintenance = time.time(), args.maintain_every
            try:
                while True:
                    minute = (time.monotonic() - began) / 60
                    if producer.error is not None:
                        raise RuntimeError(f"the producer failed: {producer.error}")
                    if minute >= next_maintenance and minute < args.minutes:
                        next_maintenance += args.maintain_every
                        said = kappa(settings, "tables", "maintain").strip().splitlines()
                        lines = [line for line in said if not line.startswith("Deleted ")]  # Delta's own VACUUM line
                        maintained += [{"minute": round(minute, 1), "line": line} for line in lines]
                        print("\n".join(f"  maintain @ {minute:.1f} min: {line}" for line in lines), flush=True)
                    ended = minute >= args.minutes  # the last window ends the run
                    if minute >= (len(windows) + 1) * args.every or ended:
                        window = sample(settings, jobs, window_start, round(minute, 1), gc_logs)
                        window_start = time.time()
                        windows.append(window)
                        print(f"\n--- minute {minute:.1f}: {producer.sent:,} clicks sent", flush=True)
                        for part in (window.jobs, window.tables, window.checkpoints, [window.host]):
                            print_table(part)
                    if ended:
                        break
                    time.sleep(5)
            finally:
                producer.stop()
            # Exact after all that: the outputs against answers computed from the inputs, once drained.
            print(f"\n--- {producer.sent:,} clicks sent; waiting for the pipeline to drain ...", flush=True)
            if behind := drained(settings, Pipeline.of(settings, names), args.drain_minutes * 60):
                exactness = [{"output": "every", "exact": f"not checked: {behind:,} records behind after "
                              f"{args.drain_minutes:g} min"}]  # fmt: skip
            else:
                exactness = soak_exactness.check(settings)
            print_table(exactness)
    found = verdict(windows, args.minutes) + [
        {"what": f"exact: {row['output']}", "verdict": row["exact"]} for row in exactness
    ]
    notes = [{"note": f"{os.cpu_count()} cores; {args.rate:,} clicks/s for {args.minutes:g} min; jobs: "
              f"{', '.join(names)}; retention {args.retention_minutes:g} min; maintenance every "
              f"{args.maintain_every:g} min; also ran: {args.also_ran}"}]  # fmt: skip
    report(
        "soak",
        [r for w in windows for r in w.jobs],
        tables=[r for w in windows for r in w.tables],
        checkpoints=[r for w in windows for r in w.checkpoints],
        host=[w.host for w in windows],
        maintenance=maintained,
        exactness=exactness,
        machine_speed=[speed],
        verdict=found,
        notes=notes,
    )


if __name__ == "__main__":
    run_main(main)
