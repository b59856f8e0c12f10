"""The cluster's overhead on the same cores: the pipeline's replay and the live pipeline, each on local Spark and
then on the bench stack's Spark standalone workers, one run after the other in one invocation (issue 37).

1. Replay (`bench_pipeline.py`): on `local[W]`, then on `--workers` W workers of one core each (W task slots either
   way, on this machine's cores), the second run on the topics the first generated (`--reuse`: the bench stack is
   kept between them; each executor has 1/W of the local driver's memory, common.spark_overrides). Per job, its
   pass-through and Kafka's own ceiling: events/s local and on the cluster, and the ratio cluster/local.
2. Live (`bench_live.py`): the pipeline deployed, its job host on local[*] (SLOTS_PER_CORE slots per core), then on
   W workers that offer the host as many slots and the real-time job its own; `--live-rates` for `--live-minutes`,
   no idle window. Per path its p50/p99, per job its batches' p50 and highest lag, the cores of the jobs (the
   executors among them), Kafka, the Spark daemons and the machine: local, cluster, ratio.
3. A projection on paper from the cluster's measured cost per click: the cores, and the machines of 2 and of 16
   cores, that 100,000 and 1,000,000 clicks/s would need, for each job, the slowest chain of jobs a click passes
   and every job, and from the live run's cores at the highest rate that kept up. Its assumptions are printed
   with it: it is arithmetic, not a measurement.

Each run is a subprocess of its own (never two at once) that reports to a JSON file (`--json-out`); this machine's
speed (common.machine_speed) is timed before each, as a ratio is worth only between runs of the same pace. The
bench stack is purged at the end. On the same cores the cluster cannot be faster: its ratio is what a user pays
for the ability to add machines.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from kappa.contracts.topic_declarations import Topic
from kappa.core.settings import project_root
from kappa.runtime.declaration import JobSpec
from kappa.runtime.discovery import discover
from tests.benchmarks.common import machine_speed, purge_bench_stack, report, run_main

TARGETS = (100_000, 1_000_000)  # clicks/s the projection is for
MACHINE_CORES = (2, 16)
JOB_ROW = ": job (availableNow)"  # bench_pipeline's row of a job's replay
GENERATED = "generate (Python producer)"  # ... and of the clicks it loaded

Result = dict[str, Any]


# ------------------------------------------------------------------------ the runs ------------------------------


def run_child(module: str, args: list[str], out: Path) -> Result | None:
    """`python -m module args --json-out out`, its output on this terminal; its result, or None if it failed."""
    argv = [sys.executable, "-m", module, *args, "--json-out", str(out)]
    print(f"\n=== {shlex.join(argv[2:])}", flush=True)
    child = subprocess.Popen(argv, cwd=project_root())
    try:
        code = child.wait()
    except KeyboardInterrupt:
        child.wait()  # the same Ctrl-C reached it: it stops its own stack on the way out
        raise
    if code != 0 or not out.is_file():
        print(f"=== {module} failed (exit {code}): its figures are missing below", file=sys.stderr, flush=True)
        return None
    result: Result = json.loads(out.read_text())
    return result


def ratio(cluster: Any, local: Any) -> float | str:
    """cluster / local, or '' where either is not a number."""
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (cluster, local))
    return round(cluster / local, 2) if numbers and local else ""


# ------------------------------------------------------------------------ replay, side by side -----------------


def job_rows(result: Result) -> dict[str, dict[str, Any]]:
    return {row["what"]: row for row in result["rows"]}


def replay_table(before: Result, after: Result, names: tuple[str, str] = ("local", "cluster")) -> list[dict[str, Any]]:
    """Each row both runs measured (Kafka's ceiling, each job's read+decode, pass-through and replay): events/s
    and seconds of each run, named by `names`, and after/before; then every job's replay together."""
    a, b = names
    ours, theirs = job_rows(before), job_rows(after)
    rows = []
    for what, mine in ours.items():
        other = theirs.get(what)
        if what == GENERATED or other is None:
            continue
        rows.append({
            "what": what,
            f"{a}_events_per_s": mine["events_per_s"],
            f"{b}_events_per_s": other["events_per_s"],
            f"{b}/{a}": ratio(other["events_per_s"], mine["events_per_s"]),
            f"{a}_s": mine["seconds"],
            f"{b}_s": other["seconds"],
        })  # fmt: skip
    both = [w for w in ours if w.endswith(JOB_ROW) and w in theirs]
    if both:
        a_s, b_s = (round(sum(rows_[w]["seconds"] for w in both), 2) for rows_ in (ours, theirs))
        rows.append({
            "what": f"every job's replay ({len(both)} jobs; seconds summed, ratio of rates)",
            f"{b}/{a}": ratio(a_s, b_s),
            f"{a}_s": a_s,
            f"{b}_s": b_s,
        })  # fmt: skip
    return rows


