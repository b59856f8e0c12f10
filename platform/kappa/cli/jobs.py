"""`kappa jobs list | new | run | start | stop | restart | status | host`: the streaming jobs in jobs/."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

from kappa.cli.table import render
from kappa.core.errors import KappaError
from kappa.core.settings import KappaSettings
from kappa.lifecycle import deployments, job_host, launchers
from kappa.lifecycle.lag import UnknownInputsError, lag, last_batch
from kappa.lifecycle.launchers import job_pid
from kappa.lifecycle.log_rotation import LogRotation
from kappa.lifecycle.state_files import Deployment, DeploymentState, Health, checkpoint_lock, paths
from kappa.lifecycle.wrapper import watch_wrapper, wrapper_gone
from kappa.ops import scaffold
from kappa.runtime.binding import deployed_job, ensure_live
from kappa.runtime.declaration import Starting
from kappa.runtime.discovery import discover, get_job
from kappa.runtime.outputs import output_of
from kappa.runtime.run_record import RunRecorder, RunState
from kappa.spark.driver_files import log_file as spark_log


def cmd_jobs_list(settings: KappaSettings, args: argparse.Namespace) -> int:
    rows = []
    for spec in discover().values():
        rows.append((spec.name, str(spec.version), ",".join(t.name for t in spec.inputs), output_of(spec.output).label))
    for line in render(("job", "version", "inputs", "output"), rows, "<><<"):
        print(line)
    return 0


def cmd_jobs_run(settings: KappaSettings, args: argparse.Namespace) -> int:
    # Lazy: imports pyspark, only where a Spark session runs (this module is imported without one).
    from kappa.runtime.pipes import pipes_reporter, require_pipes
    from kappa.runtime.runner import configure_logging, run_job

    configure_logging()
    try:
        starting = Starting.parse(args.start_from) if args.start_from else None  # None: earliest, or resume
    except ValueError as exc:
        raise KappaError(str(exc)) from None
    if args.pipes:
        require_pipes()  # before anything is read or bound
    version = get_job(args.job).version if args.version is None else args.version
    with contextlib.ExitStack() as stack:
        # Launched by Dagster: each batch, the run's report and any refusal go back through Pipes.
        pipes = stack.enter_context(pipes_reporter()) if args.pipes else None
        # Held until the run ends: a replay's catch-up, a deployment start or a second run of the version is refused.
        stack.enter_context(
            checkpoint_lock(settings, args.job, version, f"`kappa jobs run {args.job} --version {version}`")
        )
        # The run's own record of its state (`kappa jobs status` reads it), with any error that ends it from here on.
        record = stack.enter_context(RunRecorder.recording(settings, args.job, version))
        spec = deployed_job(settings, args.job, version, run=True)
        ensure_live(settings, spec, version)
        # A deployment's run stops when its wrapper is gone, as at SIGTERM: nothing writes unsupervised.
        watch = watch_wrapper(lambda: os.kill(os.getpid(), signal.SIGTERM))
        if watch is not None:  # a deployment's own process, whose output goes to its log (wrapper.spawn): rotated,
            _, log_file = paths(settings, args.job, version)  # with the Spark drivers' shared warnings log
            stack.callback(LogRotation.of(settings, lambda: [log_file, spark_log(settings)]).stop)
        report = run_job(
            spec,
            settings,
            version=args.version,
            available_now=args.available_now,
            starting=starting,
            max_offsets_per_trigger=args.max_offsets_per_trigger,
            on_batch=pipes.batch if pipes else None,
            run_record=record,
        )
        if watch is not None and watch.gone.is_set():
            raise KappaError(wrapper_gone(watch.wrapper, f"{args.job} v{version}"))
        if pipes:
            pipes.finish(report)
    how = "stopped by signal" if report.stopped_by_signal else "done"
    rows = sum(report.input_rows.values())
    print(f"{report.job} v{report.version}: {how} after {report.seconds:.1f} s, {rows} input rows")
    return 0


def cmd_jobs_new(settings: KappaSettings, args: argparse.Namespace) -> int:
    made = scaffold.scaffold(settings, args.job, args.input)
    for path in scaffold.write(Path.cwd(), made):
        print(f"wrote {path}")
    if made.skipped:
        print(f"left out of the test's sample record (nested types: add them by hand): {', '.join(made.skipped)}")
    print(
        f"next: `uv run pytest tests/unit/test_{args.job}.py`, then `uv run kappa jobs run {args.job} --available-now`"
    )
    return 0


def _job_version(args: argparse.Namespace) -> tuple[str, int]:
    """The job (it must exist) and the version to act on (default: the declared one)."""

    spec = get_job(args.job)
    return spec.name, args.version or spec.version


def cmd_jobs_start(settings: KappaSettings, args: argparse.Namespace) -> int:
    job, version = _job_version(args)
    deployment = deployments.start(settings, job, version)
    deployments.confirm_running(deployment, args.wait)
    where = " ".join(filter(None, (launchers.of(deployment).where, f"(pid {_pid(deployment)})")))
    print(f"{job} v{version}: started {where}, log {deployment.log_file}")
    return 0


def cmd_jobs_host(settings: KappaSettings, args: argparse.Namespace) -> int:
    return job_host.serve(settings, args.code)


def cmd_jobs_stop(settings: KappaSettings, args: argparse.Namespace) -> int:
    job, version = _job_version(args)
    started = time.monotonic()
    deployments.stop(settings, job, version, timeout_s=args.timeout)
    print(f"{job} v{version}: stopped in {time.monotonic() - started:.1f} s")
    return 0


def cmd_jobs_restart(settings: KappaSettings, args: argparse.Namespace) -> int:
    job, version = _job_version(args)
    deployment = deployments.restart(settings, job, version, reason=args.reason, timeout_s=args.timeout)
    deployments.confirm_running(deployment, args.wait)
    print(f"{job} v{version}: restarted (restart {deployment.restarts}), pid {_pid(deployment)}")
    return 0


def _pid(deployment: Deployment) -> str:
    """The pid of the process that runs the job (what to signal), as `status` shows it."""
    pid = job_pid(deployment)
    return "starting" if pid is None else str(pid)


def cmd_jobs_status(settings: KappaSettings, args: argparse.Namespace) -> int:
    states = deployments.status(settings)
    if not states:
        print(f"no deployments recorded in {settings.deployments_path} (start one with `kappa jobs start <job>`)")
        return 0
    rows: list[tuple[str, ...]] = []
    notes: list[list[str]] = []  # each row's lines under it
    reachable = True
    for state in states:
        d = state.deployment
        behind, batch = "?", "-"
        last, _rows = last_batch(settings, d.job, d.version)  # what the run recorded: no Kafka
        if last:
            batch = f"#{last.batch_id} {last.at.strftime('%H:%M:%S')}Z {last.rows} rows"
        try:
            if not reachable:
                raise KappaError("Kafka did not answer for an earlier row")
            behind = str(lag(settings, d.job, d.version, timeout_s=5).total)
        except UnknownInputsError:
            pass  # this row's lag is "?" (a version recorded before bindings named its topics); Kafka answers
        except KappaError:
            reachable = False  # Kafka not reachable: the table still shows the processes, lag "?"
        # The process that runs the job: the one to signal (its wrapper is the deployment's handle, not the job).
        pid = str(state.pid or "starting") if state.health is Health.RUNNING else "-"
        uptime = deployments.describe(state.uptime_s)
        rows.append((d.job, str(d.version), state.health.value, pid, uptime, behind, batch, str(d.restarts)))
        notes.append(_notes(state, args.verbose))
    header = ("job", "version", "state", "pid", "uptime", "lag", "last batch", "restarts")
    head, *lines = render(header, rows, "<><>>><>")
    print(head)
    for line, under in zip(lines, notes, strict=True):
        print(line)
        for note in under:
            print(f"  {note}")
    return 1 if any(s.health is Health.CRASHED for s in states) else 0


def _notes(state: DeploymentState, verbose: bool) -> list[str]:
    """The lines under a deployment's row: why it crashed, what it waits for, its queries (verbose)."""
    d, run, notes = state.deployment, state.run, []
    if state.exit_reason:
        notes.append(f"why: {state.exit_reason}")
    elif state.health is Health.RUNNING and not state.supervised:
        notes.append(f"stopping: its wrapper (pid {d.pid}) is gone; it stops after its current batch")
    elif run is not None and run.state is RunState.RETRYING and state.health is Health.RUNNING:
        notes.append(f"waiting: {run.last_error} (it starts its query again once the service answers)")
    elif d.last_exit_reason and verbose:
        notes.append(f"last restart: {d.last_exit_reason}")
    if verbose and run is not None and run.queries:
        queries = ", ".join(f"{q} {ids['id']} (run {ids['run_id']})" for q, ids in run.queries.items())
        notes.append(f"queries: {queries}")
    if verbose and run is not None and run.metrics_url and state.health is Health.RUNNING:
        notes.append(f"metrics: {run.metrics_url}")
    return notes


