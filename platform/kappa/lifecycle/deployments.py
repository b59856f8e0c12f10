"""Long-running job versions on this machine: start, stop, restart, status and lag (`kappa jobs start ...`).

A deployment is one job version running continuously (`kappa jobs run <job> --version N`, no availableNow),
detached from whoever started it: its own session and process group, stdout and stderr appended to
`<deployments_dir>/<job>.v<N>.log`, and a state file `<job>.v<N>.json` beside it (pid, command, start time,
restarts, the last exit reason). The CLI, Dagster's materializations and its health sensor all go through
these functions, so each sees what the others did.

What a deployment is doing comes from two small JSON files beside it, each written atomically, never from its log:
the run record `<job>.v<N>.run.json` that the job writes about itself (its state, query ids, last batch, last
error; kappa.runtime.run_record), and the exit record `<job>.v<N>.exit.json` that whatever outlives the job
writes when it ends (its exit status). The process is a small shell wrapper around the job (`sh -c '"$@"; <record
$?>'`): when the job dies, however it dies, the wrapper records its exit status, which is how `status` tells why
it crashed. A start removes both records' traces of the previous run. The wrapper's command line carries the job
and version, and a pid is only ever signalled while its command line still shows them: a pid reused by another
process after a reboot is left alone.

The wrapper is the deployment's handle (the leader of its process group), not the job: `status` shows the pid of
the process that runs the job (its Python driver, or the job host), which is the one to signal (SIGTERM: stop after
the current batch; SIGKILL: a crash, recorded by the wrapper). A job never runs unsupervised: its process watches
its wrapper (`watch_wrapper`) and, when the wrapper is gone, stops after its current batch and records why; until
then `status` shows it running, with its own pid.

Stopping sends SIGTERM to the job's driver (the runner stops after its current batch and commits it; see
runtime/runner.py), waits for the wrapper to record the exit, and kills the process group after the timeout.
A restart resumes from the version's checkpoint: nothing is lost or read twice.

Launchers (KAPPA_DEPLOY_LAUNCHER): `subprocess` runs the job here on KAPPA_SPARK_MASTER (local[*] by default);
`spark-submit` submits it to a cluster master in client mode (the driver, and so the supervision, stays here);
`shared` runs it as queries of the job host, one Spark application for this machine's jobs
(kappa.lifecycle.job_host): the state file, log, checkpoint and lifecycle stay the job's own, the pid is the host's,
and the job's end is the exit record the host writes for it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaException, TopicPartition

import kappa
from kappa.core.errors import KappaError
from kappa.core.settings import KappaSettings, Launcher
from kappa.core.waiting import WaitTimeoutError, wait_until
from kappa.kafka.clients import admin_client
from kappa.runtime import run_record
from kappa.runtime.binding import deployed_job, read_topics
from kappa.runtime.discovery import get_job
from kappa.runtime.run_record import LastBatch, RunRecord
from kappa.spark.session import spark_conf as session_conf
from kappa.stack import process

log = logging.getLogger("kappa.deployments")

WRAPPER_NAME = "kappa-deployment"  # $0 of the shell wrapper: shows in ps, and marks the process as ours
HOST_MARKER = "jobs host"  # what the job host's command line shows (kappa.lifecycle.job_host)
STARTED_LINE = "=== kappa-deployment: started"  # each start's first log line: the log of one run follows it
EXIT_LINE = "=== kappa-deployment: exit status"  # for the log's reader; `status` reads the exit record
_LOG_TAIL_BYTES = 64 * 1024  # a crash's last log lines are read from the log's end
_DEPLOYMENT_FILE = re.compile(r"[\w-]+\.v\d+\.json")  # not the run and exit records beside it
_HOST_FILE = re.compile(r"host-\w+\.json")  # not its exit record


class Health(StrEnum):
    RUNNING = "running"
    CRASHED = "crashed"  # should run, but its process is gone
    STOPPED = "stopped"  # stopped on purpose (kappa jobs stop, Dagster's stop_<job>)


@dataclass(frozen=True)
class Deployment:
    """What the state file records about one job version's deployment."""

    job: str
    version: int
    pid: int  # the wrapper: leader of the deployment's process group, its handle (the job's own pid: job_pid)
    command: list[str]  # the job's command (without the wrapper)
    launcher: str
    started_at: str  # ISO 8601, UTC
    log_file: str
    env: dict[str, str] = field(default_factory=dict)  # the KAPPA_* settings it was started with (kept on restart)
    restarts: int = 0
    last_exit_reason: str | None = None  # why the previous run ended, recorded by restart()
    desired: str = "running"  # "running" until stop() records "stopped"
    stopped_at: str | None = None
    host_log: str | None = None  # shared: the job host's log (its exit record, beside it, says how the host ended)

    @property
    def name(self) -> str:
        return f"{self.job}.v{self.version}"

    @property
    def log_path(self) -> Path:
        return Path(self.log_file)

    @property
    def marker(self) -> str:
        """What the wrapper's command line must show for its pid to be ours."""
        return marker(self.job, self.version)

    @property
    def exit_path(self) -> Path:
        """The exit record: {"exit_status", "ended_at"}, written when the run ends (none while it runs)."""
        return exit_file(self.log_path)

    @property
    def run_record_path(self) -> Path:
        """The run record the job writes about itself (kappa.runtime.run_record)."""
        return self.log_path.with_name(run_record.file_name(self.job, self.version))