# ------------------------------------------------------------------------ live, side by side -------------------


def _lag_seconds(text: str) -> float | str:
    """bench_live's lag cell, `12,345 (6.2 s)`: its seconds of input."""
    found = re.search(r"\(([\d.]+) s\)", text)
    return float(found.group(1)) if found else text


def live_figures(result: Result) -> dict[tuple[Any, str], Any]:
    """(rate, what) -> figure, from a bench_live result: each path's p50/p99 and whether the run kept up; each job's
    batch p50 and highest lag; the cores by part of the machine."""
    figures: dict[tuple[Any, str], Any] = {}
    for row in result["rows"]:
        if "p50" in row:
            figures[(row["rate"], f"{row['path']} p50 ms")] = row["p50"]
            figures[(row["rate"], f"{row['path']} p99 ms")] = row["p99"]
            figures[(row["rate"], "kept up")] = row["kept_up"]
    for row in result.get("batch_profile", []):
        if "ms_p50" in row:
            figures[(row["rate"], f"{row['job']} batch p50 ms")] = row["ms_p50"]
    for row in result.get("lag", []):
        figures[(row["rate"], f"{row['job']} highest lag s")] = _lag_seconds(row["highest"])
    for row in result.get("cpu", []):
        for part in ("jobs", "executors", "kafka", "spark daemons", "machine", "stolen"):
            if part in row:
                figures[(row["rate"], f"cores: {part}")] = row[part]
    return figures


def live_table(before: Result, after: Result, names: tuple[str, str] = ("local", "cluster")) -> list[dict[str, Any]]:
    """bench_live's figures of two runs, side by side, and after/before."""
    a, b = names
    ours, theirs = live_figures(before), live_figures(after)
    return [
        {"rate": rate, "what": what, a: ours.get((rate, what), ""), b: theirs.get((rate, what), ""),
         f"{b}/{a}": ratio(theirs.get((rate, what)), ours.get((rate, what)))}
        for rate, what in dict.fromkeys([*ours, *theirs])
    ]  # fmt: skip


# ------------------------------------------------------------------------ the projection ------------------------


def chains(specs: dict[str, JobSpec]) -> list[list[str]]:
    """Every path of jobs a click's records take: from a job that reads no job's output, through each job that reads
    the topic the one before writes, to a job whose output no job reads."""
    writes = {name: spec.output.name for name, spec in specs.items() if isinstance(spec.output, Topic)}
    readers = {
        topic: [name for name, spec in specs.items() if topic in {t.name for t in spec.inputs}]
        for topic in writes.values()
    }

    def from_(job: str) -> list[list[str]]:
        after = readers.get(writes.get(job, ""), [])
        return [[job, *rest] for nxt in after for rest in from_(nxt)] if after else [[job]]

    roots = [name for name, spec in specs.items() if not {t.name for t in spec.inputs} & set(writes.values())]
    return [chain for root in sorted(roots) for chain in from_(root)]


def _needs(what: str, per_click_core_s: float, parallelism: str = "") -> dict[str, Any]:
    """A projection row: the cores `TARGETS` need at this cost per click, and the machines of `MACHINE_CORES`."""
    row: dict[str, Any] = {"what": what, "clicks_per_s_per_core": 1 / per_click_core_s}
    for target in TARGETS:
        cores = target * per_click_core_s
        row[f"cores@{target:,}"] = math.ceil(cores)
        for size in MACHINE_CORES:
            row[f"{size}-core machines@{target:,}"] = math.ceil(cores / size)
    return row | ({"parallelism_today": parallelism} if parallelism else {})


