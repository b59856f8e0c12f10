"""What a job run says about itself: `<deployments_dir>/<job>.v<N>.run.json`, written by the run.

The process that runs a job version (`kappa jobs run`, or the job host's thread for it) rewrites this small JSON
file atomically (a reader never sees half of it) when the run starts, when a query starts, after each batch of
its output query, while it waits for a lost service, and when it ends. `kappa jobs status`, Dagster's health
sensor and its materializations read it (kappa.lifecycle.deployments) instead of parsing the log. What the run
cannot write, that it was killed, the deployment's exit record says (written by the shell wrapper or the job host,
which outlive the job).

One run per version at a time (the checkpoint lock), so the file is the latest run's: a deployment's start resets
it (`reset`) before the run begins, so nothing in it describes an earlier run except `rows`, the version's total.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from kappa.core.errors import KappaError
from kappa.core.settings import KappaSettings
from kappa.runtime.declaration import version_id, version_name

log = logging.getLogger("kappa.runner")

ERROR_CHARS = 1000  # a last error is its first line, cut here (the log has the whole of it)


class RunState(StrEnum):
    STARTING = "starting"  # the process runs, its query has not started yet (a Spark session takes seconds)
    RUNNING = "running"
    RETRYING = "retrying"  # Kafka or the registry went away: it starts its query again once they answer
    STOPPED = "stopped"  # ended cleanly: a stop, or the end of the input of an available-now run
    FAILED = "failed"  # ended by an error (last_error)


@dataclass(frozen=True)
class LastBatch:
    at: datetime  # when the run recorded it (UTC), just after the batch's commit
    batch_id: int
    rows: int  # its input rows


@dataclass(frozen=True)
class RunRecord:
    job: str
    version: int
    state: RunState
    pid: int | None = None  # the process running the job (a deployment's driver, or the job host)
    started_at: str | None = None  # ISO 8601, UTC
    updated_at: str | None = None
    queries: dict[str, dict[str, str]] = field(default_factory=dict)  # query name -> {"id", "run_id"}
    last_batch: LastBatch | None = None
    rows: int = 0  # the output query's input rows over every run of the version
    last_error: str | None = None
    metrics_url: str | None = None  # where the run's process serves this version's metrics (kappa.runtime.metrics)


SUFFIX = ".run.json"


def file_name(job: str, version: int) -> str:
    return f"{version_name(job, version)}{SUFFIX}"


def record_path(settings: KappaSettings, job: str, version: int) -> Path:
    return settings.deployments_path / file_name(job, version)


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def read(path: Path) -> RunRecord | None:
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError) as exc:
        raise KappaError(f"run record {path} unreadable ({exc}): it is rewritten at the job's next start") from None
    last = data.pop("last_batch", None)
    batch = None if last is None else LastBatch(datetime.fromisoformat(last["at"]), last["batch_id"], last["rows"])
    return RunRecord(**data | {"state": RunState(data["state"])}, last_batch=batch)


def write(path: Path, record: RunRecord) -> None:
    """Atomically: a temporary file beside it, renamed over it."""
    data = asdict(record)
    if record.last_batch is not None:
        data["last_batch"]["at"] = record.last_batch.at.isoformat(timespec="milliseconds")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)


def reset(path: Path, job: str, version: int) -> None:
    """A new run of the version begins: its total rows kept, everything else about the last run forgotten."""
    write(path, RunRecord(job, version, RunState.STARTING, rows=_rows_so_far(path)))


def _rows_so_far(path: Path) -> int:
    try:
        previous = read(path)
    except KappaError:  # unreadable: it held nothing worth keeping
        return 0
    return previous.rows if previous else 0


def describe_error(exc: BaseException) -> str:
    """An error's first line, as the record keeps it (a KappaError's message is the CLI's own line)."""
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    line = first if isinstance(exc, KappaError) else f"{type(exc).__name__}: {first}".rstrip(": ")
    return line[:ERROR_CHARS]


class RunRecorder:
    """The run's writer of its record. Called from the runner's thread and from Spark's listener thread."""

    def __init__(self, path: Path, job: str, version: int, output_query: str) -> None:
        self.path = path
        self._output_query = output_query
        self._lock = threading.RLock()  # a batch reads and adds to the record under it
        now = now_iso()
        self._record = RunRecord(job, version, RunState.STARTING, os.getpid(), now, now, rows=_rows_so_far(path))
        write(path, self._record)

    @classmethod
    @contextlib.contextmanager
    def recording(cls, settings: KappaSettings, job: str, version: int) -> Iterator[RunRecorder]:
        """A run's record, from its start to its end: stopped, or failed with the error that ended it."""
        recorder = cls(record_path(settings, job, version), job, version, version_id(job, version))
        try:
            yield recorder
        except BaseException as exc:
            recorder._update(state=RunState.FAILED, last_error=describe_error(exc))
            raise
        recorder._update(state=RunState.STOPPED)

    @property
    def record(self) -> RunRecord:
        return self._record

    def query_started(self, name: str, query_id: str, run_id: str) -> None:
        with self._lock:
            queries = {**self._record.queries, name: {"id": query_id, "run_id": run_id}}
            self._update(state=RunState.RUNNING, queries=queries)

    def batch(self, progress: dict[str, Any]) -> None:
        """One batch of a query of the run: the output query's is the run's last batch."""
        if progress.get("name") != self._output_query:
            return
        rows = int(progress.get("numInputRows", 0))
        batch = LastBatch(datetime.now(UTC), int(progress.get("batchId", -1)), rows)
        with self._lock:
            self._update(state=RunState.RUNNING, last_batch=batch, rows=self._record.rows + rows)

    def serving(self, metrics_url: str) -> None:
        self._update(metrics_url=metrics_url)

    def retrying(self, cause: str) -> None:
        self._update(state=RunState.RETRYING, last_error=cause[:ERROR_CHARS])

    def _update(self, **changes: Any) -> None:
        with self._lock:
            self._record = replace(self._record, **changes, updated_at=now_iso())
            try:
                write(self.path, self._record)
            except OSError as exc:  # like the group offsets: a full disk must not stop the job (the log says it)
                log.warning("could not write the run record %s: %s", self.path, exc)