@dataclass(frozen=True)
class DeploymentState:
    """A deployment as `status` sees it now."""

    deployment: Deployment
    health: Health
    exit_reason: str | None = None  # for a crashed one: its exit status and its last error
    uptime_s: float | None = None  # for a running one
    run: RunRecord | None = None  # what the job last recorded about its run (None: nothing yet)
    pid: int | None = None  # for a running one: the process that runs the job (None while it starts)
    supervised: bool = True  # for a running one: False once its wrapper is gone (it stops after its batch)


@dataclass(frozen=True)
class Lag:
    """How far a version's recorded progress (group `kappa.<job>.v<N>`) is behind its inputs' end offsets."""

    group: str
    per_topic: dict[str, int]
    last_batch: LastBatch | None = None
    rows: int = 0  # input rows of the output query, over every run of the version

    @property
    def total(self) -> int:
        return sum(self.per_topic.values())


class UnknownInputsError(KappaError):
    """What a version reads is not known here, so neither is its lag (Kafka may well be up)."""


# ------------------------------------------------------------------------ pure parts -----------------


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def marker(job: str, version: int) -> str:
    return f"jobs run {job} --version {version}"


def consumer_group(job: str, version: int) -> str:
    """The group the runner records the version's progress under (JobContext.consumer_group)."""
    return f"kappa.{job}.v{version}"


def output_query(job: str, version: int) -> str:
    """The name of the version's output query (JobContext.query_name())."""
    return f"{job}_v{version}"


def default_spark_submit() -> str:
    """pyspark's own spark-submit (the wheel ships Spark's launch scripts)."""
    # Lazy: pyspark, only where a Spark session runs (this module is imported without one).
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-submit")


def job_command(
    settings: KappaSettings,
    job: str,
    version: int,
    *,
    spark_conf: Mapping[str, str] | None = None,
    cli_path: str | None = None,
) -> list[str]:
    """The command of a continuous run of `job` at `version`, for the configured launcher.

    `subprocess`: `python -m kappa.cli jobs run <job> --version N`; the runner builds its Spark session from
    the settings (KAPPA_SPARK_MASTER, local[*] by default). `spark-submit`: the same entry point submitted in
    client mode with `--master <KAPPA_SPARK_MASTER>` and the session's configuration as `--conf`s (the
    connector jars as `--jars`, so executors on the cluster get them); `spark_conf` defaults to
    `kappa.spark.session.spark_conf`, which needs the connector jars fetched.
    """
    args = ["jobs", "run", job, "--version", str(version)]
    if settings.deploy_launcher is Launcher.SUBPROCESS:
        return [sys.executable, "-m", "kappa.cli", *args]
    if spark_conf is None:
        spark_conf = session_conf(settings, f"kappa-{job}-v{version}")
    conf = dict(spark_conf)
    jars = conf.pop("spark.jars", "")
    conf.pop("spark.master", None)
    driver_memory = conf.pop("spark.driver.memory", settings.spark_driver_memory)
    command = [
        settings.spark_submit or default_spark_submit(),
        "--master",
        settings.spark_master,
        "--deploy-mode",
        "client",  # the driver runs here, under this supervisor; PySpark has no cluster mode on standalone
        "--name",
        f"kappa-{job}-v{version}",
        "--driver-memory",
        driver_memory,
        "--conf",
        f"spark.pyspark.python={sys.executable}",
        "--conf",
        f"spark.pyspark.driver.python={sys.executable}",
    ]
    if jars:
        command += ["--jars", jars]
    for key, value in sorted(conf.items()):
        command += ["--conf", f"{key}={value}"]
    # The CLI's file, found without importing it: the CLI imports this module.
    cli_file = importlib.util.find_spec("kappa.cli.main").origin  # type: ignore[union-attr]
    return [*command, cli_path or str(cli_file), *args]


def wrapped(command: Sequence[str], exit_file: Path) -> list[str]:
    """The command under the shell wrapper that records the job's exit status when it ends, however it ends: in the
    exit record (atomically: a file renamed over it) and as the last line of the log."""
    script = (
        'x=$1; shift; "$@"; s=$?; t=$(date -u +%Y-%m-%dT%H:%M:%SZ); '
        'printf \'{"exit_status": %d, "ended_at": "%s"}\\n\' "$s" "$t" > "$x.tmp" && mv -f "$x.tmp" "$x"; '
        f'echo "{EXIT_LINE} $s at $t"'
    )
    return ["/bin/sh", "-c", script, WRAPPER_NAME, str(exit_file), *command]


def exit_file(log_file: Path) -> Path:
    """A run's exit record sits beside its log: `<job>.v<N>.log` -> `<job>.v<N>.exit.json`."""
    return log_file.with_suffix(".exit.json")


