"""What security costs: the replay and the live pipeline on a plaintext bench stack, then on a secured one
(`kappa up --secure`: TLS, SCRAM-SHA-512 logins, ACLs, each job as its own principal), one run after the
other in one invocation (issue 38).

1. Replay (`bench_pipeline.py --jobs enrich_clicks,raw_clicks` by default): per row (Kafka's own
   ConsumerPerformance, each job's read+decode, pass-through and replay) events/s plaintext and secured, and the
   ratio. Each run generates its topics (a secured stack starts empty: its CA and users are its own).
2. Live (`bench_live.py`): the pipeline deployed with `kappa jobs start` at `--live-rates` for `--live-minutes`;
   per path its p50/p99, per job its batches' p50 and highest lag, the cores of the jobs, Kafka and the machine.
3. Connections: 50 new admin connections to each stack, each asking for the cluster's description, in one
   process: SCRAM's salted hashing is paid per connection (the CLI, the sensors), not per record.

Each run is a subprocess of its own (never two at once) that reports to a JSON file; this machine's speed
(common.machine_speed) is timed before each, as a ratio is worth only between runs of the same pace. The bench
stack is purged after each run.
"""

from __future__ import annotations

import argparse
import shlex
import tempfile
import time
from pathlib import Path
from typing import Any

from kappa.core.settings import KappaSettings, Security
from kappa.kafka.clients import admin_client
from tests.benchmarks.bench_cluster import Result, live_table, replay_table, run_child
from tests.benchmarks.common import bench_stack, machine_speed, purge_bench_stack, report, run_main

CONNECTIONS = 50
SIDES = ("plaintext", "secured")  # the two runs' names in the tables, secured/plaintext their ratio


def describe_cluster(settings: KappaSettings) -> None:
    """A new admin client's first request. The client is held until its answer came: a client collected
    before then destroys its handle and fails the request."""
    client = admin_client(settings)
    client.describe_cluster(request_timeout=30).result(timeout=35)


def connections(secured: bool) -> dict[str, Any]:
    """Milliseconds per new admin connection that describes the cluster (the handshake, and SCRAM's login)."""
    with bench_stack(security=Security.SASL_SSL if secured else Security.PLAINTEXT) as settings:
        describe_cluster(settings)  # the broker warmed up
        started = time.monotonic()
        for _ in range(CONNECTIONS):
            describe_cluster(settings)
        ms = (time.monotonic() - started) * 1000 / CONNECTIONS
    return {"what": f"a new admin connection ({CONNECTIONS}, one after the other)", "secured": secured,
            "ms_each": round(ms, 1)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=2_000_000, help="clicks each replay generates (default 2M)")
    parser.add_argument("--users", type=int, default=5000, help="users of the replay's clicks")
    parser.add_argument("--jobs", default="enrich_clicks,raw_clicks", help="the jobs replayed (bench_pipeline)")
    parser.add_argument("--live-jobs", default="", help="the jobs deployed live (default: every job)")
    parser.add_argument("--live-rates", default="1000", help="bench_live's --rates (default 1000)")
    parser.add_argument("--live-minutes", type=float, default=3.0, help="bench_live's --minutes (default 3)")
    parser.add_argument("--live-args", default="", help="more options for both bench_live runs")
    parser.add_argument("--skip-pipeline", action="store_true", help="no replay runs")
    parser.add_argument("--skip-live", action="store_true", help="no live runs")
    parser.add_argument("--json-out", type=Path, default=None, help="also write the RESULT line's JSON to this file")
    args = parser.parse_args()

    replay = ["--events", str(args.events), "--users", str(args.users), "--no-py-spy", "--jobs", args.jobs]
    live = ["--rates", args.live_rates, "--minutes", str(args.live_minutes), "--idle", "0",
            *(["--jobs", args.live_jobs] if args.live_jobs else []), *shlex.split(args.live_args)]  # fmt: skip
    planned: list[tuple[str, str, list[str]]] = []
    if not args.skip_pipeline:
        planned += [("replay plaintext", "tests.benchmarks.bench_pipeline", replay),
                    ("replay secured", "tests.benchmarks.bench_pipeline", [*replay, "--secure"])]  # fmt: skip
    if not args.skip_live:
        planned += [("live plaintext", "tests.benchmarks.bench_live", live),
                    ("live secured", "tests.benchmarks.bench_live", [*live, "--secure"])]  # fmt: skip

    results: dict[str, Result | None] = {}
    runs: list[dict[str, Any]] = []
    handshakes: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="bench-security-") as folder:
            for run, module, options in planned:
                speed = machine_speed()
                results[run] = run_child(module, options, Path(folder) / f"{run.replace(' ', '-')}.json")
                runs.append({"run": run, "ok": results[run] is not None, **speed})
        handshakes = [connections(secured=False), connections(secured=True)]
    finally:
        purge_bench_stack()

    sections: dict[str, list[dict[str, Any]]] = {"live": [], "connections": handshakes}
    plain, secured = results.get("replay plaintext"), results.get("replay secured")
    replayed = replay_table(plain, secured, SIDES) if plain and secured else []
    live_plain, live_secured = results.get("live plaintext"), results.get("live secured")
    if live_plain and live_secured:
        sections["live"] = live_table(live_plain, live_secured, SIDES)
    notes = [
        "secured/plaintext: a rate's ratio below 1, a time's or a latency's above 1, is what TLS, SCRAM and the "
        "authorizer cost; Kafka's ConsumerPerformance row reads over the same listener as the jobs",
        "compare only runs whose machine speeds (`runs`, SHA-256 MB/s per core) agree",
    ]
    report("security", replayed, args.json_out, **sections, runs=runs, notes=[{"note": n} for n in notes])
    if failed := [run for run, result in results.items() if result is None]:
        raise SystemExit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    run_main(main)
