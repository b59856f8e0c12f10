"""Each job process's metrics in the Prometheus exposition format, at `/metrics` (the table: docs/metrics.md).

Fed by the same per-batch progress the log line and the run record come from (one Spark listener event per
batch, already in Python: no extra Py4J call, nothing per record), so the metrics cost a few dictionary reads per
batch; the side rows by kind and the input records' ages are counted in the JVM as each batch runs
(kappa.spark.side_outputs.observe_side_rows, kappa.spark.topic_io.observe_record_age; reported in the same
event). The lag alone is computed when scraped, against Kafka's end offsets; its seconds from the times at which
the job saw each end offset (as kafka-lag-exporter does: the time an offset was appended, interpolated between
two end offsets seen, is the age of the oldest record the job has not read).

prometheus_client rather than Spark's own Prometheus servlet: Spark's names carry the application and query ids
(a new series at every restart, nothing that says job and version), and it knows nothing of the platform's own
figures (restarts after a lost service, the version a query runs).

One HTTP server per process, on `KAPPA_METRICS_HOST`:`KAPPA_METRICS_PORT` (port 0: a free port, chosen per
process, so that every deployment of one machine can serve): `/metrics` has every series of the process,
`/metrics/<job>.v<N>` those of one version (and those of no version: the datasets'). The version's address goes
into its run's record (for `kappa jobs status` and `kappa top`) and into a scrape target file beside it,
`<deployments_dir>/<job>.v<N>.scrape.json`, in Prometheus' file_sd format: a Prometheus that watches
`*.scrape.json` finds every running version without a reload. A target per version, each reading its own path:
the job host serves several versions from one server, and Prometheus scrapes each target (its labels differ), so
targets reading the whole process would count each series once per version the host runs.
"""

from __future__ import annotations

import bisect
import json
import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from wsgiref.simple_server import WSGIRequestHandler, make_server

from confluent_kafka import Consumer, KafkaException, TopicPartition
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.registry import Collector

