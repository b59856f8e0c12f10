"""The metrics' own cost: the CPU time `JobMetrics.batch` takes per batch and a scrape's rendering takes, on a
progress shaped like the live pipeline's (sources of 4 partitions, two state operators), and what share of a core
that is at the deployed pipeline's batch rate and a 15 s scrape. A profile of the metrics path, not the whole
pipeline's figure (that is `make bench-live` run with KAPPA_METRICS_ENABLED=false beside a run with it on)."""

from __future__ import annotations

import argparse
import json
import time

from prometheus_client import generate_latest

from kappa.core.observed import RECORD_AGE_COUNT, RECORD_AGE_GRID_S, RECORD_AGE_SUM_MS, record_age_column
from kappa.runtime.metrics import REGISTRY, JobMetrics
from tests.benchmarks.common import run_main

# The deployed pipeline's batches per second at most (a batch every half of the declared freshness): enrich_clicks
# every 0.5 s, sessionize every 1 s, raw_clicks and the three views every 30 s; the real-time lane's batches last
# minutes.
BATCHES_PER_S = 1 / 0.5 + 1 / 1 + 4 / 30


def _ages(records: int) -> dict[str, int]:
    """A live batch's observed record ages: spread over its first seconds of the grid."""
    cells = {record_age_column(point): min(records, round(records * point / 2)) for point in RECORD_AGE_GRID_S}
    return {RECORD_AGE_COUNT: records, RECORD_AGE_SUM_MS: records * 900, **cells}


def _progress(batch: int) -> dict[str, object]:
    offsets = {str(p): 1000 * batch + p for p in range(4)}
    later = {str(p): 1000 * batch + p + 250 for p in range(4)}
    return {
        "name": "enrich_clicks_v1",
        "batchId": batch,
        "numInputRows": 1000,
        "durationMs": {"triggerExecution": 420, "addBatch": 300, "latestOffset": 20, "queryPlanning": 40},
        "sources": [
            {
                "startOffset": {"clicks": offsets},
                "endOffset": {"clicks": later},
                "latestOffset": {"clicks": later},
                "numInputRows": 900,
            },
            {
                "startOffset": {"user_profiles": offsets},
                "endOffset": {"user_profiles": later},
                "latestOffset": {"user_profiles": later},
                "numInputRows": 100,
            },
        ],
        "sink": {"numOutputRows": -1},
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(1.8e9 + batch / 2)),
        "observedMetrics": {
            "kappa_record_age:clicks": _ages(900),
            "kappa_record_age:user_profiles": _ages(100),
            "kappa_side_rows": {"all": 3, "undecodable": 1, "late-event": 2},
        },
        "stateOperators": [{"numRowsTotal": 2000, "memoryUsedBytes": 9_000_000}] * 2,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batches", type=int, default=20_000)
    args = parser.parse_args()
    jobs = [JobMetrics(f"job_{i}", 1) for i in range(7)]  # the pipeline's seven jobs' series
    progress = [_progress(i) for i in range(args.batches)]
    started = time.process_time()
    for i, p in enumerate(progress):
        jobs[i % 7].batch(p)
    per_batch_us = (time.process_time() - started) / args.batches * 1e6
    started, scrapes = time.process_time(), 500
    for _ in range(scrapes):
        size = len(generate_latest(REGISTRY))
    per_scrape_us = (time.process_time() - started) / scrapes * 1e6
    core_share = (per_batch_us * BATCHES_PER_S + per_scrape_us / 15) / 1e6
    print(f"JobMetrics.batch: {per_batch_us:,.1f} µs CPU per batch")
    print(f"a scrape of 7 jobs' series ({size:,} bytes): {per_scrape_us:,.0f} µs CPU")
    print(f"at {BATCHES_PER_S:.2f} batches/s and a scrape every 15 s: {core_share:.6%} of one core")
    print(json.dumps({"per_batch_us": round(per_batch_us, 1), "per_scrape_us": round(per_scrape_us),
                      "core_share": core_share}))  # fmt: skip


if __name__ == "__main__":
    run_main(main)
