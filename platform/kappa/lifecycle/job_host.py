"""The job host: this machine's `shared` deployments as queries of one Spark application (`kappa jobs host`).

With a driver JVM per job, six jobs on two cores spend their time competing for the cores (README, "One Spark
application"): in one application the stateful jobs' batches ran 2 to 2.5 times faster. The host keeps what a
deployment is: each job version runs in a thread of its own (`run_job` with its own stop), with its own checkpoint,
consumer group, state file and log, and is started, stopped and restarted on its own. It does so by following the
state files that `kappa.lifecycle.deployments` writes (kappa.lifecycle.launchers.SharedLauncher), every POLL_S:

- a deployment of this host (its recorded pid is the host's wrapper) that should run, at a start the host has not
  run yet, is started;
- one recorded as stopped, or started again (a restart), is stopped after its current batch.

When a job's run ends, the host records its exit as a deployment's wrapper does for a process (the exit record, and
a line in the job's log): status 0 after a stop, 2 after a refusal (a KappaError, its message on the line before, as
the CLI prints it), 1 after any other error. The host never restarts a job by itself: as for a process, the health
sensor or `kappa jobs restart` does, and records why. A host ended from outside (SIGTERM, or its wrapper killed,
which it watches) stops every job after its current batch, each recorded as ended by that (status 2), so that
`status` says why they no longer run and nothing runs unsupervised. Each query's batches run in a FAIR scheduler
pool named after its job, so a view's long batch does not hold the stateful jobs' short ones behind it. The host
ends HOST_IDLE_S after its last job. It rotates its own log and its jobs' (kappa.lifecycle.log_rotation).
"""

from __future__ import annotations

import logging
import os
import re
import signal
import threading
import time
import traceback
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING

from kappa.core.errors import KappaError
from kappa.core.settings import KappaSettings
from kappa.lifecycle.exits import record_exit
from kappa.lifecycle.host_registry import HOST_IDLE_S, host_log, hosted, idle_host_ends
from kappa.lifecycle.log_rotation import LogRotation
from kappa.lifecycle.state_files import Deployment, checkpoint_lock, consumer_group, output_query
from kappa.lifecycle.wrapper import watch_wrapper, wrapper_gone
from kappa.runtime.binding import deployed_job, ensure_live
from kappa.runtime.run_record import RunRecorder
from kappa.spark.driver_files import log_file as spark_log
from kappa.spark.session import get_spark

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("kappa.host")

POLL_S = 0.5
# Task slots per core of a `local[*]` host. With as many slots as cores, six jobs' tasks queued behind each other
# in the host's scheduler; with four times as many, the OS shares the cores among them as it does among separate
# drivers (README, "One Spark application": local[8] on 2 cores took the whole pipeline's p99 to enriched_clicks
# from 43.5 s to 17.5 s at 1,000 clicks/s).
SLOTS_PER_CORE = 4
# One job at a time moves its aliases: alias moves are Kafka transactions, and two at once fence each other.
_BINDING = threading.Lock()


@dataclass
class _Ending:
    """Why the host ends, once it does: None while it runs, or ends for idleness."""

    cause: str | None = None


@dataclass
class _Run:
    start: tuple[str, int]  # the deployment's start this thread runs: (start time, restarts)
    stop: threading.Event
    thread: threading.Thread


def serve(settings: KappaSettings, code: str) -> int:
    """Run the host of `code` (its code_fingerprint) until SIGTERM/SIGINT or until it has had no job to run for
    HOST_IDLE_S."""
    # Lazy: imports pyspark, only where a Spark session runs (this module is imported without one).
    from kappa.runtime.runner import configure_logging

    configure_logging()
    me = os.getppid()  # the deployments name the host's wrapper (the shell that records its exit), our parent
    ended = threading.Event()
    ending = _Ending()

    def end(cause: str) -> None:
        ending.cause = ending.cause or cause
        ended.set()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        log.info("received %s: stopping every job after its current batch", name)
        end(f"the job host (pid {os.getpid()}) received {name}: every job in it stopped after its current batch")

    watch_wrapper(lambda: end(wrapper_gone(me, "every job in the job host")))

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    settings, spark = host_session(settings)
    signal.signal(signal.SIGINT, on_signal)  # the SparkContext set its own
    # Its own log and its jobs', as their state files say at each check (a job started later is rotated too),
    # and the Spark drivers' shared warnings log.
    own_log = host_log(settings, code)
    rotation = LogRotation.of(
        settings, lambda: [own_log, spark_log(settings), *(d.log_path for d in hosted(settings, me))]
    )
    runs: dict[str, _Run] = {}
    begun: set[tuple[str, tuple[str, int]]] = set()  # (deployment, start) run: a failed run waits for a restart
    idle_since = time.monotonic()
    try:
        while not ended.is_set():
            wanted = {d.name: d for d in hosted(settings, me) if d.desired == "running"}
            for name, run in list(runs.items()):
                if not run.thread.is_alive():
                    del runs[name]
                elif name not in wanted or _start_of(wanted[name]) != run.start:
                    run.stop.set()  # stopped or restarted: it ends after its current batch
            for name, deployment in wanted.items():
                if name not in runs and (name, _start_of(deployment)) not in begun:
                    begun.add((name, _start_of(deployment)))
                    runs[name] = _start(settings, spark, deployment, ending)
            if runs or wanted:
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since > HOST_IDLE_S:
                with idle_host_ends(settings, me, code) as idle:
                    if idle:
                        log.info("no job to run for %.0f s: the job host ends", HOST_IDLE_S)
                        break
            ended.wait(POLL_S)
    finally:
        for run in runs.values():
            run.stop.set()
        for run in runs.values():
            run.thread.join()
        spark.stop()
        rotation.stop()  # after a rotation under way, if any: its copy is then complete and named
    return 0


