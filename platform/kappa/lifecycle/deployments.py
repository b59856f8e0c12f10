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

This module is the start/stop/restart and status of a deployment; the rest sits beside it, and is imported from
where it is defined:
- kappa.lifecycle.state_files: the state file, its paths and the locks;
- kappa.lifecycle.exits: the log's start and exit lines, the exit record, why a run ended;
- kappa.lifecycle.wrapper: the shell wrapper, spawning under it, and the job's watch on it;
- kappa.lifecycle.host_registry: the job hosts' state files, and starting one;
- kappa.lifecycle.launchers: one class per launcher, chosen from the setting in one place;
- kappa.lifecycle.lag: consumer lag and the last batch.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime

from kappa.core.errors import KappaError
from kappa.core.settings import SECRET_VARIABLES, KappaSettings, Launcher
from kappa.core.waiting import WaitTimeoutError, wait_until
from kappa.lifecycle import launchers
from kappa.lifecycle.exits import ended_because, exit_reason
from kappa.lifecycle.host_registry import HOST_MARKER, hosts, is_host
from kappa.lifecycle.launchers import is_running, job_pid
from kappa.lifecycle.state_files import (
    Deployment,
    DeploymentState,
    Health,
    checkpoint_lock,
    load,
    locked,
    now_iso,
    paths,
    recorded,
    save,
)
from kappa.lifecycle.wrapper import launch_env
from kappa.runtime import run_record
from kappa.runtime.binding import deployed_job
from kappa.runtime.run_record import RunState
from kappa.stack import process


def job_command(
    settings: KappaSettings,
    job: str,
    version: int,
    *,
    spark_conf: Mapping[str, str] | None = None,
    cli_path: str | None = None,
) -> list[str]:
    """The command of a continuous run of `job` at `version`, for the configured launcher
    (kappa.lifecycle.launchers: `spark_conf` and `cli_path` are for one that hands them to a cluster)."""
    launcher = launchers.named(settings.deploy_launcher.value)
    return launcher.command(settings, job, version, spark_conf=spark_conf, cli_path=cli_path)


# ------------------------------------------------------------------------ operations -----------------


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
    with locked(settings, job, version):
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
    _, log_file = paths(settings, job, version)
    # This start's run writes its own records: nothing of the last run's may be read as this one's.
    run_record.reset(run_record.record_path(settings, job, version), job, version)
    environment = launch_env(env, exact=exact)
    # What the state files record of the settings (for restarts): never a secret's value, which a restart takes
    # from its own environment or a password file.
    kappa_env = {k: v for k, v in sorted(environment.items()) if k.startswith("KAPPA_") and k not in SECRET_VARIABLES}
    deployment = launchers.for_start(launcher, job).start(
        settings,
        job,
        version,
        log_file=log_file,
        environment=environment,
        kappa_env=kappa_env,
        restarts=restarts,
        last_exit_reason=last_exit_reason,
    )
    _await_job_process(deployment)
    return deployment


def _await_job_process(deployment: Deployment, timeout_s: float = 30.0) -> None:
    """Until the process that runs the job shows (what `status` names), or the run has ended (status says why)."""
    with contextlib.suppress(WaitTimeoutError):  # a slow start: `status` shows the pid once there is one
        shows = lambda: job_pid(deployment) is not None or not is_running(deployment)  # noqa: E731
        wait_until(shows, timeout_s, f"{deployment.name}: no job process within {timeout_s:g} s", interval_s=0.05)


def stop(settings: KappaSettings, job: str, version: int, timeout_s: float | None = None) -> Deployment:
    """SIGTERM the job (it stops after its current batch), wait up to `timeout_s`, then SIGKILL its group.
    Records the deployment as stopped, so the health sensor leaves it alone."""
    with locked(settings, job, version):
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
    """End the deployment's run, as its launcher does: its process (SIGTERM, then SIGKILL), or its thread in the
    job host."""
    launchers.of(deployment).end(settings, deployment, timeout_s)


def restart(
    settings: KappaSettings, job: str, version: int, *, reason: str | None = None, timeout_s: float | None = None
) -> Deployment:
    """Stop the version if it runs, start it again from its checkpoint (same settings, restarts + 1).
    `reason` is recorded as the last exit reason; by default, a crashed deployment's own."""
    check_runnable(settings, job, version)
    with locked(settings, job, version):
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


# ------------------------------------------------------------------------ status ---------------------


def confirm_running(deployment: Deployment, seconds: float) -> None:
    """Watch a new deployment for a few seconds: a bad setting or an unreachable Kafka ends it at once, and the
    command that started it says so instead of reporting a start. A run whose query has started is past both
    (the record was reset at this start): the watch ends there, sooner when the job host is already warm."""
    deadline = time.monotonic() + seconds
    while True:
        state = state_of(deployment)
        if state.health is not Health.RUNNING:
            raise KappaError(
                f"{deployment.job} v{deployment.version} exited at once: {state.exit_reason} "
                f"(log: {deployment.log_file})"
            )
        if time.monotonic() >= deadline or (state.run is not None and state.run.state is RunState.RUNNING):
            return
        time.sleep(0.5)


def state_of(deployment: Deployment, now: datetime | None = None) -> DeploymentState:
    running = is_running(deployment)  # first: a run that ends now has written its record by the time it is gone
    run = run_record.read(deployment.run_record_path)
    if running:
        started = datetime.fromisoformat(deployment.started_at)
        uptime = ((now or datetime.now(UTC)) - started).total_seconds()
        return DeploymentState(deployment, Health.RUNNING, uptime_s=uptime, run=run, pid=job_pid(deployment),
                               supervised=launchers.of(deployment).supervised(deployment))  # fmt: skip
    if deployment.desired == "stopped":
        return DeploymentState(deployment, Health.STOPPED, run=run)
    reason = ended_because(deployment.exit_path, run, deployment.log_path, deployment.host_log)
    return DeploymentState(deployment, Health.CRASHED, exit_reason=reason, run=run)


def status(settings: KappaSettings) -> list[DeploymentState]:
    """Every deployment recorded here, with its health now."""
    return [state_of(d) for d in recorded(settings)]


def describe(seconds: float | None) -> str:
    """`3h04m`, `12m05s`, `41s`."""
    if seconds is None:
        return "-"
    s = int(seconds)
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"
