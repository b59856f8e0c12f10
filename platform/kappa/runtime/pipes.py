"""Optional progress reporting to Dagster Pipes, for `kappa jobs run --pipes` (Dagster launching a job).

Dagster orchestrates from outside: it starts `kappa jobs run` as a subprocess and reads back what this module
reports. Only the `--pipes` flag turns it on, and only then is `dagster_pipes` imported; job code and the rest
of the runtime never depend on Dagster.

What Dagster receives: one log line and one custom message per micro-batch (query, batch id, rows, rows/s,
duration), and the run report as the materialization's metadata when the run ends.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from dagster_pipes import DAGSTER_PIPES_CONTEXT_ENV_VAR, open_dagster_pipes

from kappa.core.errors import KappaError
from kappa.runtime.progress import describe_batch
from kappa.runtime.runner import RunReport

BATCH_MESSAGE = "kappa.batch"  # the `kind` of the per-batch custom messages


def batch_message(progress: dict[str, Any]) -> dict[str, Any]:
    """The custom message for one batch, from its StreamingQueryProgress (as JSON dict)."""
    return {
        "kind": BATCH_MESSAGE,
        "query": progress.get("name"),
        "batch_id": int(progress.get("batchId", -1)),
        "input_rows": int(progress.get("numInputRows", 0)),
        "rows_per_second": float(progress.get("processedRowsPerSecond") or 0.0),
        "duration_ms": int((progress.get("durationMs") or {}).get("triggerExecution", 0)),
    }


def report_metadata(report: RunReport) -> dict[str, Any]:
    """The materialization metadata of a run: the output query's batches and rows, and every query's."""
    rows = report.input_rows.get(report.output_query, 0)
    return {
        "job": report.job,
        "version": report.version,
        "batches": report.batches.get(report.output_query, 0),
        "input_rows": rows,
        "seconds": round(report.seconds, 3),
        "rows_per_second": round(rows / report.seconds, 1) if report.seconds > 0 else 0.0,
        "stopped_by_signal": report.stopped_by_signal,
        # Per query (a job runs one): what Dagster shows when a run is opened.
        "queries": {
            "raw_value": {
                q: {"batches": n, "input_rows": report.input_rows.get(q, 0)} for q, n in report.batches.items()
            },
            "type": "json",
        },
    }


class PipesReporter:
    """Sends a run's progress to the Dagster process that launched it."""

    def __init__(self, context: Any) -> None:
        self._context = context
        self._lock = threading.Lock()  # Spark's listener thread and the main thread both report

    def batch(self, progress: dict[str, Any]) -> None:
        with self._lock:
            self._context.log.info(describe_batch(progress))
            self._context.report_custom_message(batch_message(progress))

    def message(self, kind: str, payload: dict[str, Any], line: str | None = None) -> None:
        """A custom message `{"kind": kind, **payload}`, and a log line in the run's logs."""
        with self._lock:
            if line:
                self._context.log.info(line)
            self._context.report_custom_message({"kind": kind, **payload})

    def materialize(self, metadata: dict[str, Any]) -> None:
        with self._lock:
            self._context.report_asset_materialization(metadata=metadata)

    def finish(self, report: RunReport) -> None:
        with self._lock:
            self._context.report_asset_materialization(metadata=report_metadata(report))


def require_pipes() -> None:
    """Fail at once, before any work, unless Dagster Pipes launched this process."""
    if DAGSTER_PIPES_CONTEXT_ENV_VAR not in os.environ:
        raise KappaError(f"--pipes: not launched by Dagster Pipes ({DAGSTER_PIPES_CONTEXT_ENV_VAR} is not set)")


@contextmanager
def pipes_reporter() -> Iterator[PipesReporter]:
    """Open the Pipes connection Dagster prepared (its DAGSTER_PIPES_* environment); an exception inside the
    block is reported to Dagster as the run's failure before it propagates."""
    require_pipes()

    with open_dagster_pipes() as context:
        yield PipesReporter(context)
