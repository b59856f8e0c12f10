"""enrich_clicks run live on the latency benchmark's own topics, with a chosen trigger interval.

Started by bench_pipeline.py as a subprocess (settings from its KAPPA_* environment); SIGTERM stops it after
its current batch, as `kappa jobs run` does. Not a platform command: a production job keeps its declared
interval, and the benchmark only needs to see what a shorter one would give.
"""

from __future__ import annotations

import argparse
import logging
import sys

from kappa.runtime.runner import run_job
from kappa.settings import load_settings
from tests.benchmarks.bench_pipeline import latency_spec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--interval", required=True, help='Spark processing-time trigger, e.g. "5 seconds"')
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stdout)
    report = run_job(latency_spec(args.interval), load_settings())
    print(f"{report.job}: stopped after {report.seconds:.1f} s, {sum(report.input_rows.values())} input rows")


if __name__ == "__main__":
    main()
