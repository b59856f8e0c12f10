"""How a deployment's job is run, one class per KAPPA_DEPLOY_LAUNCHER (kappa.lifecycle.deployments describes the
whole).

`subprocess` runs the job here on KAPPA_SPARK_MASTER (local[*] by default); `spark-submit` submits it to a cluster
master in client mode (the driver, and so the supervision, stays here); `shared` runs it as queries of the job host,
one Spark application for this machine's jobs (kappa.lifecycle.job_host): the state file, log, checkpoint and
lifecycle stay the job's own, the pid is the host's, and the job's end is the exit record the host writes for it.

A launcher is chosen in one place (`for_start`, from the setting) and recorded in the deployment's state file, so
whoever stops or restarts the deployment later finds the same one (`of`). Another launcher is one class: subclass
`OwnProcessLauncher` (a command whose driver runs here, under the wrapper) or `JobLauncher`, set its `name` to the
`Launcher` value that chooses it (the values KAPPA_DEPLOY_LAUNCHER accepts, kappa.core.settings), and `register` it.
"""

from __future__ import annotations

import importlib.util
import sys
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import ClassVar, TypeVar

from kappa.core.errors import KappaError
from kappa.core.settings import KappaSettings, Launcher
from kappa.core.waiting import wait_until
from kappa.lifecycle.exits import log_start
from kappa.lifecycle.host_registry import HOST_MARKER, ensure_host, host_command, host_locked, is_host
from kappa.lifecycle.state_files import Deployment, exit_file, now_iso, save
from kappa.lifecycle.wrapper import is_ours, spawn
from kappa.runtime.discovery import get_job
from kappa.spark.code_archive import code_fingerprint
from kappa.spark.session import spark_conf as session_conf
from kappa.stack import process


class JobLauncher(ABC):
    """What the deployments need of a way to run a job version continuously: its command, its start, whether it
    runs, the process that runs it, and its end."""

    name: ClassVar[Launcher]  # the KAPPA_DEPLOY_LAUNCHER value that chooses it, recorded in the state file
    where: ClassVar[str | None] = None  # where `kappa jobs start` says the job runs ("in the job host"); None: own

    def for_job(self, job: str) -> JobLauncher:
        """The launcher that runs `job` when this one is configured (itself, unless it cannot run the job)."""
        return self

    @abstractmethod
    def command(
        self,
        settings: KappaSettings,
        job: str,
        version: int,
        *,
        spark_conf: Mapping[str, str] | None = None,
        cli_path: str | None = None,
    ) -> list[str]:
        """The command that runs `job` at `version` continuously. `spark_conf` (default: kappa.spark.session's)
        and `cli_path` (default: the installed CLI's file) are for a launcher that hands them to a cluster."""

    @abstractmethod
    def start(
        self,
        settings: KappaSettings,
        job: str,
        version: int,
        *,
        log_file: Path,
        environment: Mapping[str, str],
        kappa_env: dict[str, str],
        restarts: int,
        last_exit_reason: str | None,
    ) -> Deployment:
        """Start the run, detached, its start line in `log_file`, and record it in the state file (the caller
        holds the deployment's lock and waits for the job's process)."""

    @abstractmethod
    def supervised(self, deployment: Deployment) -> bool:
        """The deployment's wrapper is alive: its own process's, or the job host's."""

    @abstractmethod
    def driver_shows(self, deployment: Deployment) -> str:
        """What the command line of the Python process that runs the job shows."""

    def ended(self, deployment: Deployment) -> bool:
        """Its run's end is recorded though its process may run on (the job host, which runs other jobs)."""
        return False

    @abstractmethod
    def end(self, settings: KappaSettings, deployment: Deployment, timeout_s: float) -> None:
        """End the run: after its current batch, within `timeout_s` (or as the launcher can past it)."""


_LAUNCHERS: dict[str, JobLauncher] = {}
_L = TypeVar("_L", bound=type[JobLauncher])


def register(launcher: _L) -> _L:
    """Make a launcher class the one its `name` chooses (a class decorator)."""
    _LAUNCHERS[launcher.name.value] = launcher()
    return launcher


def named(name: str) -> JobLauncher:
    """The launcher a KAPPA_DEPLOY_LAUNCHER value, or a state file's `launcher`, names."""
    try:
        return _LAUNCHERS[name]
    except KeyError:
        raise KappaError(f"no launcher {name!r} here (known: {', '.join(sorted(_LAUNCHERS))})") from None


