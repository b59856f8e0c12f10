"""Each job process's metrics in the Prometheus exposition format, at `/metrics` (the table: docs/metrics.md).

Fed by the same per-batch progress the log line and the run record come from (one Spark listener event per
batch, already in Python: no extra Py4J call, nothing per record), so the metrics cost a few dictionary reads per
batch. prometheus_client rather than Spark's own Prometheus servlet: Spark's names carry the application and
query ids (a new series at every restart, nothing that says job and version), and it knows nothing of the
platform's own figures (restarts after a lost service, the version a query runs).

One HTTP server per process, on `KAPPA_METRICS_HOST`:`KAPPA_METRICS_PORT` (port 0: a free port, chosen per
process, so that every deployment of one machine can serve); its address goes into each run's record (for `kappa
jobs status`) and into a scrape target file beside it, `<deployments_dir>/<job>.v<N>.scrape.json`, in Prometheus'
file_sd format: a Prometheus that watches `*.scrape.json` finds every running version without a reload. The job
host serves all its jobs from one server (their target files name the same address: Prometheus scrapes it once).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from kappa.core.errors import KappaError
from kappa.core.settings import KappaSettings
from kappa.runtime.declaration import version_name

log = logging.getLogger("kappa.metrics")

REGISTRY = CollectorRegistry(auto_describe=True)  # the process's own: nothing of prometheus_client's defaults
_JOB = ("job", "version")

BATCHES = Counter("kappa_job_batches", "Micro-batches the job's query completed", _JOB, registry=REGISTRY)
INPUT_RECORDS = Counter("kappa_job_input_records", "Records read, all inputs", _JOB, registry=REGISTRY)
INPUT_OFFSETS = Counter(
    "kappa_job_input_offsets",
    "Offsets read past in an input topic (its records, and the gaps compaction and transaction markers leave)",
    (*_JOB, "topic"),
    registry=REGISTRY,
)
OUTPUT_ROWS = Counter(
    "kappa_job_output_rows", "Rows the job's query wrote, as its sink counts them", _JOB, registry=REGISTRY
)
BATCH_DURATION = Histogram(
    "kappa_job_batch_duration_seconds",
    "Wall time of each micro-batch, from its trigger to its commit",
    _JOB,
    buckets=(0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0),
    registry=REGISTRY,
)
CONSUMER_LAG = Gauge(
    "kappa_job_consumer_lag_offsets",
    "Offsets of an input topic beyond the last batch's end, as Kafka had them when that batch was planned",
    (*_JOB, "topic"),
    registry=REGISTRY,
)
LAST_BATCH = Gauge(
    "kappa_job_last_batch_timestamp_seconds", "When the last micro-batch completed (Unix time)", _JOB,
    registry=REGISTRY,
)  # fmt: skip
STATE_ROWS = Gauge("kappa_job_state_rows", "Keys held in the query's state stores", _JOB, registry=REGISTRY)
STATE_MEMORY = Gauge("kappa_job_state_memory_bytes", "Memory the query's state stores use", _JOB, registry=REGISTRY)
RESTARTS = Counter(
    "kappa_job_restarts",
    "Times the job's query was started again after a service went away, by service (kafka, registry)",
    (*_JOB, "service"),
    registry=REGISTRY,
)
RUNNING = Gauge(
    "kappa_job_running", "1 while the job's query runs; 0 while it waits for a lost service, or has stopped", _JOB,
    registry=REGISTRY,
)  # fmt: skip

_serving = threading.Lock()
_url: str | None = None


def serve(settings: KappaSettings) -> str | None:
    """Start the process's metrics server once (later calls return its address); None when metrics are off."""
    global _url
    if not settings.metrics_enabled:
        return None
    with _serving:
        if _url is None:
            _url = start_server(settings.metrics_host, settings.metrics_port)
            log.info("metrics at %s", _url)
        return _url


def start_server(host: str, port: int) -> str:
    """A metrics server of the process's registry on host:port (0: a free port); its /metrics address."""
    try:
        server, _thread = start_http_server(port, host, registry=REGISTRY)
    except OSError as exc:
        raise KappaError(
            f"cannot serve metrics on {host}:{port} ({exc.strerror or exc}): set KAPPA_METRICS_PORT to a free "
            "port, or to 0 for any free port (KAPPA_METRICS_ENABLED=false: no metrics)"
        ) from None
    return f"http://{host}:{server.server_port}/metrics"


