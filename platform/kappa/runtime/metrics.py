"""Each job process's metrics in the Prometheus exposition format, at `/metrics` (the table: docs/metrics.md).

Fed by the same per-batch progress the log line and the run record come from (one Spark listener event per
batch, already in Python: no extra Py4J call, nothing per record), so the metrics cost a few dictionary reads per
batch; the side rows by kind are counted in the JVM as each batch runs (kappa.spark.side_outputs.observe_side_rows,
reported in the same event). The lag alone is computed when scraped, against Kafka's end offsets.

prometheus_client rather than Spark's own Prometheus servlet: Spark's names carry the application and query ids
(a new series at every restart, nothing that says job and version), and it knows nothing of the platform's own
figures (restarts after a lost service, the version a query runs).

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
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from confluent_kafka import Consumer, KafkaException, TopicPartition
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from kappa.contracts.dead_letter_format import SIDE_ROWS_OBSERVED, side_rows_by_kind
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
LAG_NAME = "kappa_job_consumer_lag_offsets"  # computed when scraped (_LiveLag)
LAG_DOC = (
    "Offsets of an input topic beyond the last completed batch's end: Kafka's end offsets when scraped (when Kafka "
    "does not answer, as Spark saw them when it planned that batch)"
)
LAST_BATCH = Gauge(
    "kappa_job_last_batch_timestamp_seconds", "When the last micro-batch completed (Unix time)", _JOB,
    registry=REGISTRY,
)  # fmt: skip
SIDE_ROWS = Counter(
    "kappa_job_side_rows",
    "Records set aside, by kind: dead letters (to the input's .dlq: undecodable, unknown-schema-id, "
    "contract-violation, ...) and late records (to the output's .late: late-event; other: the job's own kinds)",
    (*_JOB, "kind"),
    registry=REGISTRY,
)
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


LAG_TIMEOUT_S = 2.0  # a scrape waits this long for Kafka's end offsets, once: then it says the planned lag


class _LiveLag(Collector):
    """The lag of every running job version of the process, computed when scraped: a job that stops completing
    batches shows its lag grow, where a gauge set per batch would keep the last batch's value for ever."""

    def __init__(self) -> None:
        self.jobs: dict[tuple[str, str], JobMetrics] = {}
        self._lock = threading.Lock()  # one scrape at a time uses the consumers
        self._consumers: dict[str, Consumer] = {}

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(LAG_NAME, LAG_DOC, labels=[*_JOB, "topic"])
        with self._lock:
            reachable = True  # one wait for a Kafka that does not answer per scrape, not one per partition
            for metrics in list(self.jobs.values()):
                ends, planned = metrics.last_ends, metrics.planned_lag
                for topic in sorted(set(ends) | set(planned)):
                    lag = None
                    if reachable and metrics.bootstrap is not None and topic in ends:
                        try:
                            lag = self._behind(metrics.bootstrap, topic, ends[topic])
                        except KafkaException:
                            reachable = False
                    lag = planned.get(topic, 0) if lag is None else lag
                    family.add_metric([metrics.labels["job"], metrics.labels["version"], topic], lag)
        yield family

    def _behind(self, bootstrap: str, topic: str, ends: dict[int, int]) -> int:
        consumer = self._consumers.get(bootstrap)
        if consumer is None:
            config = {"bootstrap.servers": bootstrap, "group.id": "kappa-metrics", "log_level": 0}
            consumer = self._consumers[bootstrap] = Consumer(config)
        return sum(
            max(0, consumer.get_watermark_offsets(TopicPartition(topic, p), LAG_TIMEOUT_S, cached=False)[1] - end)
            for p, end in ends.items()
        )


_LAG = _LiveLag()
REGISTRY.register(_LAG)


class JobMetrics:
    """The metrics of one job version in this process. `bootstrap`: the Kafka its lag is measured against when
    scraped (None: the lag its last batch's plan saw)."""

    def __init__(self, job: str, version: int, bootstrap: str | None = None) -> None:
        self.labels = {"job": job, "version": str(version)}
        self.bootstrap = bootstrap
        self.last_ends: dict[str, dict[int, int]] = {}  # topic -> partition -> the last batch's end offset
        self.planned_lag: dict[str, int] = {}  # topic -> offsets left behind when the last batch was planned
        RUNNING.labels(**self.labels).set(0)
        _LAG.jobs[(job, str(version))] = self

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
                self.planned_lag[topic] = behind
            for topic, ends in _offsets(source.get("endOffset")).items():
                self.last_ends[topic] = {int(p): offset for p, offset in ends.items()}
        observed = (progress.get("observedMetrics") or {}).get(SIDE_ROWS_OBSERVED) or {}
        for kind, rows in side_rows_by_kind(observed).items():
            SIDE_ROWS.labels(**labels, kind=kind).inc(rows)
        operators = progress.get("stateOperators") or []
        STATE_ROWS.labels(**labels).set(sum(int(op.get("numRowsTotal", 0)) for op in operators))
        STATE_MEMORY.labels(**labels).set(sum(int(op.get("memoryUsedBytes", 0)) for op in operators))

    def restarting(self, service: str) -> None:
        """The query failed for want of `service` ("kafka", "registry") and is started again once it answers."""
        RUNNING.labels(**self.labels).set(0)
        RESTARTS.labels(**self.labels, service=service).inc()

    def stopped(self) -> None:
        """The run ended: no lag is said for it any more (a stopped version's lag grows on purpose)."""
        RUNNING.labels(**self.labels).set(0)
        if _LAG.jobs.get((self.labels["job"], self.labels["version"])) is self:
            del _LAG.jobs[(self.labels["job"], self.labels["version"])]


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