from kappa.contracts.dead_letter_format import SIDE_ROWS_OBSERVED, side_rows_by_kind
from kappa.core.errors import KappaError
from kappa.core.observed import (
    RECORD_AGE_COUNT,
    RECORD_AGE_GRID_S,
    RECORD_AGE_OBSERVED,
    RECORD_AGE_SUM_MS,
    record_age_column,
)
from kappa.core.settings import KappaSettings
from kappa.runtime.declaration import version_name
from kappa.runtime.live_versions import LiveVersions
from kappa.runtime.progress_offsets import EndOffsetsSeen, SourceOffsets, unix_time

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
LAG_SECONDS_NAME = "kappa_job_consumer_lag_seconds"  # computed when scraped (_LiveLag)
LAG_SECONDS_DOC = (
    "Age of the oldest record of an input topic the job has not read (the worst partition): when Kafka's end "
    "offset passed it, interpolated between the end offsets seen at batches and scrapes"
)
LATENCY_NAME = "kappa_job_record_latency_seconds"  # a histogram of counts observed in the JVM (_RecordLatency)
LATENCY_DOC = (
    "From each input record's Kafka timestamp to the commit of the live batch that read it (counted on a grid of "
    "ages, a record's age counted at most twice as high; records a rule holds in state wait longer for their output)"
)
LATENCY_BUCKETS_S = (0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 900.0, 3600.0)
REPLAY_PROGRESS = Gauge(
    "kappa_job_replay_progress_ratio",
    "An available-now run (a replay, a catch-up): offsets read this run over those and the offsets its plan has "
    "left (1: done)",
    _JOB,
    registry=REGISTRY,
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
        server = make_server(host, port, _app, ThreadingWSGIServer, handler_class=_Quiet)
    except OSError as exc:
        raise KappaError(
            f"cannot serve metrics on {host}:{port} ({exc.strerror or exc}): set KAPPA_METRICS_PORT to a free "
            "port, or to 0 for any free port (KAPPA_METRICS_ENABLED=false: no metrics)"
        ) from None
    threading.Thread(target=server.serve_forever, name="kappa-metrics", daemon=True).start()
    return f"http://{host}:{server.server_port}/metrics"


def version_url(url: str, job: str, version: int) -> str:
    """The address of one version's series on the process's metrics server at `url`."""
    return f"{url}/{version_name(job, version)}"


class _OneVersion(Collector):
    """The registry's series of one job version, and those of no version (each dataset's live version)."""

    def __init__(self, job: str, version: str) -> None:
        self.job, self.version = job, version

    def collect(self) -> Iterator[Metric]:
        _LAG.scraping.version = (self.job, self.version)
        try:
            families = list(REGISTRY.collect())
        finally:
            _LAG.scraping.version = None
        for family in families:
            kept = Metric(family.name, family.documentation, family.type, family.unit)
            kept.samples = [
                s
                for s in family.samples
                if s.labels.get("job", self.job) == self.job and s.labels.get("version", self.version) == self.version
            ]
            if kept.samples:
                yield kept


_whole = make_wsgi_app(REGISTRY)


def _app(environ: dict[str, Any], start_response: Any) -> Any:
    """`/metrics`: the process's series; `/metrics/<job>.v<N>`: one version's (version_url)."""
    path = environ.get("PATH_INFO", "")
    if path.startswith("/metrics/"):
        job, dot_v, version = path.removeprefix("/metrics/").rpartition(".v")
        if job and dot_v and version.isdigit():
            return make_wsgi_app(_OneVersion(job, version))(environ, start_response)  # type: ignore[arg-type]
        # A mistyped target must not be served the whole process: its series would be counted twice.
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [f"{path}: not a job version's address (/metrics/<job>.v<N>)\n".encode()]
    return _whole(environ, start_response)


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # a scrape every few seconds is no news
        pass


LAG_TIMEOUT_S = 2.0  # a scrape waits this long for Kafka's end offsets, once: then it says the planned lag


class _LiveLag(Collector):
    """The lag of every running job version of the process, in offsets and in seconds, computed when scraped: a
    job that stops completing batches shows its lag grow, where a gauge set per batch would keep the last batch's
    value for ever."""

    def __init__(self) -> None:
        self.jobs: dict[tuple[str, str], JobMetrics] = {}
        self._lock = threading.Lock()  # one scrape at a time uses the consumers
        self._consumers: dict[str, Consumer] = {}
        self.scraping = threading.local()  # `.version`: (job, version) while a scrape of one version collects

    def _scraped(self) -> list[JobMetrics]:
        """The versions this scrape asks for: one version's target asks Kafka for that version's offsets only."""
        version: tuple[str, str] | None = getattr(self.scraping, "version", None)
        return [m for key, m in list(self.jobs.items()) if version is None or key == version]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        offsets = GaugeMetricFamily(LAG_NAME, LAG_DOC, labels=[*_JOB, "topic"])
        seconds = GaugeMetricFamily(LAG_SECONDS_NAME, LAG_SECONDS_DOC, labels=[*_JOB, "topic"])
        with self._lock:
            reachable = True  # one wait for a Kafka that does not answer per scrape, not one per partition
            for metrics in self._scraped():
                ends, planned = metrics.last_ends, metrics.planned_lag
                for topic in sorted(set(ends) | set(planned)):
                    lag = None
                    now = time.time()
                    if reachable and metrics.kafka is not None and topic in ends:
                        try:
                            lag = self._behind(metrics, topic, now)
                        except KafkaException:
                            reachable = False
                    lag = planned.get(topic, 0) if lag is None else lag
                    labels = [metrics.labels["job"], metrics.labels["version"], topic]
                    offsets.add_metric(labels, lag)
                    seconds.add_metric(labels, metrics.lag_seconds(topic, now))
        yield offsets
        yield seconds

    def _behind(self, metrics: JobMetrics, topic: str, now: float) -> int:
        """Offsets of `topic` beyond the job's last batch, against Kafka's end offsets now (which the job's
        partitions then remember having seen)."""
        assert metrics.kafka is not None
        # One consumer per Kafka and login: on a secured cluster each job version asks as its own principal, which
        # may describe only its own topics.
        place = f"{metrics.kafka['bootstrap.servers']} {metrics.kafka.get('sasl.username', '')}"
        consumer = self._consumers.get(place)
        if consumer is None:
            consumer = self._consumers[place] = Consumer({**metrics.kafka, "group.id": "kappa-metrics", "log_level": 0})
        behind = 0
        for p, read in metrics.last_ends[topic].items():
            end = consumer.get_watermark_offsets(TopicPartition(topic, p), LAG_TIMEOUT_S, cached=False)[1]
            metrics.saw_end(topic, p, now, end)
            behind += max(0, end - read)
        return behind


_LAG = _LiveLag()
REGISTRY.register(_LAG)


class _RecordLatency(Collector):
    """Each live job version's latency histogram per input topic, from the ages its batches observed in the JVM:
    a record `age` old when its batch started is `age + the batch's duration` old when the batch commits, and is
    counted in the bucket of its grid cell's upper point plus that duration (a count per cell, not per record)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._series: dict[tuple[str, str, str], tuple[list[int], list[float]]] = {}  # counts per bucket, [sum]

    def add(self, labels: tuple[str, str, str], observed: dict[str, Any], batch_s: float) -> None:
        records = int(observed.get(RECORD_AGE_COUNT) or 0)
        if records == 0:
            return
        with self._lock:
            counts, total = self._series.setdefault(labels, ([0] * (len(LATENCY_BUCKETS_S) + 1), [0.0]))
            below = 0
            for point, column in _AGE_COLUMNS:
                at_most = int(observed.get(column) or 0)
                if at_most > below:
                    counts[bisect.bisect_left(LATENCY_BUCKETS_S, point + batch_s)] += at_most - below
                below = max(below, at_most)
            counts[-1] += records - below  # older than the grid: above every bucket
            total[0] += float(observed.get(RECORD_AGE_SUM_MS) or 0) / 1000 + records * batch_s

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(LATENCY_NAME, LATENCY_DOC, labels=[*_JOB, "topic"])
        with self._lock:
            for labels, (counts, total) in sorted(self._series.items()):
                cumulative, buckets = 0, []
                for bound, count in zip((*LATENCY_BUCKETS_S, float("inf")), counts, strict=True):
                    cumulative += count
                    buckets.append(("+Inf" if bound == float("inf") else str(bound), cumulative))
                family.add_metric(list(labels), buckets, total[0])
        yield family


_AGE_COLUMNS = tuple((point, record_age_column(point)) for point in RECORD_AGE_GRID_S)
_LATENCY = _RecordLatency()
REGISTRY.register(_LATENCY)


_LIVE_VERSIONS = LiveVersions(_JOB)
REGISTRY.register(_LIVE_VERSIONS)


class JobMetrics:
    """The metrics of one job version in this process. `kafka`: the client configuration of the Kafka its lag is
    measured against when scraped (None: the lag its last batch's plan saw)."""

    def __init__(
        self, job: str, version: int, kafka: Mapping[str, Any] | None = None, available_now: bool = False
    ) -> None:
        self.labels = {"job": job, "version": str(version)}
        self.kafka = kafka
        self.available_now = available_now  # a replay or catch-up: its progress through its plan is a figure
        self.last_ends: dict[str, dict[int, int]] = {}  # topic -> partition -> the last batch's end offset
        self.planned_lag: dict[str, int] = {}  # topic -> offsets left behind when the last batch was planned
        self._ends_seen: dict[tuple[str, int], EndOffsetsSeen] = {}
        self._read_this_run = 0
        RUNNING.labels(**self.labels).set(0)
        if available_now:
            REPLAY_PROGRESS.labels(**self.labels).set(0)
        _LAG.jobs[(job, str(version))] = self

    def writes(self, settings: KappaSettings, dataset: str) -> None:
        """The version writes `dataset`: its live version (and whether it is this one) is exported from the alias
        registry of `settings`' Kafka."""
        _LIVE_VERSIONS.watch(self.labels["job"], self.labels["version"], settings, dataset)

    def saw_end(self, topic: str, partition: int, when: float, end: int) -> None:
        """Kafka's end offset of one input partition, as seen at `when` (a batch's plan, a scrape)."""
        self._ends_seen.setdefault((topic, partition), EndOffsetsSeen()).saw(when, end)

    def lag_seconds(self, topic: str, now: float) -> float:
        """The age of the oldest record of `topic` the job has not read (its worst partition), by the ends seen."""
        return max(
            (
                seen.age_s(self.last_ends.get(topic, {}).get(p, 0), now)
                for (t, p), seen in list(self._ends_seen.items())
                if t == topic
            ),
            default=0.0,
        )

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
        planned_at = unix_time(progress.get("timestamp"))
        for source in map(SourceOffsets.of, progress.get("sources", [])):
            for topic, (read, behind) in source.read_and_behind().items():
                INPUT_OFFSETS.labels(**labels, topic=topic).inc(read)
                self.planned_lag[topic] = behind
                self._read_this_run += read
            for topic, latest in source.latest.items():
                for partition, end in latest.items():
                    if planned_at is not None:
                        self.saw_end(topic, int(partition), planned_at, end)
            for topic, ends in source.end.items():
                self.last_ends[topic] = {int(p): offset for p, offset in ends.items()}
                for number, offset in self.last_ends[topic].items():
                    if (topic, number) in self._ends_seen:
                        self._ends_seen[(topic, number)].read_up_to(offset)
        if self.available_now:
            left = sum(self.planned_lag.values())
            done = self._read_this_run / (self._read_this_run + left) if self._read_this_run + left else 1.0
            REPLAY_PROGRESS.labels(**labels).set(done)
        observed_metrics = progress.get("observedMetrics") or {}
        for kind, rows in side_rows_by_kind(observed_metrics.get(SIDE_ROWS_OBSERVED) or {}).items():
            SIDE_ROWS.labels(**labels, kind=kind).inc(rows)
        for name, ages in observed_metrics.items():
            if name.startswith(RECORD_AGE_OBSERVED) and isinstance(ages, dict):
                topic = name[len(RECORD_AGE_OBSERVED) :]
                _LATENCY.add((labels["job"], labels["version"], topic), ages, took_ms / 1000)
        operators = progress.get("stateOperators") or []
        STATE_ROWS.labels(**labels).set(sum(int(op.get("numRowsTotal", 0)) for op in operators))
        STATE_MEMORY.labels(**labels).set(sum(int(op.get("memoryUsedBytes", 0)) for op in operators))

    def restarting(self, service: str) -> None:
        """The query failed for want of `service` ("kafka", "registry") and is started again once it answers."""
        RUNNING.labels(**self.labels).set(0)
        RESTARTS.labels(**self.labels, service=service).inc()

    def stopped(self) -> None:
        """The run ended: no lag is said for it any more (a stopped version's lag grows on purpose), nor whether
        it is live."""
        RUNNING.labels(**self.labels).set(0)
        if _LAG.jobs.get((self.labels["job"], self.labels["version"])) is self:
            del _LAG.jobs[(self.labels["job"], self.labels["version"])]
        _LIVE_VERSIONS.forget(self.labels["job"], self.labels["version"])


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