def projection(pipeline: Result | None, live: Result | None) -> tuple[list[dict[str, Any]], list[str]]:
    """From the cluster runs: rows of what the targets would need, and the notes that say on what assumptions."""
    rows: list[dict[str, Any]] = []
    notes = [
        "PROJECTION ON PAPER, not a measurement: cores = target clicks/s x the core-seconds per click measured on "
        "the cluster; machines = cores / cores per machine, rounded up",
        "assumes cost linear in cores, which holds only up to the partitions: a job's read stage runs one task per "
        "input partition and its stateful stage one per state store partition (spark_shuffle_partitions); beyond "
        "that many cores a job gets no faster, so at these rates its input topics and spark_shuffle_partitions "
        "need at least as many partitions as the cores counted (`parallelism_today` says what they are now)",
    ]
    if pipeline is not None:
        measured = job_rows(pipeline)
        clicks = measured[GENERATED]["events"]
        setup = pipeline["spark"][0]
        cores, shuffle = setup["machine_cores"], setup["shuffle_partitions"]
        specs = discover()
        # a job's replay seconds on all the machine's cores, per click of the data set
        cost = {
            name: measured[f"{name}{JOB_ROW}"]["seconds"] * cores / clicks
            for name in specs
            if f"{name}{JOB_ROW}" in measured and measured[f"{name}{JOB_ROW}"]["seconds"] > 0
        }
        for name, per_click in cost.items():
            inputs = sum(t.partitions for t in specs[name].inputs)
            rows.append(_needs(f"replay: {name}", per_click, f"{inputs} input partitions, {shuffle} shuffle"))
        priced = [chain for chain in chains(specs) if all(job in cost for job in chain)]
        if priced:
            slowest = max(priced, key=lambda chain: sum(cost[job] for job in chain))
            rows.append(_needs(f"replay, slowest chain: {' -> '.join(slowest)}", sum(cost[j] for j in slowest)))
        if cost:
            rows.append(_needs(f"replay, every job measured ({len(cost)})", sum(cost.values())))
        notes += [
            f"replay: each job's seconds for {clicks:,} clicks on all {cores} cores of this machine, on which Kafka, "
            "the driver and the executors all ran (Kafka's own machines are not counted apart); a chain's and the "
            "pipeline's jobs each read every click's records, so their costs add up",
        ]
    if live is not None:
        held = [
            (row["rate"], row["jobs"])
            for row in live.get("cpu", [])
            if row["rate"] and row.get("jobs") and live_figures(live).get((row["rate"], "kept up")) == "yes"
        ]
        if held:
            rate, jobs_cores = max(held)
            rows.append(
                _needs(f"live: every deployed job, at {rate:,} clicks/s on {jobs_cores} cores", jobs_cores / rate)
            )
            notes.append(
                "live: clicks/s over the cores the deployed jobs used (driver and executors, not Kafka) at the "
                "highest measured rate that kept up; it includes each batch's fixed cost (planning), which a higher "
                "rate spreads thinner, so it errs high"
            )
        else:
            notes.append("live: no measured rate kept up on the cluster, so no live projection")
    return rows, notes