def _offsets(value: Any) -> dict[str, dict[str, int]]:
    """A source's offsets in a progress (a JSON object, or its text): topic -> partition -> offset."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return {}
    if not isinstance(value, dict):
        return {}
    return {t: {p: int(o) for p, o in parts.items()} for t, parts in value.items() if isinstance(parts, dict)}


def source_offsets(source: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """topic -> (offsets the batch read past, offsets it left behind: Kafka's latest, as Spark saw them when it
    planned the batch, minus the batch's end), from one source of a progress. A topic whose latest offsets the
    source did not report has no lag (0)."""
    start, end = _offsets(source.get("startOffset")), _offsets(source.get("endOffset"))
    latest = _offsets(source.get("latestOffset"))
    found = {}
    for topic, ends in end.items():
        if topic not in start and len(end) == 1:  # a query's first batch has no start: its rows are the topic's
            read = int(source.get("numInputRows", 0))
        else:
            read = sum(max(0, offset - start.get(topic, {}).get(p, offset)) for p, offset in ends.items())
        behind = sum(max(0, offset - ends.get(p, 0)) for p, offset in latest.get(topic, {}).items())
        found[topic] = (read, behind)
    return found


class JobMetrics:
    """The metrics of one job version in this process."""

    def __init__(self, job: str, version: int) -> None:
        self.labels = {"job": job, "version": str(version)}
        RUNNING.labels(**self.labels).set(0)

    def started(self) -> None:
        RUNNING.labels(**self.labels).set(1)

    def batch(self, progress: dict[str, Any]) -> None:
        """One completed micro-batch of the job's output query (its StreamingQueryProgress as a JSON dict)."""
        labels = self.labels
        BATCHES.labels(**labels).inc()
        took_ms = float((progress.get("durationMs") or {}).get("triggerExecution", 0))
        BATCH_DURATION.labels(**labels).observe(took_ms / 1000)
        LAST_BATCH.labels(**labels).set(time.time())
        written = int((progress.get("sink") or {}).get("numOutputRows", -1))
        if written > 0:  # -1: a sink that does not count (foreachBatch)
            OUTPUT_ROWS.labels(**labels).inc(written)
        INPUT_RECORDS.labels(**labels).inc(int(progress.get("numInputRows", 0)))
        for source in progress.get("sources", []):
            for topic, (read, behind) in source_offsets(source).items():
                INPUT_OFFSETS.labels(**labels, topic=topic).inc(read)
                CONSUMER_LAG.labels(**labels, topic=topic).set(behind)
        operators = progress.get("stateOperators") or []
        STATE_ROWS.labels(**labels).set(sum(int(op.get("numRowsTotal", 0)) for op in operators))
        STATE_MEMORY.labels(**labels).set(sum(int(op.get("memoryUsedBytes", 0)) for op in operators))

    def restarting(self, service: str) -> None:
        """The query failed for want of `service` ("kafka", "registry") and is started again once it answers."""
        RUNNING.labels(**self.labels).set(0)
        RESTARTS.labels(**self.labels, service=service).inc()

    def stopped(self) -> None:
        RUNNING.labels(**self.labels).set(0)


def target_path(settings: KappaSettings, job: str, version: int) -> Path:
    return settings.deployments_path / f"{version_name(job, version)}.scrape.json"


def publish_target(settings: KappaSettings, job: str, version: int, url: str) -> None:
    """The version's scrape target, for Prometheus' file_sd (written atomically: it reads the file on change)."""
    address = urlsplit(url)
    group = [
        {
            "targets": [address.netloc],
            "labels": {"__metrics_path__": address.path, "kappa_version": version_name(job, version)},
        }
    ]
    path = target_path(settings, job, version)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(group, indent=2) + "\n")
        tmp.replace(path)
    except OSError as exc:  # like the run record: metrics must not stop the job (the log says it)
        log.warning("could not write the scrape target %s: %s", path, exc)


def withdraw_target(settings: KappaSettings, job: str, version: int) -> None:
    """A run that ends cleanly is no target any more (one that crashed stays: Prometheus sees it down)."""
    target_path(settings, job, version).unlink(missing_ok=True)