def describe_status(status: int | None) -> str:
    if status is None:
        return "no exit status recorded (its wrapper was killed too, or the machine restarted)"
    if status > 128 and (status - 128) in {s.value for s in signal.Signals}:
        return f"killed by {signal.Signals(status - 128).name} (exit status {status})"
    return f"exit status {status}"


def last_log_lines(log_text: str, lines: int = 5) -> list[str]:
    """The latest run's last error lines in its log (or its last lines): a failure the run could not record
    itself (before it knew its settings, say)."""
    start = log_text.rfind(STARTED_LINE)
    run = (log_text[start:] if start >= 0 else log_text).splitlines()
    errors = [
        line.strip()
        for line in run
        if line.startswith("kappa: error:") or "Error" in line.split(":", 1)[0] or " ERROR " in line
    ]
    return errors[-lines:] or [line.strip() for line in run if line.strip() and not line.startswith("===")][-lines:]


def topic_lag(
    committed: Mapping[str, Mapping[int, int]], watermarks: Mapping[str, Mapping[int, tuple[int, int]]]
) -> dict[str, int]:
    """Records not yet processed per topic: end offset minus the group's committed offset, per partition.

    `watermarks`: topic -> partition -> (low, high). A partition without a committed offset counts from its
    low watermark (the job has not finished a batch there yet; it starts from the earliest retained record).
    A committed offset below the low watermark (retention deleted records the job never read) counts from low.
    """
    lag: dict[str, int] = {}
    for topic, partitions in watermarks.items():
        done = committed.get(topic, {})
        lag[topic] = sum(max(0, high - max(low, done.get(p, low))) for p, (low, high) in partitions.items())
    return lag


# ------------------------------------------------------------------------ state files ----------------


def _paths(settings: KappaSettings, job: str, version: int) -> tuple[Path, Path]:
    root = settings.deployments_path
    return root / f"{job}.v{version}.json", root / f"{job}.v{version}.log"


def load(settings: KappaSettings, job: str, version: int) -> Deployment | None:
    state, _ = _paths(settings, job, version)
    return _read(state)


def _deployment_files(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("*.v*.json") if _DEPLOYMENT_FILE.fullmatch(p.name)) if root.is_dir() else []


def _read(path: Path) -> Deployment | None:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError) as exc:
        raise KappaError(f"deployment state {path} unreadable ({exc}): delete it if its job is not running") from None
    return Deployment(**data)


def save(settings: KappaSettings, deployment: Deployment) -> None:
    """Write the state file atomically (a reader never sees half of it)."""
    state, _ = _paths(settings, deployment.job, deployment.version)
    state.parent.mkdir(parents=True, exist_ok=True)
    tmp = state.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(asdict(deployment), indent=2) + "\n")
    tmp.replace(state)


