"""The shell wrapper every deployed process runs under, and its supervision: the wrapper records the job's exit
status however the job dies, is the leader of the deployment's process group (its handle), and is watched by the
job, which stops after its current batch once the wrapper is gone (kappa.lifecycle.deployments describes the
whole)."""

from __future__ import annotations

import logging
import os
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from kappa.lifecycle.exits import EXIT_LINE
from kappa.lifecycle.state_files import marker
from kappa.stack import process

log = logging.getLogger("kappa.deployments")

WRAPPER_NAME = "kappa-deployment"  # $0 of the shell wrapper: shows in ps, and marks the process as ours


def wrapped(command: Sequence[str], exit_file: Path) -> list[str]:
    """The command under the shell wrapper that records the job's exit status when it ends, however it ends: in the
    exit record (atomically: a file renamed over it) and as the last line of the log."""
    script = (
        'x=$1; shift; "$@"; s=$?; t=$(date -u +%Y-%m-%dT%H:%M:%SZ); '
        'printf \'{"exit_status": %d, "ended_at": "%s"}\\n\' "$s" "$t" > "$x.tmp" && mv -f "$x.tmp" "$x"; '
        f'echo "{EXIT_LINE} $s at $t"'
    )
    return ["/bin/sh", "-c", script, WRAPPER_NAME, str(exit_file), *command]


def launch_env(env: Mapping[str, str] | None, *, exact: bool = False) -> dict[str, str]:
    """The environment of a deployment: this process's, with `env` over it, log times in UTC. `exact`: the
    settings (KAPPA_*) are `env`'s alone, none of this process's (a restart runs with what the start had)."""
    base = {k: v for k, v in os.environ.items() if not (exact and k.startswith("KAPPA_"))}
    return {**base, **(env or {}), "TZ": "UTC", "PYTHONUNBUFFERED": "1"}


def spawn(command: Sequence[str], log_file: Path, env: Mapping[str, str], exit_file: Path) -> int:
    """Start the wrapped command detached (own session and process group); return the wrapper's pid."""

    log_file.parent.mkdir(parents=True, exist_ok=True)
    exit_file.unlink(missing_ok=True)
    with log_file.open("ab") as log_:
        proc = subprocess.Popen(
            wrapped(command, exit_file),
            stdin=subprocess.DEVNULL,
            stdout=log_,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=dict(env),
            cwd=os.getcwd(),
        )
    return proc.pid


def wrapper_alive(pid: int, shows: str) -> bool:
    """True while pid is alive and is a deployment's wrapper whose command line shows `shows`."""
    cmdline = process.command_line(pid)
    return cmdline is not None and WRAPPER_NAME in cmdline and shows in " ".join(cmdline)


def is_ours(pid: int, job: str, version: int) -> bool:
    """True while pid is alive and is this deployment's wrapper (a reused pid shows another command line)."""
    return wrapper_alive(pid, marker(job, version))


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
        while wrapper_alive(self.wrapper, ""):
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
    if leader == os.getpid() or not wrapper_alive(leader, ""):
        return None
    return WrapperWatch(leader, on_gone, interval_s)
