"""`kappa jobs run`: start a job version's query, report progress, stop gracefully on SIGTERM."""

from __future__ import annotations

import json
import logging
import os
import random
import re
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from types import FrameType
from typing import TYPE_CHECKING, Any

from kappa.core.errors import KappaError
from kappa.core.security import as_principal, librdkafka_config
from kappa.core.settings import KappaSettings
from kappa.kafka.clients import admin_client
from kappa.runtime import start_point
from kappa.runtime.access import as_job, denied, version_principal
from kappa.runtime.binding import VersionBinding, dataset_of, deployment_topics, record_binding
from kappa.runtime.declaration import JobContext, JobSpec, Starting, version_checkpoints, version_id
from kappa.runtime.metrics import JobMetrics, publish_target, serve, version_url, withdraw_target
from kappa.runtime.progress import ProgressHub, ProgressRecorder, checkpoint_offsets
from kappa.runtime.query import QueryControl, QueryEnd, WriterWatch, start_query
from kappa.runtime.run_record import RunRecorder
from kappa.spark.session import get_spark

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger("kappa.runner")


def configure_logging() -> None:
    """The platform's progress lines on stdout; the libraries' informational chatter (py4j per listener event,
    httpx per registry request) kept out: only their warnings show, and Great Expectations' errors."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s", stream=sys.stdout, force=True)
    logging.getLogger("kappa").setLevel(logging.INFO)
    logging.getLogger("great_expectations").setLevel(logging.ERROR)  # it warns of its own temporary folders


@dataclass(frozen=True)
class RunReport:
    job: str
    version: int
    seconds: float
    batches: dict[str, int]
    input_rows: dict[str, int]
    stopped_by_signal: bool
    output_query: str = ""  # the name of the job's query (batches and input_rows are keyed by query name)


def run_job(
    spec: JobSpec,
    settings: KappaSettings,
    *,
    version: int | None = None,
    available_now: bool = False,
    starting: Starting | None = None,
    max_offsets_per_trigger: int | None = None,
    on_batch: Callable[[dict[str, Any]], None] | None = None,
    stop: threading.Event | None = None,
    run_record: RunRecorder | None = None,
) -> RunReport:
    """Run until the input is drained (available_now) or until SIGTERM/SIGINT; return what was done.
    `on_batch` is called with each batch's progress (as JSON dict), once per batch. With `stop`, the caller
    owns the signals (several jobs in one process, each in its own thread) and sets it to stop the job after
    its current batch. `run_record`: where the run records its queries, batches and waits (its caller opens
    and closes it, so that what fails before the run starts is recorded too)."""
    start = partial(_start_and_run, spec, settings, version=version, available_now=available_now,
                    starting=starting, max_offsets_per_trigger=max_offsets_per_trigger, on_batch=on_batch,
                    run_record=run_record)  # fmt: skip
    if stop is not None:
        return start(stop)
    # Handlers first: a stop requested while Spark is still starting (tens of seconds) is honoured too, as a clean
    # exit that starts nothing, instead of Python's default SIGTERM death.
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("received %s: stopping %s after its current batch", signal.Signals(signum).name, spec.name)
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        # A new SparkContext sets its own SIGINT handler (cancel every job, raise KeyboardInterrupt): ours again,
        # so Ctrl-C also stops after the current batch.
        return start(stop, on_spark=lambda: signal.signal(signal.SIGINT, on_signal))
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _start_and_run(
    spec: JobSpec,
    settings: KappaSettings,
    stop: threading.Event,
    *,
    version: int | None,
    starting: Starting | None,
    available_now: bool,
    max_offsets_per_trigger: int | None,
    on_batch: Callable[[dict[str, Any]], None] | None,
    run_record: RunRecorder | None,
    on_spark: Callable[[], object] | None = None,
) -> RunReport:
    # Before Spark starts: a start point that the checkpoint would silently override is refused at once.
    number = version or spec.version
    start_point.pin(version_checkpoints(settings, spec.name, number), spec.name, number, starting)
    record_binding(settings, spec.name, number, VersionBinding.of(spec, spec.version))  # once
    _refuse_missing_topics(spec, settings, number)  # before Spark's tens of seconds
    settings = _as_job(settings, spec, number)  # its own principal from here on (secured)
    log.info("starting %s: Spark session", spec.name)
    if spec.real_time is not None and not available_now:
        settings = real_time_slots(spec, settings)
    spark = get_spark(settings, f"kappa-{spec.name}")
    if on_spark is not None:
        on_spark()
    return _run_until_stopped(spec, settings, spark, stop, version=version, available_now=available_now,
                              starting=starting, max_offsets_per_trigger=max_offsets_per_trigger,
                              on_batch=on_batch, run_record=run_record)  # fmt: skip


def live_batch_bound(spec: JobSpec, available_now: bool) -> int | None:
    """A live run reads at most the declared `max_batch_records` per input and batch; a replay reads its range in
    one batch, and real-time mode takes no bound (its batches last a declared time instead)."""
    return None if available_now or spec.real_time is not None else spec.max_batch_records


def real_time_slots(spec: JobSpec, settings: KappaSettings) -> KappaSettings:
    """Real-time mode runs every task of a batch at once, for the whole batch: one per input partition. A local
    master gets that many task threads (they mostly wait for records), whatever its core count. On a cluster the
    application takes exactly that many cores (spark.cores.max): more would sit idle, and without a cap it would
    take every free core of the cluster from the applications beside it."""

    needed = sum(t.partitions for t in spec.inputs)
    found = re.fullmatch(r"local\[(\*|\d+)\]", settings.spark_master)
    if found is None:
        return settings.model_copy(update={"spark_cores_max": needed})
    threads = (os.cpu_count() or 1) if found.group(1) == "*" else int(found.group(1))
    return settings if threads >= needed else settings.model_copy(update={"spark_master": f"local[{needed}]"})


# Backoff between attempts to start a job's queries again after a service went away.
RETRY_FIRST_S = 2.0
RETRY_CAP_S = 30.0
# What a query or a start fails with when a service is unavailable (not when a record or the code is bad).
_UNAVAILABLE = (
    ("Kafka", "org.apache.kafka.common.errors.TimeoutException"),
    ("Kafka", "java.util.concurrent.TimeoutException: Cannot fetch record"),  # Spark's Kafka reader, mid-batch
    ("Kafka", "org.apache.kafka.common.errors.DisconnectException"),
    ("Kafka", "org.apache.kafka.common.errors.NetworkException"),
    ("Kafka", "org.apache.kafka.common.errors.NotEnoughReplicas"),
    ("Kafka", "org.apache.kafka.common.errors.NotLeaderOrFollowerException"),
    ("Kafka", "KafkaError{code=_TRANSPORT"),
    ("Kafka", "KafkaError{code=_TIMED_OUT"),
    ("Kafka", "KafkaError{code=_ALL_BROKERS_DOWN"),
    ("the schema registry", "the schema registry is not reachable"),
    ("the schema registry", QueryEnd.REGISTRY_UNAVAILABLE.value),
)


def unavailable_service(failure: str) -> str | None:
    """`Kafka is unavailable (<the line that says so>)` when a failure is a lost service, else None."""
    for service, marker in _UNAVAILABLE:
        for line in failure.splitlines():
            if marker in line:
                return f"{service} is unavailable ({line.strip()[:200]})"
    return None


def missing_topics(spec: JobSpec, settings: KappaSettings, version: int) -> list[str]:
    """The topics the job reads or writes (its dead-letter and late topics too) that Kafka does not have.
    Raises when Kafka does not answer."""

    existing = admin_client(settings).list_topics(timeout=15).topics
    wanted = [t.name for t in (*spec.inputs, *spec.lookups, *deployment_topics(spec, version))]
    return [name for name in dict.fromkeys(wanted) if name not in existing]


def _missing_topics_error(job_id: str, missing: list[str]) -> KappaError:
    # A missing topic is no outage: Spark's Kafka clients would wait for it, and the runner with them, for ever.
    return KappaError(
        f"job {job_id}: {', '.join(missing)} {'does' if len(missing) == 1 else 'do'} not exist; "
        "jobs never create topics: run `kappa topics apply`"
    )


def _refuse_missing_topics(spec: JobSpec, settings: KappaSettings, version: int) -> None:
    """Raises when a topic of the job is missing; Kafka not answering is left to the query's start, which waits
    it out and asks again."""
    try:
        missing = missing_topics(spec, settings, version)
    except Exception as exc:
        if unavailable_service(str(exc)) is None:
            raise
        return
    if missing:
        raise _missing_topics_error(version_id(spec.name, version), missing)


def _as_job(settings: KappaSettings, spec: JobSpec, version: int) -> KappaSettings:
    """The job's own settings (`access.as_job`); while Kafka does not answer, the check is left to the query's
    start, which waits it out (and meets a missing ACL as Kafka's refusal)."""
    try:
        return as_job(settings, spec, version)
    except KappaError:
        raise
    except Exception as exc:
        if unavailable_service(str(exc)) is None:
            raise
        return as_principal(settings, version_principal(spec.name, version))


def _run_query(context: JobContext, recorder: ProgressRecorder, control: QueryControl) -> str | None:
    """Plan and start the job's query and watch it until a stop, the end of the input, or a failure.

    Returns the failure (its error, whole), or None. The query is stopped on return, never mid-batch.
    """
    try:
        # deleted since the start, or a restart
        if missing := missing_topics(context.spec, context.settings, context.version):
            raise _missing_topics_error(context.id, missing)
        watch = WriterWatch(context.settings, (*context.spec.inputs, *context.spec.lookups))
    except Exception as exc:  # a start needs Kafka and the registry: their absence is retried by the caller
        if unavailable_service(str(exc)) is None:
            raise
        return f"starting its query failed: {exc}"
    with watch:
        try:
            query = start_query(context, context.spec.plan(context), control, watch)
        except Exception as exc:  # the same: Kafka or the registry went away while it planned
            if unavailable_service(str(exc)) is None:
                raise
            return f"starting its query failed: {exc}"
        real_time = "realTime" in context.trigger()
        return _until_it_ends(query, recorder, control, watch if real_time else None)


# How often the runner asks the registry for new writer versions on behalf of a real-time query (a micro-batch
# query asks before each batch). Until then, a record of a new version is a dead letter (unknown schema id).
REAL_TIME_SCHEMA_CHECK_S = 10.0


def _until_it_ends(
    query: StreamingQuery, recorder: ProgressRecorder, control: QueryControl, real_time_watch: WriterWatch | None
) -> str | None:
    checked = time.monotonic()
    while query.isActive and not control.stop.is_set():
        control.stop.wait(0.5)
        if real_time_watch is not None and time.monotonic() - checked >= REAL_TIME_SCHEMA_CHECK_S:
            checked = time.monotonic()
            try:
                learned = real_time_watch.new_versions()
            except Exception:  # the registry is away: the query goes on with the versions it knows
                learned = []
            if learned:
                control.end(QueryEnd.NEW_SCHEMA, ", ".join(learned))
                break
    # A stop: the batch in flight finishes (its commit too); a batch that starts now ends before it writes. A
    # real-time batch runs for minutes: it ends now, and what it wrote is written again after a restart.
    while real_time_watch is None and query.isActive and query.status["isTriggerActive"]:
        time.sleep(0.05)
    if query.isActive:
        query.stop()
    recorder.wait_ended(str(query.runId))
    for progress in query.recentProgress:  # what the listener bus had not delivered yet (the last batch above all)
        recorder.handle(json.loads(progress.json))
    if control.ended not in (None, QueryEnd.STOP):  # the runtime ended it (from a batch, or the runner)
        return f"{control.ended}: {control.detail}"
    error = query.exception()
    if error is None or control.ended is QueryEnd.STOP:
        return None
    return f"query {query.name} failed: {str(error).strip() or repr(error)}"


def _run_until_stopped(
    spec: JobSpec,
    settings: KappaSettings,
    spark: SparkSession,
    stop: threading.Event,
    *,
    version: int | None,
    available_now: bool,
    starting: Starting | None,
    max_offsets_per_trigger: int | None,
    on_batch: Callable[[dict[str, Any]], None] | None,
    run_record: RunRecorder | None,
) -> RunReport:
    context = JobContext(
        spark=spark,
        settings=settings,
        spec=spec,
        version=version or spec.version,
        available_now=available_now,
        starting=starting or Starting(),
        max_offsets_per_trigger=max_offsets_per_trigger or live_batch_bound(spec, available_now),
    )
    kafka = librdkafka_config(settings)
    metrics = JobMetrics(spec.name, context.version, kafka, context.available_now)
    process_url = serve(settings)
    if process_url is not None:
        metrics.writes(settings, dataset_of(spec))
        metrics_url = version_url(process_url, spec.name, context.version)  # the host serves several versions
        publish_target(settings, spec.name, context.version, metrics_url)
        if run_record is not None:
            run_record.serving(metrics_url)
    recorder = ProgressRecorder(kafka, {context.query_name(): context.consumer_group}, on_batch, run_record, metrics)
    # What the checkpoint says is done, before any new batch: a restart with nothing new to read reports none.
    recorder.commit(context.consumer_group, checkpoint_offsets(context.checkpoint()))
    started = time.monotonic()
    if stop.is_set():
        log.info("stopped before %s started a query", context.id)
        recorder.close()
        return RunReport(job=spec.name, version=context.version, seconds=0.0, batches={}, input_rows={},
                         stopped_by_signal=True, output_query=context.query_name())  # fmt: skip
    attempt = 0
    try:
        with ProgressHub.listen(spark, recorder):  # one listener per application, shared by its jobs
            while True:
                batches_before = sum(recorder.batches.values())
                control = QueryControl(stop)
                failure = _run_query(context, recorder, control)
                if failure is None:
                    break
                if control.ended is QueryEnd.NEW_SCHEMA:
                    learned = control.detail
                    log.info("%s: the registry has %s; planning the query again to decode it", context.id, learned)
                    continue
                cause = unavailable_service(failure)
                if cause is None:
                    refused = denied(failure, settings.kafka_user, context.id) if settings.secured else None
                    raise KappaError(refused or f"job {context.id}: {failure.splitlines()[0]}")
                if stop.is_set():
                    break
                # A lost broker or registry is no reason to exit: start again from the checkpoints (nothing lost,
                # nothing doubled) once it answers. Attempts count from the last batch that went through.
                attempt = 1 if sum(recorder.batches.values()) > batches_before else attempt + 1
                delay = min(RETRY_CAP_S, RETRY_FIRST_S * 2 ** (attempt - 1)) * random.uniform(0.8, 1.2)
                log.warning("%s: %s; starting again in %.0f s (attempt %d)", context.id, cause, delay, attempt)
                if run_record is not None:
                    run_record.retrying(cause)
                metrics.restarting("kafka" if cause.startswith("Kafka") else "registry")
                stop.wait(delay)
                if stop.is_set():
                    break
    finally:
        recorder.close()
        metrics.stopped()
    withdraw_target(settings, spec.name, context.version)  # a clean end (a failure leaves it: seen down)
    return RunReport(
        job=spec.name,
        version=context.version,
        seconds=time.monotonic() - started,
        batches=dict(recorder.batches),
        input_rows=dict(recorder.rows),
        stopped_by_signal=stop.is_set(),
        output_query=context.query_name(),
    )
