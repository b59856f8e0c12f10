"""Why a run ended: the lines that open and close each run in a deployment's log, the exit record that whatever
outlives the job writes when it ends (its shell wrapper, or the job host for its threads), and the reason `status`
gives for a crash (kappa.lifecycle.deployments describes the whole)."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from kappa.core.errors import KappaError
from kappa.lifecycle.state_files import Deployment, exit_file, now_iso
from kappa.runtime import run_record
from kappa.runtime.run_record import RunRecord

STARTED_LINE = "=== kappa-deployment: started"  # each start's first log line: the log of one run follows it
EXIT_LINE = "=== kappa-deployment: exit status"  # for the log's reader; `status` reads the exit record
_LOG_TAIL_BYTES = 64 * 1024  # a crash's last log lines are read from the log's end


def log_start(log_file: Path, job: str, version: int, restarts: int, command: Sequence[str]) -> str:
    """The start line that opens a run's part of the job's log; returns the start time."""
    started_at = now_iso()
    with log_file.open("a") as log:
        log.write(f"{STARTED_LINE} {job} v{version} at {started_at} (restart {restarts}): {' '.join(command)}\n")
    return started_at


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
