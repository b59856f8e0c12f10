"""Start, watch and stop the stack's JVM processes by pid, and check loopback ports."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from kappa.errors import StackError


def _can_bind(port: int, host: str, reuse: bool) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        if reuse:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return False
            raise
    return True


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """True when a process holds host:port (listening or bound), not merely closed connections lingering."""
    return not _can_bind(port, host, reuse=True)


def wait_until_bindable(port: int, host: str = "127.0.0.1", timeout_s: float = 90.0) -> bool:
    """Wait out connections of a stopped server lingering in TIME_WAIT on its port (the JVM servers bind
    without SO_REUSEADDR, so they would fail). Return False if the port is still not free."""
    deadline = time.monotonic() + timeout_s
    while not _can_bind(port, host, reuse=False):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def spawn(argv: Sequence[str], marker: str, log_file: Path, cwd: Path, env: Mapping[str, str] | None = None) -> int:
    """Start a detached process (its own session, so `down` can signal its whole group); return its pid.

    Returns once the process shows its own command line (carrying `marker`): for a moment after the fork,
    /proc still shows the parent's, and `is_running` would take the new process for a stranger.
    """
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as log:
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and proc.poll() is None:
        if marker in (_cmdline(proc.pid) or ""):
            break
        time.sleep(0.01)
    return proc.pid


def _cmdline(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None


def _reap(pid: int) -> None:
    # Our own children become zombies when they exit; reap them so /proc no longer lists them.
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def is_running(pid: int, marker: str) -> bool:
    """True when pid is alive and is still our process (its command line carries `marker`).

    The marker guards against pid reuse: after a reboot an old pid may belong to anything.
    """
    _reap(pid)
    cmdline = _cmdline(pid)
    if cmdline is None:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][:1] if Path(f"/proc/{pid}/stat").exists() else ""
    return state != "Z" and marker in cmdline


def stop(pid: int, marker: str, timeout_s: float = 30.0) -> bool:
    """SIGTERM the process group, SIGKILL it after timeout_s. Return True if it was running."""
    if not is_running(pid, marker):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not is_running(pid, marker):
            return True
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while is_running(pid, marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    return True


def log_tail(log_file: Path, lines: int = 12) -> str:
    try:
        text = log_file.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.strip().splitlines()[-lines:])


def wait_healthy(
    component: str,
    healthy: Callable[[], bool],
    pid: int,
    marker: str,
    log_file: Path,
    timeout_s: float,
) -> float:
    """Poll `healthy` until it is true; fail fast if the process dies. Return the seconds it took."""
    started = time.monotonic()
    while True:
        if not is_running(pid, marker):
            raise StackError(f"{component} exited during start-up; see its log {log_file}:\n{log_tail(log_file)}")
        with contextlib.suppress(Exception):
            if healthy():
                return time.monotonic() - started
        if time.monotonic() - started > timeout_s:
            raise StackError(
                f"{component} was not healthy after {timeout_s:.0f} s (KAPPA_STARTUP_TIMEOUT_S); "
                f"see its log {log_file}:\n{log_tail(log_file)}"
            )
        time.sleep(0.5)
