"""Run jobs of the pipeline against a test's own topics, as `kappa jobs run` (one job) or the job host (several)
would, in a process of their own.

    python -m tests.integration.pipeline_driver <job>[,<job>...] '<{"clicks": "clicks-test-1a2b", ...}>' \
        [--available-now] [--max-offsets N] [--freshness "2 seconds"]

The stack's settings come from the environment (KAPPA_*). One job runs as `kappa jobs run` runs it and prints
`DONE <job> ...` at its end. Several run as the job host runs its deployments (kappa.lifecycle.job_host): one Spark
application, each job in a thread of its own and in its own FAIR pool; a line `stop <job>` on standard input stops
that job after its current batch (SIGTERM, or the end of standard input: all of them), `STOPPED <job> ...` says it
stopped, and the process ends once every job has. Armed by a test (kappa.runtime.faults), the process kills itself
with SIGKILL in the middle of a run, and the test starts it again.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
import threading
import traceback
from types import FrameType

from kappa.core.settings import KappaSettings, load_settings
from kappa.lifecycle.job_host import host_session, in_pool_of
from kappa.runtime import JobSpec
from kappa.runtime.discovery import get_job
from kappa.runtime.runner import configure_logging, run_job


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("jobs", help="the job, or several separated by commas (then: one Spark application)")
    parser.add_argument("bindings", help="declared topic name -> the test's topic name (JSON)")
    parser.add_argument("--available-now", action="store_true")
    parser.add_argument("--max-offsets", type=int)
    parser.add_argument("--freshness", help="the job's freshness in a continuous run (its trigger: half of it)")
    args = parser.parse_args(argv)
    if "," in args.jobs and (args.available_now or args.max_offsets):
        parser.error("--available-now and --max-offsets are for one job; several run continuously")
    configure_logging()
    specs = [get_job(name).bound(json.loads(args.bindings)) for name in args.jobs.split(",")]
    if args.freshness:
        specs = [dataclasses.replace(spec, freshness=args.freshness) for spec in specs]
    if len(specs) > 1:
        return _host(specs, load_settings())
    [spec] = specs
    report = run_job(spec, load_settings(), available_now=args.available_now, max_offsets_per_trigger=args.max_offsets)
    print(f"DONE {report.job} batches={report.batches} rows={report.input_rows}", flush=True)
    return 0


def _host(specs: list[JobSpec], settings: KappaSettings) -> int:
    """Every job continuously in one Spark application, each stopped by `stop <job>` on stdin or by SIGTERM."""
    stops = {spec.name: threading.Event() for spec in specs}
    failed: list[str] = []

    def stop_all(_signum: int, _frame: FrameType | None) -> None:
        for stop in stops.values():
            stop.set()

    signal.signal(signal.SIGTERM, stop_all)
    settings, spark = host_session(settings)

    def run(spec: JobSpec) -> None:
        try:
            in_pool_of(spark, spec.name)
            report = run_job(spec, settings, stop=stops[spec.name])
            print(f"STOPPED {spec.name} batches={report.batches} rows={report.input_rows}", flush=True)
        except Exception:  # one job's end, never the others'
            failed.append(spec.name)
            print(f"FAILED {spec.name}\n{traceback.format_exc()}", flush=True)

    def read_stops() -> None:
        for line in sys.stdin:
            verb, _, job = line.strip().partition(" ")
            if verb == "stop" and job in stops:
                stops[job].set()
        stop_all(signal.SIGTERM, None)  # the test that started us is gone: nothing runs unwatched

    threading.Thread(target=read_stops, daemon=True).start()
    threads = [threading.Thread(target=run, args=(spec,), name=f"job-{spec.name}") for spec in specs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    spark.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