def for_start(launcher: Launcher, job: str) -> JobLauncher:
    """The launcher a start of `job` uses when `launcher` is configured: the one place a launcher is chosen."""
    return named(launcher.value).for_job(job)


def of(deployment: Deployment) -> JobLauncher:
    """The launcher that started the deployment (it keeps it, whoever restarts it)."""
    return named(deployment.launcher)


# ------------------------------------------------------------------------ any launcher ---------------


def is_running(deployment: Deployment) -> bool:
    """The deployment's job runs now: its wrapper waits for it, or its process still runs (its wrapper killed, it
    finishes its batch); for a shared one, in a job host that has not ended it (no exit record since its start)."""
    launcher = of(deployment)
    return not launcher.ended(deployment) and (launcher.supervised(deployment) or bool(driver_pids(deployment)))


def job_pid(deployment: Deployment) -> int | None:
    """The process that runs the job now (its Python driver, or the job host); None when there is none."""
    return next(iter(driver_pids(deployment)), None)


def driver_pids(deployment: Deployment) -> list[int]:
    """The Python process(es) that run the job, in the deployment's process group: the job's driver or the job
    host, which handle SIGTERM gracefully (not the wrapper, not spark-submit's JVM, not the py4j gateway JVM,
    which the driver stops itself). Found by group, so also after the wrapper is gone."""
    shows = of(deployment).driver_shows(deployment)
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


def terminate(deployment: Deployment, timeout_s: float) -> None:
    """SIGTERM the job's driver (it stops after its current batch), wait up to `timeout_s`, then SIGKILL whatever
    is left of its process group: the wrapper past the timeout, or a JVM the driver failed to stop."""
    if not is_running(deployment):
        return
    process.end_group(
        deployment.pid,
        lambda: is_running(deployment),
        timeout_s,
        f"{deployment.name} (process group {deployment.pid})",
        term=driver_pids(deployment) or [deployment.pid],
        whole_group=True,
    )


# ------------------------------------------------------------------------ the launchers --------------


class OwnProcessLauncher(JobLauncher):
    """The job in a process of its own, under the shell wrapper that records its exit (kappa.lifecycle.wrapper):
    what stands for it is its driver, here."""

    def start(
        self,
        settings: KappaSettings,
        job: str,
        version: int,
        *,
        log_file: Path,
        environment: Mapping[str, str],
        kappa_env: dict[str, str],
        restarts: int,
        last_exit_reason: str | None,
    ) -> Deployment:
        command = self.command(settings, job, version)
        started = log_start(log_file, job, version, restarts, command)
        pid = spawn(command, log_file, environment, exit_file(log_file))
        deployment = Deployment(job, version, pid, command, self.name.value, started, str(log_file), kappa_env,
                                restarts, last_exit_reason)  # fmt: skip
        save(settings, deployment)
        # Until the wrapper shows its own command line (not the parent's copy), or has exited at once (status()
        # then reports it as crashed, with the log's reason).
        wait_until(
            lambda: is_ours(pid, job, version) or not process.exists(pid),
            10,
            f"{job} v{version} (pid {pid}) did not show its own command line within 10 s (log: {log_file})",
            interval_s=0.02,
        )
        return deployment

    def supervised(self, deployment: Deployment) -> bool:
        return is_ours(deployment.pid, deployment.job, deployment.version)

    def driver_shows(self, deployment: Deployment) -> str:
        return deployment.marker

    def end(self, settings: KappaSettings, deployment: Deployment, timeout_s: float) -> None:
        terminate(deployment, timeout_s)


def _run_args(job: str, version: int) -> list[str]:
    return ["jobs", "run", job, "--version", str(version)]


@register
class SubprocessLauncher(OwnProcessLauncher):
    """`python -m kappa.cli jobs run <job> --version N`; the runner builds its Spark session from the settings
    (KAPPA_SPARK_MASTER, local[*] by default)."""

    name = Launcher.SUBPROCESS

    def command(
        self,
        settings: KappaSettings,
        job: str,
        version: int,
        *,
        spark_conf: Mapping[str, str] | None = None,
        cli_path: str | None = None,
    ) -> list[str]:
        return [sys.executable, "-m", "kappa.cli", *_run_args(job, version)]