@contextlib.contextmanager
def _locked(settings: KappaSettings, job: str, version: int) -> Iterator[None]:
    """One start/stop/restart of a deployment at a time (the CLI and Dagster's sensor may race)."""
    settings.deployments_path.mkdir(parents=True, exist_ok=True)
    with (settings.deployments_path / f"{job}.v{version}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@contextlib.contextmanager
def checkpoint_lock(settings: KappaSettings, job: str, version: int, holder: str) -> Iterator[None]:
    """One writer per checkpoint. Held for their whole run by whatever runs a version's queries (`kappa jobs run`
    in any mode, so a deployment and Dagster's catch-up runs too; `kappa replay start`'s catch-up), and briefly
    by whatever else writes or deletes the checkpoint (a deployment start, a retire). Never waits: raises a
    KappaError naming the holder (`holder` says who we are). A flock, so a killed holder's lock goes with it."""
    settings.deployments_path.mkdir(parents=True, exist_ok=True)
    with (settings.deployments_path / f"{job}.v{version}.checkpoint.lock").open("a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            held_by = lock.read().strip() or "another process"
            raise KappaError(f"the checkpoint of {job} v{version} is in use by {held_by}") from None
        lock.seek(0)
        lock.truncate()
        lock.write(f"{holder} (pid {os.getpid()}, since {now_iso()})")
        lock.flush()
        yield


# ------------------------------------------------------------------------ processes ------------------


def is_ours(pid: int, job: str, version: int) -> bool:
    """True while pid is alive and is this deployment's wrapper (a reused pid shows another command line)."""
    return _wrapper_alive(pid, marker(job, version))


def is_host(pid: int) -> bool:
    """True while pid is alive and is the job host's wrapper."""
    return _wrapper_alive(pid, HOST_MARKER)


def _wrapper_alive(pid: int, shows: str) -> bool:
    cmdline = process.command_line(pid)
    return cmdline is not None and WRAPPER_NAME in cmdline and shows in " ".join(cmdline)


def is_running(deployment: Deployment) -> bool:
    """The deployment's job runs now: its wrapper waits for it, or its process still runs (its wrapper killed, it
    finishes its batch); for a shared one, in a job host that has not ended it (no exit record since its start)."""
    if deployment.launcher == Launcher.SHARED.value and deployment.exit_path.exists():
        return False
    return _wrapper_waits(deployment) or bool(driver_pids(deployment))


def _wrapper_waits(deployment: Deployment) -> bool:
    """The deployment's wrapper is alive: the job host's, or its own process's."""
    if deployment.launcher == Launcher.SHARED.value:
        return is_host(deployment.pid)
    return is_ours(deployment.pid, deployment.job, deployment.version)


def job_pid(deployment: Deployment) -> int | None:
    """The process that runs the job now (its Python driver, or the job host); None when there is none."""
    return next(iter(driver_pids(deployment)), None)


def driver_pids(deployment: Deployment) -> list[int]:
    """The Python process(es) that run the job, in the deployment's process group: the job's driver or the job
    host, which handle SIGTERM gracefully (not the wrapper, not spark-submit's JVM, not the py4j gateway JVM,
    which the driver stops itself). Found by group, so also after the wrapper is gone."""
    shows = HOST_MARKER if deployment.launcher == Launcher.SHARED.value else deployment.marker
    found = []
    for pid in process.group_members(deployment.pid):
        cmdline = process.command_line(pid) or []
        if (
            pid != deployment.pid
            and cmdline
            and Path(cmdline[0]).name.startswith("python")
            and shows in " ".join(cmdline)
        ):
            found.append(pid)
    return found


class WrapperWatch:
    """Whether this process's deployment wrapper is still there: a job whose wrapper is gone stops after its batch,
    so that no writer runs that nothing supervises (a restart would start a second one, or be refused)."""

    def __init__(self, wrapper: int, on_gone: Callable[[], object], interval_s: float) -> None:
        self.wrapper = wrapper
        self.gone = threading.Event()
        self._on_gone = on_gone
        self._interval_s = interval_s
        threading.Thread(target=self._watch, name="kappa-wrapper-watch", daemon=True).start()

    def _watch(self) -> None:
        while _wrapper_alive(self.wrapper, ""):
            time.sleep(self._interval_s)
        log.warning("the deployment's wrapper (pid %d) is gone: stopping after the current batch", self.wrapper)
        self.gone.set()
        self._on_gone()


def wrapper_gone(wrapper: int, what: str) -> str:
    """What a run records when it stopped because its wrapper was gone."""
    return (
        f"the deployment's wrapper (pid {wrapper}) was killed: {what} stopped after its current batch, so that "
        "nothing runs unsupervised"
    )


def watch_wrapper(on_gone: Callable[[], object], interval_s: float = 0.5) -> WrapperWatch | None:
    """Watch this process's deployment wrapper, the leader of its process group (`spawn`), and call `on_gone` once
    it is gone; None when this process does not run under one (a `kappa jobs run` from a shell, a test)."""
    leader = os.getpgrp()
    if leader == os.getpid() or not _wrapper_alive(leader, ""):
        return None
    return WrapperWatch(leader, on_gone, interval_s)


def spawn(command: Sequence[str], log_file: Path, env: Mapping[str, str], exit_file: Path) -> int:
    """Start the wrapped command detached (own session and process group); return the wrapper's pid."""

    log_file.parent.mkdir(parents=True, exist_ok=True)
    exit_file.unlink(missing_ok=True)
    with log_file.open("ab") as log:
        proc = subprocess.Popen(
            wrapped(command, exit_file),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=dict(env),
            cwd=os.getcwd(),
        )
    return proc.pid


# ------------------------------------------------------------------------ the job host ---------------
# One process (kappa.lifecycle.job_host) runs the `shared` deployments as queries of one Spark application. A host
# keeps the code it started with, so there is one host per code: a job started after its code changed (a replay's
# new version beside the live one) gets a host of its own, and the old host ends after its last job. Each host's
# state file (host-<code>.json: pid, start, the KAPPA_* settings it runs with) and log (host-<code>.log) sit beside
# the deployments'.

HOST_IDLE_S = 10.0  # a host ends this long after its last job (a `kappa jobs start` starts one again)


def host_command(code: str) -> list[str]:
    return [sys.executable, "-m", "kappa.cli", *HOST_MARKER.split(), code]


def code_fingerprint() -> str:
    """The code a deployment would run now: the jobs' and the platform's Python files as they are on disk."""
    # Lazy: jobs/ is the user's code, found at run time (and it imports this library).
    import jobs

    digest = hashlib.sha256()
    for root in (*jobs.__path__, *kappa.__path__):
        for path in sorted(Path(root).rglob("*.py")):
            digest.update(f"{path.relative_to(root)}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


@dataclass(frozen=True)
class Host:
    pid: int  # the host's wrapper
    code: str  # the code_fingerprint it runs
    started_at: str
    log_file: str
    env: dict[str, str]  # the KAPPA_* settings every job it runs runs with


def _host_state(settings: KappaSettings, code: str) -> Path:
    return settings.deployments_path / f"host-{code}.json"


def hosts(settings: KappaSettings) -> list[Host]:
    """Every job host recorded here (running, or killed before it could remove its state file)."""
    found = []
    root = settings.deployments_path
    for path in sorted(p for p in root.glob("host-*.json") if _HOST_FILE.fullmatch(p.name)) if root.is_dir() else []:
        try:
            found.append(Host(**json.loads(path.read_text())))
        except (OSError, json.JSONDecodeError, TypeError) as exc:
            raise KappaError(
                f"the job host's state file {path} is unreadable ({exc}): delete it if no host runs"
            ) from None
    return found


@contextlib.contextmanager
def _host_locked(settings: KappaSettings) -> Iterator[None]:
    """Held while a shared deployment is added, and by a host while it decides to end for idleness."""
    settings.deployments_path.mkdir(parents=True, exist_ok=True)
    with (settings.deployments_path / "host.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def ensure_host(settings: KappaSettings, environment: Mapping[str, str], kappa_env: dict[str, str]) -> Host:
    """The running job host of the code on disk now; one is started when none runs. One application
    has one set of settings: a job deployed with other KAPPA_* settings than that host's is refused. The caller
    holds the host lock."""
    code = code_fingerprint()
    for gone in (h for h in hosts(settings) if not is_host(h.pid)):  # killed before it could remove its own
        _host_state(settings, gone.code).unlink(missing_ok=True)
    host = next((h for h in hosts(settings) if h.code == code), None)
    if host is not None:
        if host.env != kappa_env:
            differ = sorted(k for k in {*host.env, *kappa_env} if host.env.get(k) != kappa_env.get(k))
            raise KappaError(
                f"the job host (pid {host.pid}) runs its jobs with other settings ({', '.join(differ)}): deploy "
                "with the same KAPPA_* settings, or stop its jobs first (it then ends by itself)"
            )
        return host
    log_file = settings.deployments_path / f"host-{code}.log"
    started_at = now_iso()
    with log_file.open("a") as log:
        log.write(f"{STARTED_LINE} the job host at {started_at}\n")
    pid = spawn(host_command(code), log_file, environment, exit_file(log_file))
    state = _host_state(settings, code)
    host = Host(pid, code, started_at, str(log_file), kappa_env)
    state.with_suffix(".json.tmp").write_text(json.dumps(asdict(host)))
    state.with_suffix(".json.tmp").replace(state)
    # Until the wrapper shows its own command line (not the parent's copy), or has exited.
    wait_until(
        lambda: is_host(pid) or not process.exists(pid),
        10,
        f"the job host (pid {pid}) did not show its own command line within 10 s (log: {log_file})",
        interval_s=0.02,
    )
    if not is_host(pid):
        raise KappaError(f"the job host exited at once: {ended_because(exit_file(log_file), None, log_file)}")
    return host


def hosted(settings: KappaSettings, host_pid: int) -> list[Deployment]:
    """The shared deployments recorded as run by the host with this pid (running or stopped)."""
    root = settings.deployments_path
    found = [_read(p) for p in _deployment_files(root)]
    return [d for d in found if d is not None and d.launcher == Launcher.SHARED.value and d.pid == host_pid]


@contextlib.contextmanager
def idle_host_ends(settings: KappaSettings, host_pid: int, code: str) -> Iterator[bool]:
    """Whether the host may end now (no deployment of it should run), decided under the host lock, which is
    held until the host has removed its state file: a `kappa jobs start` then starts a new host."""
    with _host_locked(settings):
        idle = not any(d.desired == "running" for d in hosted(settings, host_pid))
        yield idle
        if idle:
            _host_state(settings, code).unlink(missing_ok=True)


# ------------------------------------------------------------------------ operations -----------------


def launch_env(env: Mapping[str, str] | None, *, exact: bool = False) -> dict[str, str]:
    """The environment of a deployment: this process's, with `env` over it, log times in UTC. `exact`: the
    settings (KAPPA_*) are `env`'s alone, none of this process's (a restart runs with what the start had)."""
    base = {k: v for k, v in os.environ.items() if not (exact and k.startswith("KAPPA_"))}
    return {**base, **(env or {}), "TZ": "UTC", "PYTHONUNBUFFERED": "1"}


def start(
    settings: KappaSettings,
    job: str,
    version: int,
    *,
    env: Mapping[str, str] | None = None,
    restarts: int = 0,
    last_exit_reason: str | None = None,
) -> Deployment:
    """Start `job` at `version` continuously, detached. The job reads its settings from its environment:
    this process's, with `env` (KAPPA_* variables, e.g. KappaResource.overrides) over it. Every KAPPA_*
    variable it starts with is recorded, so a restart, from whichever process, runs with the same settings.
    Refuses when it is already running."""
    check_runnable(settings, job, version)
    with _locked(settings, job, version):
        return _start(
            settings,
            job,
            version,
            launcher=settings.deploy_launcher,
            env=env,
            restarts=restarts,
            last_exit_reason=last_exit_reason,
        )


def check_runnable(settings: KappaSettings, job: str, version: int) -> None:
    """The job exists and this code runs `version`, on inputs that have not moved under it: the rule the run
    applies when it binds (`deployed_job`), checked before anything is started or stopped."""

    deployed_job(settings, job, version, run=True)


def _start(
    settings: KappaSettings,
    job: str,
    version: int,
    *,
    launcher: Launcher,
    env: Mapping[str, str] | None,
    restarts: int,
    last_exit_reason: str | None,
    exact: bool = False,
) -> Deployment:
    current = load(settings, job, version)
    if current is not None and is_running(current):
        raise KappaError(
            f"{job} v{version} is already running (pid {current.pid}, since {current.started_at}); "
            f"`kappa jobs restart {job} --version {version}` restarts it"
        )
    with checkpoint_lock(settings, job, version, "a deployment start"):  # refused while another writer runs
        pass
    _, log_file = _paths(settings, job, version)
    # This start's run writes its own records: nothing of the last run's may be read as this one's.
    run_record.reset(run_record.record_path(settings, job, version), job, version)
    environment = launch_env(env, exact=exact)
    kappa_env = {k: v for k, v in sorted(environment.items()) if k.startswith("KAPPA_")}
    if launcher is Launcher.SHARED and not _real_time(job):
        with _host_locked(settings):  # the host cannot end for idleness between its start and the job's record
            host = ensure_host(settings, environment, kappa_env)
            command = [*host_command(host.code), job, "--version", str(version)]  # a thread of the host
            started = _log_start(log_file, job, version, restarts, command)
            deployment = Deployment(job, version, host.pid, command, launcher.value, started, str(log_file), kappa_env,
                                    restarts, last_exit_reason, host_log=host.log_file)  # fmt: skip
            deployment.exit_path.unlink(missing_ok=True)
            save(settings, deployment)  # the host starts the job when it reads this
        _await_job_process(deployment)
        return deployment
    launcher = Launcher.SUBPROCESS if launcher is Launcher.SHARED else launcher
    command = job_command(settings.model_copy(update={"deploy_launcher": launcher}), job, version)
    started = _log_start(log_file, job, version, restarts, command)
    pid = spawn(command, log_file, environment, exit_file(log_file))
    deployment = Deployment(job, version, pid, command, launcher.value, started, str(log_file), kappa_env,
                            restarts, last_exit_reason)  # fmt: skip
    save(settings, deployment)
    # Until the wrapper shows its own command line (not the parent's copy), or has exited at once (status() then
    # reports it as crashed, with the log's reason).
    wait_until(
        lambda: is_ours(pid, job, version) or not process.exists(pid),
        10,
        f"{job} v{version} (pid {pid}) did not show its own command line within 10 s (log: {log_file})",
        interval_s=0.02,
    )
    _await_job_process(deployment)
    return deployment


def _await_job_process(deployment: Deployment, timeout_s: float = 30.0) -> None:
    """Until the process that runs the job shows (what `status` names), or the run has ended (status says why)."""
    with contextlib.suppress(WaitTimeoutError):  # a slow start: `status` shows the pid once there is one
        shows = lambda: job_pid(deployment) is not None or not is_running(deployment)  # noqa: E731
        wait_until(shows, timeout_s, f"{deployment.name}: no job process within {timeout_s:g} s", interval_s=0.05)


def _log_start(log_file: Path, job: str, version: int, restarts: int, command: Sequence[str]) -> str:
    """The start line that opens a run's part of the job's log; returns the start time."""
    started_at = now_iso()
    with log_file.open("a") as log:
        log.write(f"{STARTED_LINE} {job} v{version} at {started_at} (restart {restarts}): {' '.join(command)}\n")
    return started_at


def _real_time(job: str) -> bool:
    """A real-time job holds a task slot per input partition for a whole batch: it keeps a driver of its own
    (with the slots it needs, see runtime.runner.real_time_slots) under any launcher."""

    return get_job(job).real_time is not None


def stop(settings: KappaSettings, job: str, version: int, timeout_s: float | None = None) -> Deployment:
    """SIGTERM the job (it stops after its current batch), wait up to `timeout_s`, then SIGKILL its group.
    Records the deployment as stopped, so the health sensor leaves it alone."""
    with _locked(settings, job, version):
        current = load(settings, job, version)
        if current is None or (current.desired == "stopped" and not is_running(current)):
            raise KappaError(f"{job} v{version} is not running (`kappa jobs status` lists the deployments)")
        _end(settings, current, settings.deploy_stop_timeout_s if timeout_s is None else timeout_s)
        stopped = replace(current, desired="stopped", stopped_at=now_iso())
        save(settings, stopped)
        return stopped


def stop_if_running(settings: KappaSettings, job: str, version: int, timeout_s: float | None = None) -> bool:
    """Stop the version if a deployment of it runs here; True if one did (the replay's retire step)."""
    current = load(settings, job, version)
    if current is None or not is_running(current):
        if current is not None and current.desired != "stopped":
            save(settings, replace(current, desired="stopped", stopped_at=now_iso()))  # crashed: no restart
        return False
    stop(settings, job, version, timeout_s)
    return True


def stop_all(settings: KappaSettings, timeout_s: float | None = None) -> list[str]:
    """Stop every running deployment recorded here (each after its current batch), then the job hosts. Returns the
    deployments stopped. For `kappa down --purge`: nothing may run against the state it deletes."""
    stopped = [
        state.deployment.name
        for state in status(settings)
        if stop_if_running(settings, state.deployment.job, state.deployment.version, timeout_s)
    ]
    for host in hosts(settings):  # idle now: ended without waiting for their idle time
        if is_host(host.pid):
            process.stop(host.pid, HOST_MARKER)
    return stopped


def _end(settings: KappaSettings, deployment: Deployment, timeout_s: float) -> None:
    """End the deployment's run: its process (SIGTERM, then SIGKILL), or its thread in the job host."""
    if deployment.launcher == Launcher.SHARED.value:
        _end_hosted(settings, deployment, timeout_s)
    else:
        _terminate(deployment, timeout_s)


def _end_hosted(settings: KappaSettings, deployment: Deployment, timeout_s: float) -> None:
    """Record the deployment as stopped: the host, which follows the state files, stops the job after its
    current batch and writes its exit line. There is no process of its own to kill: past the timeout, a KappaError
    (the host still stops it after its batch)."""
    if not is_running(deployment):
        return
    save(settings, replace(deployment, desired="stopped", stopped_at=now_iso()))
    wait_until(
        lambda: not is_running(deployment),
        timeout_s,
        f"{deployment.name} did not stop within {timeout_s:g} s: the job host (pid {deployment.pid}) stops it after "
        "its current batch (`kappa jobs status` shows when)",
    )


def _terminate(deployment: Deployment, timeout_s: float) -> None:
    if not is_running(deployment):
        return
    targets = driver_pids(deployment) or [deployment.pid]
    for pid in targets:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    with contextlib.suppress(WaitTimeoutError):  # past the timeout, the SIGKILL below ends it
        wait_until(
            lambda: not is_running(deployment),
            timeout_s,
            f"{deployment.name} did not stop within {timeout_s:g} s",
        )
    # Anything left in the group: the wrapper past the timeout, or a JVM the driver failed to stop.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if process.group_members(deployment.pid):
            os.killpg(deployment.pid, signal.SIGKILL)

    def group_gone() -> bool:
        process.reap(deployment.pid)
        return not process.group_members(deployment.pid)

    wait_until(
        group_gone,
        10,
        f"{deployment.name}'s processes (group {deployment.pid}) still run 10 s after SIGKILL",
        interval_s=0.1,
    )


def restart(
    settings: KappaSettings, job: str, version: int, *, reason: str | None = None, timeout_s: float | None = None
) -> Deployment:
    """Stop the version if it runs, start it again from its checkpoint (same settings, restarts + 1).
    `reason` is recorded as the last exit reason; by default, a crashed deployment's own."""
    check_runnable(settings, job, version)
    with _locked(settings, job, version):
        current = load(settings, job, version)
        if current is None:
            raise KappaError(f"{job} v{version} was never started here (`kappa jobs start {job}`)")
        if reason is None:
            if is_running(current):
                reason = "restarted on request"
            elif current.desired == "stopped":
                reason = "started again after a stop"
            else:
                reason = exit_reason(current)
        _end(settings, current, settings.deploy_stop_timeout_s if timeout_s is None else timeout_s)
        return _start(
            settings,
            job,
            version,
            launcher=Launcher(current.launcher),  # the deployment keeps its launcher, whoever restarts it
            env=current.env,
            restarts=current.restarts + 1,
            last_exit_reason=reason,
            exact=True,
        )


def read_exit_status(path: Path) -> int | None:
    """The exit status in an exit record; None while there is none (running, or killed with its wrapper)."""
    try:
        return int(json.loads(path.read_text())["exit_status"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise KappaError(f"exit record {path} unreadable ({exc}): it is rewritten when the job next ends") from None


def record_exit(deployment: Deployment, status: int) -> None:
    """Record how a run ended, as the shell wrapper does for a job's own process: the exit record (atomically) and
    the log's last line. The job host's, for the jobs it runs as threads."""
    ended_at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    tmp = deployment.exit_path.with_name(deployment.exit_path.name + ".tmp")
    tmp.write_text(json.dumps({"exit_status": status, "ended_at": ended_at}) + "\n")
    with deployment.log_path.open("a") as log:
        log.write(f"{EXIT_LINE} {status} at {ended_at}\n")
    tmp.replace(deployment.exit_path)


def exit_status(deployment: Deployment) -> int | None:
    """How the deployment's latest run ended, as its wrapper (or the job host) recorded it."""
    return read_exit_status(deployment.exit_path)


def ended_because(exit_path: Path, run: RunRecord | None, log_file: Path, host_log: str | None = None) -> str:
    """Why a run ended: its exit status, and the error it recorded (or, when it recorded none, as when it failed
    before it knew its settings, the last error lines of its log). A job of a job host that died with it has no
    exit status of its own: the host's wrapper recorded how the host ended."""
    reason = describe_status(status := read_exit_status(exit_path))
    if status is None and host_log is not None and (host := read_exit_status(exit_file(Path(host_log)))) is not None:
        reason = f"its job host was {describe_status(host)}"
    if run is not None and run.last_error:
        return f"{reason}; last error: {run.last_error}"
    try:
        with log_file.open("rb") as log:
            log.seek(max(0, log.seek(0, os.SEEK_END) - _LOG_TAIL_BYTES))
            tail = last_log_lines(log.read().decode(errors="replace"))
    except OSError:
        tail = []
    return reason + ("; last log lines: " + " | ".join(tail) if tail else "")


def exit_reason(deployment: Deployment) -> str:
    run = run_record.read(deployment.run_record_path)
    return ended_because(deployment.exit_path, run, deployment.log_path, deployment.host_log)


def confirm_running(deployment: Deployment, seconds: float) -> None:
    """Watch a new deployment for a few seconds: a bad setting or an unreachable Kafka ends it at once, and the
    command that started it says so instead of reporting a start."""
    deadline = time.monotonic() + seconds
    while True:
        state = state_of(deployment)
        if state.health is not Health.RUNNING:
            raise KappaError(
                f"{deployment.job} v{deployment.version} exited at once: {state.exit_reason} "
                f"(log: {deployment.log_file})"
            )
        if time.monotonic() >= deadline:
            return
        time.sleep(0.5)


def state_of(deployment: Deployment, now: datetime | None = None) -> DeploymentState:
    running = is_running(deployment)  # first: a run that ends now has written its record by the time it is gone
    run = run_record.read(deployment.run_record_path)
    if running:
        started = datetime.fromisoformat(deployment.started_at)
        uptime = ((now or datetime.now(UTC)) - started).total_seconds()
        return DeploymentState(deployment, Health.RUNNING, uptime_s=uptime, run=run, pid=job_pid(deployment),
                               supervised=_wrapper_waits(deployment))  # fmt: skip
    if deployment.desired == "stopped":
        return DeploymentState(deployment, Health.STOPPED, run=run)
    reason = ended_because(deployment.exit_path, run, deployment.log_path, deployment.host_log)
    return DeploymentState(deployment, Health.CRASHED, exit_reason=reason, run=run)


def status(settings: KappaSettings) -> list[DeploymentState]:
    """Every deployment recorded here, with its health now."""
    root = settings.deployments_path
    return [state_of(d) for d in (_read(p) for p in _deployment_files(root)) if d is not None]


def last_batch(settings: KappaSettings, job: str, version: int) -> tuple[LastBatch | None, int]:
    """The output query's last batch, as the version's latest run recorded it, and its rows over every run."""
    run = run_record.read(run_record.record_path(settings, job, version))
    return (run.last_batch, run.rows) if run is not None else (None, 0)


def lag(settings: KappaSettings, job: str, version: int, timeout_s: float = 15.0) -> Lag:
    """The version's consumer lag per input topic (its group's offsets vs the end offsets), and its last batch.
    Kafka unreachable within `timeout_s`: a KappaError; the inputs unknown here: an UnknownInputsError."""

    group = consumer_group(job, version)
    try:
        topics = read_topics(settings, job, version)
    except KappaError as exc:
        raise UnknownInputsError(f"the lag of {job} v{version} is unknown: {exc}") from None
    consumer = Consumer({"bootstrap.servers": settings.bootstrap, "group.id": f"{group}.lag-probe", "log_level": 0})
    try:
        watermarks: dict[str, dict[int, tuple[int, int]]] = {}
        for topic in topics:
            metadata = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
            if metadata is None or metadata.error is not None:
                continue
            watermarks[topic] = {
                p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)
                for p in metadata.partitions
            }
    except KafkaException as exc:
        raise KappaError(f"cannot read the end offsets of {', '.join(topics)}: {exc}") from None
    finally:
        consumer.close()
    # The group's offsets of exactly these partitions (confluent-kafka 2.16 crashes listing "all" of a group).
    wanted = [TopicPartition(t, p) for t, parts in watermarks.items() for p in sorted(parts)]
    committed: dict[str, dict[int, int]] = {}
    if wanted:
        try:
            admin = admin_client(settings)  # held until the answer: a collected client never resolves its futures
            request = [ConsumerGroupTopicPartitions(group, wanted)]
            listed = admin.list_consumer_group_offsets(request, request_timeout=timeout_s)
            offsets = listed[group].result(timeout=timeout_s + 1).topic_partitions or []
        except (KafkaException, TimeoutError) as exc:
            why = str(exc) or f"no answer within {timeout_s:g} s"
            raise KappaError(f"cannot read the offsets of group {group} at {settings.bootstrap}: {why}") from None
        for tp in offsets:
            if tp.offset >= 0:
                committed.setdefault(tp.topic, {})[tp.partition] = tp.offset
    last, rows = last_batch(settings, job, version)
    return Lag(group=group, per_topic=topic_lag(committed, watermarks), last_batch=last, rows=rows)


def describe(seconds: float | None) -> str:
    """`3h04m`, `12m05s`, `41s`."""
    if seconds is None:
        return "-"
    s = int(seconds)
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def as_metadata(lag: Lag) -> dict[str, Any]:
    """Lag, rows and the last batch as plain values (Dagster metadata, the status table)."""
    return {
        "consumer_group": lag.group,
        "consumer_lag": lag.total,
        "consumer_lag_per_topic": dict(lag.per_topic),
        "rows": lag.rows,
        "last_batch_id": lag.last_batch.batch_id if lag.last_batch else None,
        "last_batch_at": lag.last_batch.at.isoformat() if lag.last_batch else None,
        "last_batch_rows": lag.last_batch.rows if lag.last_batch else None,
    }