def host_session(settings: KappaSettings) -> tuple[KappaSettings, SparkSession]:
    """The host's one Spark application, and the settings its jobs run with: on this machine, SLOTS_PER_CORE task
    slots per core; FAIR scheduling between the pools of its jobs (in_pool_of)."""
    if settings.spark_master == "local[*]":
        settings = settings.model_copy(update={"spark_master": f"local[{SLOTS_PER_CORE * (os.cpu_count() or 1)}]"})
    return settings, get_spark(settings, "kappa-jobs", {"spark.scheduler.mode": "FAIR"})


def in_pool_of(spark: SparkSession, job: str) -> None:
    """The queries this thread starts run their Spark jobs in `job`'s FAIR pool."""
    spark.sparkContext.setLocalProperty("spark.scheduler.pool", job)


def _start(settings: KappaSettings, spark: SparkSession, deployment: Deployment, ending: _Ending) -> _Run:
    stop = threading.Event()
    thread = threading.Thread(
        target=_run, args=(settings, spark, deployment, stop, ending), name=f"job-{deployment.name}", daemon=True
    )
    thread.start()
    return _Run(_start_of(deployment), stop, thread)


def _start_of(deployment: Deployment) -> tuple[str, int]:
    """Which start of the deployment (a restart within the same second is another start)."""
    return deployment.started_at, deployment.restarts


def _run(
    settings: KappaSettings, spark: SparkSession, deployment: Deployment, stop: threading.Event, ending: _Ending
) -> None:
    """One deployment's run, as `kappa jobs run <job> --version N` runs it, its lines in its own log. Ended by the
    host's end, it records that cause as its error: it did not stop because anyone stopped it."""
    # Lazy: imports pyspark, only where a Spark session runs (this module is imported without one).
    from kappa.runtime.runner import run_job

    handler = _JobLog(deployment)
    logging.getLogger().addHandler(handler)
    status = 0
    try:
        log.info("starting %s in the job host (pid %d)", deployment.name, os.getpid())
        in_pool_of(spark, deployment.job)  # a query's Spark jobs run in the pool of the thread that starts it
        holder = f"{deployment.name} in the job host"
        with (
            checkpoint_lock(settings, deployment.job, deployment.version, holder),
            RunRecorder.recording(settings, deployment.job, deployment.version) as record,
        ):
            spec = deployed_job(settings, deployment.job, deployment.version, run=True)
            with _BINDING:
                ensure_live(settings, spec, deployment.version)
            report = run_job(spec, settings, version=deployment.version, stop=stop, run_record=record)
            if ending.cause is not None:
                raise KappaError(f"{ending.cause} (`kappa jobs restart` resumes it from its checkpoint)")
        rows = sum(report.input_rows.values())
        log.info("%s: stopped after %.1f s, %d input rows", deployment.name, report.seconds, rows)
    except KappaError as exc:
        handler.write(f"kappa: error: {exc}")
        status = 2
    except Exception:  # anything else ends this job, never the host and the other jobs
        handler.write(traceback.format_exc().rstrip())
        status = 1
    finally:
        logging.getLogger().removeHandler(handler)
        record_exit(deployment, status)  # what the wrapper of a job's own process records
        handler.close()


class _JobLog(logging.FileHandler):
    """The job's log file gets the lines about it: those logged on its thread, and those that name its query or
    consumer group (the progress listener's, logged on Spark's listener thread)."""

    def __init__(self, deployment: Deployment) -> None:
        super().__init__(deployment.log_file, encoding="utf-8")
        self.setFormatter(logging.Formatter("%(asctime)s %(name)s %(message)s"))
        self._thread = threading.get_ident()
        query = output_query(deployment.job, deployment.version)  # also the runner's id of the job
        group = consumer_group(deployment.job, deployment.version)
        self._names = re.compile(rf"(?<![\w.])({re.escape(query)}|{re.escape(group)})(?!\w)")

    def filter(self, record: logging.LogRecord) -> bool:
        if record.thread == self._thread:
            return True
        return self._names.search(record.getMessage()) is not None

    def write(self, line: str) -> None:
        self.acquire()
        try:
            self.stream = self.stream or self._open()
            self.stream.write(line + "\n")
            self.stream.flush()
        finally:
            self.release()