# ------------------------------------------------------------------------ main ---------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2, help="Spark workers of the cluster runs (default 2)")
    parser.add_argument("--events", type=int, default=5_000_000, help="clicks the replay generates (default 5M)")
    parser.add_argument("--users", type=int, default=5000, help="users of the replay's clicks")
    parser.add_argument("--jobs", default="", help="comma-separated jobs to replay and deploy (default: every job)")
    parser.add_argument("--live-rates", default="1000", help="bench_live's --rates (default 1000)")
    parser.add_argument("--live-minutes", type=float, default=3.0, help="bench_live's --minutes (default 3)")
    parser.add_argument("--pipeline-args", default="", help="more options for both bench_pipeline runs")
    parser.add_argument("--live-args", default="", help="more options for both bench_live runs")
    parser.add_argument("--skip-pipeline", action="store_true", help="no replay runs")
    parser.add_argument("--skip-live", action="store_true", help="no live runs")
    parser.add_argument("--json-out", type=Path, default=None, help="also write the RESULT line's JSON to this file")
    args = parser.parse_args()
    if args.skip_pipeline and args.skip_live:
        parser.error("--skip-pipeline and --skip-live: nothing to run")
    if not 1 <= args.workers <= 3:
        parser.error("--workers: 1 to 3 (worker i listens on the bench master's port + i, below the registry's)")

    jobs = ["--jobs", args.jobs] if args.jobs else []
    replay = [
        "--events", str(args.events), "--users", str(args.users), "--reuse", "--no-py-spy", *jobs,
        *shlex.split(args.pipeline_args),
    ]  # fmt: skip
    live = ["--rates", args.live_rates, "--minutes", str(args.live_minutes), "--idle", "0", *jobs,
            *shlex.split(args.live_args)]  # fmt: skip
    on_workers = ["--spark-workers", str(args.workers)]
    planned: list[tuple[str, str, list[str]]] = []  # (run, module, its options)
    if not args.skip_pipeline:
        # local[W] and W one-core workers: the same task slots; the second run reuses the first one's topics
        planned += [
            ("replay local", "tests.benchmarks.bench_pipeline", [*replay, "--spark-master", f"local[{args.workers}]"]),
            ("replay cluster", "tests.benchmarks.bench_pipeline", [*replay, *on_workers, "--spark-worker-cores", "1"]),
        ]
    if not args.skip_live:  # bench_live sizes the workers for the job host's slots and the real-time job's
        planned += [
            ("live local", "tests.benchmarks.bench_live", live),
            ("live cluster", "tests.benchmarks.bench_live", [*live, *on_workers]),
        ]

    results: dict[str, Result | None] = {}
    runs: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="bench-cluster-") as folder:
            for run, module, options in planned:
                speed = machine_speed()  # this run's pace, beside the others'
                results[run] = run_child(module, options, Path(folder) / f"{run.replace(' ', '-')}.json")
                found = results[run]
                setup = found["spark"][0] if found else {"master": "FAILED"}
                runs.append({"run": run, **setup, **speed})
    finally:
        purge_bench_stack()  # kept between the replay runs; the live runs purge it themselves

    sections: dict[str, list[dict[str, Any]]] = {"live": [], "projection": []}
    notes: list[str] = []
    replay_local, replay_cluster = results.get("replay local"), results.get("replay cluster")
    replayed = replay_table(replay_local, replay_cluster) if replay_local and replay_cluster else []
    if replayed and replayed[-1]["what"].startswith("every job's replay"):
        total = replayed[-1]
        notes.append(f"replay: every job together took {total['cluster_s']} s on the cluster against "
                     f"{total['local_s']} s local, {ratio(total['cluster_s'], total['local_s'])} times its time "
                     "on the same cores")  # fmt: skip
    if replay_cluster and "reused" not in job_rows(replay_cluster)[GENERATED]["note"]:
        notes.append("replay: the cluster run did NOT reuse the local run's topics (it generated its own)")
    live_local, live_cluster = results.get("live local"), results.get("live cluster")
    if live_local and live_cluster:
        sections["live"] = live_table(live_local, live_cluster)
    sections["projection"], assumptions = projection(replay_cluster, live_cluster)
    notes += [
        "cluster/local: a rate's ratio below 1, a time's or a latency's above 1, is the cluster's cost; Kafka's "
        "ceiling involves no Spark, so its ratio is the machine's own drift between the two runs",
        "compare only runs whose machine speeds (`runs`, SHA-256 MB/s per core) agree",
        *assumptions,
    ]
    report("cluster", replayed, args.json_out, **sections, runs=runs, notes=[{"note": n} for n in notes])
    if failed := [run for run, result in results.items() if result is None]:
        raise SystemExit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    run_main(main)
