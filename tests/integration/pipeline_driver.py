"""Run one job of the pipeline against a test's own topics, as `kappa jobs run` would, in its own process.

    python -m tests.integration.pipeline_driver <job> '<{"clicks": "clicks-test-1a2b", ...}>' \
        [--available-now] [--max-offsets N] [--freshness "2 seconds"]

The stack's settings come from the environment (KAPPA_*). The Kappa-promise test kills this process with
SIGKILL in the middle of a run and starts it again.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from kappa.core.settings import load_settings
from kappa.runtime.discovery import get_job
from kappa.runtime.runner import configure_logging, run_job


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("job")
    parser.add_argument("bindings", help="declared topic name -> the test's topic name (JSON)")
    parser.add_argument("--available-now", action="store_true")
    parser.add_argument("--max-offsets", type=int)
    parser.add_argument("--freshness", help="the job's freshness in a continuous run (its trigger: half of it)")
    args = parser.parse_args(argv)
    configure_logging()
    spec = get_job(args.job).bound(json.loads(args.bindings))
    if args.freshness:
        spec = dataclasses.replace(spec, freshness=args.freshness)
    report = run_job(spec, load_settings(), available_now=args.available_now, max_offsets_per_trigger=args.max_offsets)
    print(f"DONE {report.job} batches={report.batches} rows={report.input_rows}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