def add_jobs_commands(sub: Any) -> None:
    jobs = sub.add_parser("jobs", help="the streaming jobs in jobs/")
    jobs_sub = jobs.add_subparsers(dest="jobs_command", required=True, metavar="action")
    jobs_sub.add_parser("list", help="every job: version, inputs, output").set_defaults(func=cmd_jobs_list)
    run = jobs_sub.add_parser("run", help="run a job until stopped (SIGTERM stops it after its current batch)")
    run.set_defaults(func=cmd_jobs_run)
    run.add_argument("job")
    run.add_argument("--version", type=int, default=None, help="physical version label (default: the declared)")
    run.add_argument("--available-now", action="store_true", help="process what is there, then stop")
    run.add_argument(
        "--from",
        dest="start_from",
        default=None,
        help="earliest (default) | latest | ISO timestamp; a version keeps the start point its first run had",
    )
    run.add_argument("--max-offsets-per-trigger", type=int, default=None, help="cap each micro-batch")
    run.add_argument(
        "--pipes", action="store_true", help="report progress and the run to Dagster (set by Dagster's launcher)"
    )

    new = jobs_sub.add_parser(
        "new",
        help="scaffold a job folder and its test (they pass as generated)",
        description="jobs/<job>/ (declaration, transforms) reading a declared topic into a Delta table named after "
        "the job, and tests/unit/test_<job>.py; run from the project's root",
    )
    new.set_defaults(func=cmd_jobs_new)
    new.add_argument("job", help="the new job's name (lower_case_with_underscores)")
    new.add_argument("--input", required=True, help="the declared topic it reads")

    for name, func, help_ in (
        ("start", cmd_jobs_start, "deploy a job version: run it continuously, detached, supervised"),
        ("stop", cmd_jobs_stop, "stop a deployment (SIGTERM: after its current batch; SIGKILL after --timeout)"),
        ("restart", cmd_jobs_restart, "stop and start a deployment again; it resumes from its checkpoint"),
    ):
        p = jobs_sub.add_parser(name, help=help_, description=help_)
        p.set_defaults(func=func)
        p.add_argument("job")
        p.add_argument("--version", type=int, default=None, help="the version (default: the declared one)")
        if name != "start":
            p.add_argument("--timeout", type=float, default=None, help="seconds (default KAPPA_DEPLOY_STOP_TIMEOUT_S)")
        if name == "restart":
            p.add_argument("--reason", default=None, help="recorded as the deployment's last exit reason")
        if name != "stop":
            p.add_argument("--wait", type=float, default=5.0, help="seconds at most to watch it for an early exit")
    host = jobs_sub.add_parser(
        "host", help="run the shared deployments in one Spark application (started by `kappa jobs start`)"
    )
    host.set_defaults(func=cmd_jobs_host)
    host.add_argument("code", help="the fingerprint of the code it runs (its state file's name)")
    status = jobs_sub.add_parser("status", help="every deployment: state, pid, uptime, lag, last batch")
    status.set_defaults(func=cmd_jobs_status)
    status.add_argument("-v", "--verbose", action="store_true", help="also why each was last restarted")
