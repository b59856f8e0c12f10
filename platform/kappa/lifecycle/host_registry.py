"""The job hosts of this machine, as the deployments see them (the host itself: kappa.lifecycle.job_host).

One process runs the `shared` deployments as queries of one Spark application. A host keeps the code it started
with, so there is one host per code: a job started after its code changed (a replay's new version beside the live
one) gets a host of its own, and the old host ends after its last job. Each host's state file (host-<code>.json:
pid, start, the KAPPA_* settings it runs with) and log (host-<code>.log) sit beside the deployments'.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from kappa.core.errors import KappaError
from kappa.core.settings import KappaSettings, Launcher
from kappa.core.waiting import wait_until
from kappa.lifecycle.exits import STARTED_LINE, ended_because
from kappa.lifecycle.state_files import Deployment, exit_file, flocked, now_iso, recorded
from kappa.lifecycle.wrapper import spawn, wrapper_alive
from kappa.spark.code_archive import code_fingerprint
from kappa.stack import process

HOST_MARKER = "jobs host"  # what the job host's command line shows (kappa.lifecycle.job_host)
HOST_IDLE_S = 10.0  # a host ends this long after its last job (a `kappa jobs start` starts one again)
_HOST_FILE = re.compile(r"host-\w+\.json")  # not its exit record


def host_command(code: str) -> list[str]:
    return [sys.executable, "-m", "kappa.cli", *HOST_MARKER.split(), code]


def is_host(pid: int) -> bool:
    """True while pid is alive and is the job host's wrapper."""
    return wrapper_alive(pid, HOST_MARKER)


@dataclass(frozen=True)
class Host:
    pid: int  # the host's wrapper
    code: str  # the code_fingerprint it runs
    started_at: str
    log_file: str
    env: dict[str, str]  # the KAPPA_* settings every job it runs runs with


def host_log(settings: KappaSettings, code: str) -> Path:
    """The log of the job host that runs `code` (its own lines and its JVM's)."""
    return settings.deployments_path / f"host-{code}.log"


def host_state(settings: KappaSettings, code: str) -> Path:
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


def host_locked(settings: KappaSettings) -> contextlib.AbstractContextManager[None]:
    """Held while a shared deployment is added, and by a host while it decides to end for idleness."""
    return flocked(settings.deployments_path / "host.lock")


def ensure_host(settings: KappaSettings, environment: Mapping[str, str], kappa_env: dict[str, str]) -> Host:
    """The running job host of the code on disk now; one is started when none runs. One application
    has one set of settings: a job deployed with other KAPPA_* settings than that host's is refused. The caller
    holds the host lock."""
    code = code_fingerprint()
    for gone in (h for h in hosts(settings) if not is_host(h.pid)):  # killed before it could remove its own
        host_state(settings, gone.code).unlink(missing_ok=True)
    host = next((h for h in hosts(settings) if h.code == code), None)
    if host is not None:
        if host.env != kappa_env:
            differ = sorted(k for k in {*host.env, *kappa_env} if host.env.get(k) != kappa_env.get(k))
            raise KappaError(
                f"the job host (pid {host.pid}) runs its jobs with other settings ({', '.join(differ)}): deploy "
                "with the same KAPPA_* settings, or stop its jobs first (it then ends by itself)"
            )
        return host
    log_file = host_log(settings, code)
    started_at = now_iso()
    with log_file.open("a") as log:
        log.write(f"{STARTED_LINE} the job host at {started_at}\n")
    pid = spawn(host_command(code), log_file, environment, exit_file(log_file))
    state = host_state(settings, code)
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
    return [d for d in recorded(settings) if d.launcher == Launcher.SHARED.value and d.pid == host_pid]


@contextlib.contextmanager
def idle_host_ends(settings: KappaSettings, host_pid: int, code: str) -> Iterator[bool]:
    """Whether the host may end now (no deployment of it should run), decided under the host lock, which is
    held until the host has removed its state file: a `kappa jobs start` then starts a new host."""
    with host_locked(settings):
        idle = not any(d.desired == "running" for d in hosted(settings, host_pid))
        yield idle
        if idle:
            host_state(settings, code).unlink(missing_ok=True)