def default_spark_submit() -> str:
    """pyspark's own spark-submit (the wheel ships Spark's launch scripts)."""
    # Lazy: pyspark, only where a Spark session runs (this module is imported without one).
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-submit")


@register
class SparkSubmitLauncher(OwnProcessLauncher):
    """The same entry point submitted in client mode with `--master <KAPPA_SPARK_MASTER>` and the session's
    configuration as `--conf`s (the connector jars as `--jars`, so executors on the cluster get them); the session's
    configuration needs the connector jars fetched."""

    name = Launcher.SPARK_SUBMIT

    def command(
        self,
        settings: KappaSettings,
        job: str,
        version: int,
        *,
        spark_conf: Mapping[str, str] | None = None,
        cli_path: str | None = None,
    ) -> list[str]:
        if spark_conf is None:
            spark_conf = session_conf(settings, f"kappa-{job}-v{version}")
        conf = dict(spark_conf)
        jars = conf.pop("spark.jars", "")
        py_files = conf.pop("spark.submit.pyFiles", "")  # spark-submit's own option, which ships them too
        files = [f for f in conf.pop("spark.files", "").split(",") if f and f not in py_files.split(",")]
        conf |= {"spark.files": ",".join(files)} if files else {}
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
        if py_files:
            command += ["--py-files", py_files]
        for key, value in sorted(conf.items()):
            command += ["--conf", f"{key}={value}"]
        # The CLI's file, found without importing it: the CLI imports this module.
        cli_file = importlib.util.find_spec("kappa.cli.main").origin  # type: ignore[union-attr]
        return [*command, cli_path or str(cli_file), *_run_args(job, version)]


@register
class SharedLauncher(JobLauncher):
    """The job as a thread of the job host of the code on disk (started when none runs): the host follows the
    state files, so a start is a state file, and a stop records the deployment as stopped."""

    name = Launcher.SHARED
    where = "in the job host"

    def for_job(self, job: str) -> JobLauncher:
        # A real-time job holds a task slot per input partition for a whole batch: it keeps a driver of its own
        # (with the slots it needs, see runtime.runner.real_time_slots).
        return self if get_job(job).real_time is None else named(Launcher.SUBPROCESS.value)

    def command(
        self,
        settings: KappaSettings,
        job: str,
        version: int,
        *,
        spark_conf: Mapping[str, str] | None = None,
        cli_path: str | None = None,
    ) -> list[str]:
        return self._command(code_fingerprint(), job, version)

    @staticmethod
    def _command(code: str, job: str, version: int) -> list[str]:
        return [*host_command(code), job, "--version", str(version)]  # a thread of the host of `code`

    def start(
        self,
        settings: KappaSettings,
        job: str,
        version: int,
        *,
        log_file: Path,
        environment: Mapping[str, str],
        kappa_env: dict[str, str],
        restarts: int,
        last_exit_reason: str | None,
    ) -> Deployment:
        with host_locked(settings):  # the host cannot end for idleness between its start and the job's record
            host = ensure_host(settings, environment, kappa_env)
            command = self._command(host.code, job, version)
            started = log_start(log_file, job, version, restarts, command)
            deployment = Deployment(job, version, host.pid, command, self.name.value, started, str(log_file),
                                    kappa_env, restarts, last_exit_reason, host_log=host.log_file)  # fmt: skip
            deployment.exit_path.unlink(missing_ok=True)
            save(settings, deployment)  # the host starts the job when it reads this
        return deployment

    def supervised(self, deployment: Deployment) -> bool:
        return is_host(deployment.pid)

    def driver_shows(self, deployment: Deployment) -> str:
        return HOST_MARKER

    def ended(self, deployment: Deployment) -> bool:
        return deployment.exit_path.exists()

    def end(self, settings: KappaSettings, deployment: Deployment, timeout_s: float) -> None:
        """Record the deployment as stopped: the host, which follows the state files, stops the job after its
        current batch and writes its exit line. There is no process of its own to kill: past the timeout, a
        KappaError (the host still stops it after its batch)."""
        if not is_running(deployment):
            return
        save(settings, replace(deployment, desired="stopped", stopped_at=now_iso()))
        wait_until(
            lambda: not is_running(deployment),
            timeout_s,
            f"{deployment.name} did not stop within {timeout_s:g} s: the job host (pid {deployment.pid}) stops it "
            "after its current batch (`kappa jobs status` shows when)",
        )
