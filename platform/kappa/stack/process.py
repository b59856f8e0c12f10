"""Processes by pid: start, watch and stop them (the stack's JVMs, the deployments' wrappers), and loopback ports."""

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

import psutil

from kappa.core.errors import StackError
from kappa.core.waiting import WaitTimeoutError, wait_until


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """True when a process holds host:port (listening or bound). Connections of a stopped server that linger
    on the port (TIME_WAIT, FIN_WAIT2: up to a minute) do not count: the stack's servers (the JVM's
    ServerSocketChannel, Vert.x, Go's net.Listen) bind with SO_REUSEADDR, as this probe does, and the kernel
    lets them bind over those connections."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return True
            raise
    return False


def spawn(argv: Sequence[str], marker: str, log_file: Path, cwd: Path, env: Mapping[str, str] | None = None) -> int:
    """Start a detached process (its own session, so `down` can signal its whole group); return its pid.

    Returns once the process shows its own command line (carrying `marker`): for a moment after the fork,
    the process still shows the parent's, and `is_running` would take the new process for a stranger.
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
    wait_until(
        lambda: proc.poll() is not None or marker in " ".join(command_line(proc.pid) or []),
        10,
        f"{argv[0]} (pid {proc.pid}) did not show its own command line within 10 s",
        interval_s=0.01,
    )
    return proc.pid


def command_line(pid: int) -> list[str] | None:
    """The arguments of the live process `pid`; None when there is none: gone, a zombie not yet reaped, or
    exiting (its memory, and with it its command line, already released)."""
    reap(pid)
    try:
        process = psutil.Process(pid)
        cmdline = None if process.status() == psutil.STATUS_ZOMBIE else process.cmdline()
    except psutil.Error:
        return None
    return cmdline or None


def reap(pid: int) -> None:
    """Collect pid's exit status if it is this process's child that has exited, so it is gone, not a zombie."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def exists(pid: int) -> bool:
    """pid names a process, alive or a zombie."""
    return bool(psutil.pid_exists(pid))


def group_members(pgid: int) -> list[int]:
    """The live processes of a process group."""
    members = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(process.pid) == pgid and process.status() != psutil.STATUS_ZOMBIE:
                members.append(process.pid)
    return sorted(members)


def is_running(pid: int, marker: str) -> bool:
    """True when pid is alive and is still our process (its command line carries `marker`).

    The marker guards against pid reuse: after a reboot an old pid may belong to anything.
    """
    cmdline = command_line(pid)
    return cmdline is not None and marker in " ".join(cmdline)


def stop(pid: int, marker: str, timeout_s: float = 30.0) -> bool:
    """SIGTERM the process group, SIGKILL it after timeout_s. Return True if it was running."""
    if not is_running(pid, marker):
        return False
    end_group(pid, lambda: is_running(pid, marker), timeout_s, f"pid {pid} ({marker})")
    return True


def end_group(
    pgid: int,
    running: Callable[[], bool],
    timeout_s: float,
    what: str,
    *,
    term: Sequence[int] | None = None,
    whole_group: bool = False,
) -> None:
    """SIGTERM, wait, SIGKILL: the one way a process group is ended here (the stack's servers, a deployment, a job
    host). SIGTERM goes to `term` (by default the whole group `pgid`), then up to `timeout_s` for `running()` to
    turn false; past it, SIGKILL to the group, and up to 10 s more for it to be gone (else a WaitTimeoutError
    naming `what`). `whole_group`: whatever is left of the group once `running()` is false is SIGKILLed too (a
    JVM its driver failed to stop, a wrapper past the timeout), and gone means the group is empty."""
    if term is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
    for pid in term or []:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    try:
        wait_until(lambda: not running(), timeout_s, f"{what} did not stop within {timeout_s:g} s")
        if not whole_group:
            return
    except WaitTimeoutError:  # past the timeout: SIGKILL, which ends it for sure
        pass
    with contextlib.suppress(ProcessLookupError, PermissionError):  # (the group is empty when all exited)
        os.killpg(pgid, signal.SIGKILL)

    def gone() -> bool:
        if not whole_group:
            return not running()
        reap(pgid)
        return not group_members(pgid)

    wait_until(gone, 10, f"{what} still runs 10 s after SIGKILL", interval_s=0.1)


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

    def up() -> bool:
        if not is_running(pid, marker):
            raise StackError(f"{component} exited during start-up; see its log {log_file}:\n{log_tail(log_file)}")
        with contextlib.suppress(Exception):
            return healthy()
        return False

    wait_until(
        up,
        timeout_s,
        lambda: (
            f"{component} was not healthy after {timeout_s:.0f} s (KAPPA_STARTUP_TIMEOUT_S); "
            f"see its log {log_file}:\n{log_tail(log_file)}"
        ),
        interval_s=0.5,
    )
    return time.monotonic() - started
