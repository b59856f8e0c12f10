"""Per-batch progress: a log line per micro-batch, and the job version's progress as Kafka group offsets.

Spark commits no offsets to Kafka (its checkpoint is the truth). After each batch the runner records the
batch's end offsets under the consumer group `kappa.<job>.v<version>`, so `kafka-consumer-groups` and every
lag dashboard show how far each job version is behind.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from confluent_kafka import Consumer, KafkaError, TopicPartition
from pyspark import SparkContext
from pyspark.sql.streaming import StreamingQueryListener

from kappa.runtime.metrics import JobMetrics
from kappa.runtime.run_record import RunRecorder

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("kappa.progress")


def end_offsets(progress: dict[str, Any]) -> dict[str, dict[int, int]]:
    """topic -> partition -> next offset to read, from a StreamingQueryProgress (as JSON dict)."""
    result: dict[str, dict[int, int]] = {}
    for source in progress.get("sources", []):
        end = source.get("endOffset")
        if isinstance(end, str):
            try:
                end = json.loads(end)
            except json.JSONDecodeError:
                continue
        if not isinstance(end, dict):
            continue
        for topic, partitions in end.items():
            if isinstance(partitions, dict):
                result.setdefault(topic, {}).update({int(p): int(o) for p, o in partitions.items()})
    return result


def checkpoint_offsets(checkpoint: str) -> dict[str, dict[int, int]]:
    """topic -> partition -> next offset, as of the last batch the checkpoint records as committed.

    The checkpoint is the truth about a query's progress. A run that starts (after a crash, say) with nothing
    new to read reports no batch, so the group would keep whatever an earlier run last managed to record;
    the runner records this at start. `offsets/<n>` holds a version line, a metadata line and one JSON line
    per source; `commits/<n>` marks batch n done. A non-local checkpoint (s3://...) yields nothing here.
    """
    root = Path(checkpoint.removeprefix("file:"))
    if "://" in checkpoint or not (root / "commits").is_dir():
        return {}
    done = [int(p.name) for p in (root / "commits").iterdir() if p.name.isdigit()]
    if not done or not (root / "offsets" / str(max(done))).is_file():
        return {}
    result: dict[str, dict[int, int]] = {}
    for line in (root / "offsets" / str(max(done))).read_text().splitlines()[2:]:
        try:
            source = json.loads(line)
        except json.JSONDecodeError:
            continue
        for topic, partitions in source.items() if isinstance(source, dict) else []:
            if isinstance(partitions, dict):
                result.setdefault(topic, {}).update({int(p): int(o) for p, o in partitions.items()})
    return result


def describe_batch(progress: dict[str, Any]) -> str:
    rows = progress.get("numInputRows", 0)
    rate = progress.get("processedRowsPerSecond") or 0.0
    phases = dict(progress.get("durationMs") or {})
    duration = phases.pop("triggerExecution", 0)
    # Where the batch's time went, as Spark measured it (addBatch: the job's own write; the rest: Spark's
    # bookkeeping per batch), largest first: the per-batch profile, in every deployment's log.
    spent = ", ".join(f"{name} {ms}" for name, ms in sorted(phases.items(), key=lambda p: -p[1]) if ms)
    lag = []
    for source in progress.get("sources", []):
        metrics = source.get("metrics") or {}
        if "avgOffsetsBehindLatest" in metrics:
            lag.append(f"behind≈{float(metrics['avgOffsetsBehindLatest']):.0f}/partition")
    return (
        f"{progress.get('name')} batch {progress.get('batchId')}: {rows} rows, {rate:,.0f} rows/s, "
        f"{duration} ms{f' ({spent})' if spent else ''}{(', ' + ', '.join(lag)) if lag else ''}"
    )


class ProgressHub(StreamingQueryListener):
    """The one progress listener of a Spark application: it hands each event to the recorders of the jobs
    running in it (`listen`). The JVM calls every Python listener with every query's every event, each call a
    conversion through Py4J: with a listener per job, the jobs of one application (the job host, the demo's
    replay) would pay it once per job per batch. Registered on first use, it stays for the application."""

    _hubs: ClassVar[dict[int, ProgressHub]] = {}
    _hubs_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self) -> None:
        self._recorders: list[ProgressRecorder] = []
        self._lock = threading.Lock()

    @classmethod
    @contextlib.contextmanager
    def listen(cls, spark: SparkSession, recorder: ProgressRecorder) -> Iterator[None]:
        """`recorder` gets the application's query events while in the block."""
        with cls._hubs_lock:
            hub = cls._hubs.get(id(spark.sparkContext))
            if hub is None:
                hub = cls._hubs[id(spark.sparkContext)] = cls()
                spark.streams.addListener(hub)
        with hub._lock:
            hub._recorders.append(recorder)
        try:
            yield
        finally:
            with hub._lock:
                hub._recorders.remove(recorder)

    def _current(self) -> list[ProgressRecorder]:
        with self._lock:
            return list(self._recorders)

    @property
    def _jlistener(self) -> Any:
        """What pyspark registers in the JVM for this listener (StreamingQueryListener._jlistener): the events,
        each in one Py4J call. pyspark's own wrapper rebuilds every progress event field by field, a Py4J round
        trip each (its sources, their offsets and metrics): measured at 5 % of the job host's CPU with the
        pipeline deployed (make bench-live --profile-seconds)."""
        if not hasattr(self, "_jevents"):
            self._jevents = SparkContext._jvm.PythonStreamingQueryListenerWrapper(_JsonEvents(self))  # type: ignore[union-attr]
        return self._jevents

    def onQueryStarted(self, event: Any) -> None:  # noqa: N802 (Spark's listener API)
        for recorder in self._current():
            recorder.started(event.name, str(event.id), str(event.runId))

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802 (Spark's listener API)
        self.progressed(json.loads(event.progress.json))

    def progressed(self, progress: dict[str, Any]) -> None:
        for recorder in self._current():
            recorder.handle(progress)

    def onQueryIdle(self, event: Any) -> None:  # noqa: N802 (Spark's listener API)
        return None

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802 (Spark's listener API)
        self.terminated(str(event.runId))

    def terminated(self, run_id: str) -> None:
        for recorder in self._current():
            recorder.ended(run_id)


class _JsonEvents:
    """The JVM's listener interface for a ProgressHub, implemented through Py4J: each event as one call (a
    progress as the JSON the JVM writes), an idle query's event not at all."""

    def __init__(self, hub: ProgressHub) -> None:
        self.hub = hub

    def onQueryStarted(self, event: Any) -> None:  # noqa: N802 (the JVM interface's names)
        for recorder in self.hub._current():
            recorder.started(event.name(), event.id().toString(), event.runId().toString())

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802
        self.hub.progressed(json.loads(event.progress().json()))

    def onQueryIdle(self, event: Any) -> None:  # noqa: N802
        return None

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
        self.hub.terminated(event.runId().toString())

    class Java:
        implements: ClassVar[list[str]] = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]


class ProgressRecorder:
    """Logs each batch of the job's queries and commits the output query's offsets to its group. Another job's
    queries in the same Spark application (the job host, a demo's replay) are not its business."""

    def __init__(
        self,
        kafka: Mapping[str, Any],
        groups: dict[str, str | None],
        on_batch: Callable[[dict[str, Any]], None] | None = None,
        run_record: RunRecorder | None = None,
        metrics: JobMetrics | None = None,
    ) -> None:
        """`kafka`: the client configuration of the Kafka to commit to (the job's principal on a secured
        platform); `groups`: query name -> consumer group to record that query's progress under (None: none);
        `on_batch`: also called once per batch with its progress (e.g. to report it to Dagster Pipes);
        `run_record`: the run's record of its queries and batches; `metrics`: the job version's metrics, fed each
        batch."""
        self._on_batch = on_batch
        self._run_record = run_record
        self._metrics = metrics
        self._kafka = kafka
        self._committers: dict[str, Consumer] = {}
        self._last: dict[str, list[TopicPartition]] = {}  # per group: the offsets of its last commit
        self._groups = groups
        self._lock = threading.Lock()
        self._seen: set[tuple[str, int]] = set()
        self.batches: dict[str, int] = {}
        self.rows: dict[str, int] = {}
        self._ended = threading.Condition()
        self._ended_runs: set[str] = set()  # query runs whose end the listener bus delivered

    def started(self, name: str, query_id: str, run_id: str) -> None:
        if name in self._groups:
            log.info("query %s started (run %s)", name, run_id)
            if self._run_record is not None:
                self._run_record.query_started(name, query_id, run_id)
            if self._metrics is not None:
                self._metrics.started()

    def handle(self, progress: dict[str, Any]) -> None:
        """Log and record one batch, once: the listener bus delivers asynchronously, and the runner hands
        over each query's recent progress at the end, so no batch (the last above all) goes unrecorded."""
        name = progress.get("name") or ""
        if name not in self._groups:
            return
        with self._lock:
            batch = (name, int(progress.get("batchId", -1)))
            if batch in self._seen:
                return
            self._seen.add(batch)
            self.batches[name] = self.batches.get(name, 0) + 1
            self.rows[name] = self.rows.get(name, 0) + int(progress.get("numInputRows", 0))
        log.info(describe_batch(progress))
        if self._run_record is not None:
            self._run_record.batch(progress)
        if self._metrics is not None:
            self._metrics.batch(progress)
        if self._on_batch is not None:
            try:
                self._on_batch(progress)
            except Exception as exc:  # like the group offsets: reporting must never stop the job
                log.warning("could not report batch %s: %s", batch, exc)
        group = self._groups.get(name)
        if group:
            self.commit(group, end_offsets(progress))

    def commit(self, group: str, offsets: dict[str, dict[int, int]]) -> None:
        """Record the offsets in the group, without waiting: a consumer's asynchronous commit, its outcome logged
        at the next commit. Not the admin API, whose requests pending while the broker was away crashed the
        process (an assertion in librdkafka) when it came back; and never blocking, so an outage cannot stall
        the listener."""
        partitions = [TopicPartition(t, p, o) for t, parts in offsets.items() for p, o in sorted(parts.items())]
        if not partitions:
            return
        try:
            committer = self._committers.get(group)
            if committer is None:
                committer = self._committers[group] = Consumer(
                    {
                        **self._kafka,
                        "group.id": group,
                        "enable.auto.commit": False,
                        "on_commit": lambda error, _: self._committed(group, error),
                        "log_level": 0,
                    }
                )
            committer.poll(0)  # serves the outcome of earlier commits
            committer.commit(offsets=partitions, asynchronous=True)
            self._last[group] = partitions
        except Exception as exc:  # progress reporting must never stop the job; the checkpoint is the truth
            log.warning("could not record progress of %s: %s", group, exc)

    @staticmethod
    def _committed(group: str, error: KafkaError | None) -> None:
        if error is not None:
            log.warning("could not record progress of %s: %s", group, error)

    def close(self) -> None:
        """The last offsets, committed before the run ends (what `kappa jobs status` and lag tools read)."""
        for group, committer in self._committers.items():
            last = self._last.get(group)
            try:
                if last:
                    committer.commit(offsets=last, asynchronous=False)
            except Exception as exc:  # the checkpoint is the truth; the next run records it again
                log.warning("could not record progress of %s: %s", group, exc)
            committer.close()

    def ended(self, run_id: str) -> None:
        # No line: the runner says how a query ended (a failure, a retry, a stop), once.
        with self._ended:
            self._ended_runs.add(run_id)
            self._ended.notify_all()

    def wait_ended(self, run_id: str, timeout_s: float = 10.0) -> None:
        """Until the listener bus has delivered a stopped run's end (or the timeout): a process ending while the
        bus still calls into Python makes Py4J print a stack trace."""
        with self._ended:
            self._ended.wait_for(lambda: run_id in self._ended_runs, timeout=timeout_s)
