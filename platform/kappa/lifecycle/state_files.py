"""What is recorded about a deployment on disk: its state file `<deployments_dir>/<job>.v<N>.json`, the paths of
the records and log beside it, and the locks that keep one start/stop/restart, and one writer of a checkpoint, at a
time (kappa.lifecycle.deployments describes the whole)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path

from kappa.core.errors import KappaError
from kappa.core.settings import KappaSettings
from kappa.runtime import run_record
from kappa.runtime.declaration import version_consumer_group, version_id, version_name
from kappa.runtime.run_record import RunRecord

_DEPLOYMENT_FILE = re.compile(r"[\w-]+\.v\d+\.json")  # not the run and exit records beside it


class Health(StrEnum):
    RUNNING = "running"
    CRASHED = "crashed"  # should run, but its process is gone
    STOPPED = "stopped"  # stopped on purpose (kappa jobs stop, Dagster's stop_<job>)


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def marker(job: str, version: int) -> str:
    """What the command line of a deployment's wrapper and driver shows, whichever the launcher."""
    return f"jobs run {job} --version {version}"


def consumer_group(job: str, version: int) -> str:
    """The group the runner records the version's progress under (JobContext.consumer_group)."""
    return version_consumer_group(job, version)


def output_query(job: str, version: int) -> str:
    """The name of the version's output query (JobContext.query_name())."""
    return version_id(job, version)


def exit_file(log_file: Path) -> Path:
    """A run's exit record sits beside its log: `<job>.v<N>.log` -> `<job>.v<N>.exit.json`."""
    return log_file.with_suffix(".exit.json")


@dataclass(frozen=True)
class Deployment:
    """What the state file records about one job version's deployment."""

    job: str
    version: int
    pid: int  # the wrapper: leader of the deployment's process group, its handle (the job's own pid: job_pid)
    command: list[str]  # the job's command (without the wrapper)
    launcher: str  # the Launcher that started it (kappa.lifecycle.launchers), kept on restart
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
        return version_name(self.job, self.version)

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


def paths(settings: KappaSettings, job: str, version: int) -> tuple[Path, Path]:
    """The version's state file and log."""
    root = settings.deployments_path
    return root / f"{version_name(job, version)}.json", root / f"{version_name(job, version)}.log"


def load(settings: KappaSettings, job: str, version: int) -> Deployment | None:
    state, _ = paths(settings, job, version)
    return read(state)


def deployment_files(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("*.v*.json") if _DEPLOYMENT_FILE.fullmatch(p.name)) if root.is_dir() else []


def recorded(settings: KappaSettings) -> list[Deployment]:
    """Every deployment recorded here."""
    found = (read(p) for p in deployment_files(settings.deployments_path))
    return [d for d in found if d is not None]


def read(path: Path) -> Deployment | None:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError) as exc:
        raise KappaError(f"deployment state {path} unreadable ({exc}): delete it if its job is not running") from None
    return Deployment(**data)


def save(settings: KappaSettings, deployment: Deployment) -> None:
    """Write the state file atomically (a reader never sees half of it)."""
    state, _ = paths(settings, deployment.job, deployment.version)
    state.parent.mkdir(parents=True, exist_ok=True)
    tmp = state.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(asdict(deployment), indent=2) + "\n")
    tmp.replace(state)


@contextlib.contextmanager
def flocked(path: Path) -> Iterator[None]:
    """An exclusive flock on `path` (created), waited for, held for the block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def locked(settings: KappaSettings, job: str, version: int) -> contextlib.AbstractContextManager[None]:
    """One start/stop/restart of a deployment at a time (the CLI and Dagster's sensor may race)."""
    return flocked(settings.deployments_path / f"{version_name(job, version)}.lock")


class CheckpointInUseError(KappaError):
    """A version's checkpoint lock is held: `holder` says by whom."""

    def __init__(self, job: str, version: int, holder: str) -> None:
        super().__init__(f"the checkpoint of {job} v{version} is in use by {holder}")
        self.holder = holder


@contextlib.contextmanager
def checkpoint_lock(settings: KappaSettings, job: str, version: int, holder: str) -> Iterator[None]:
    """One writer per checkpoint. Held for their whole run by whatever runs a version's queries (`kappa jobs run`
    in any mode, so a deployment and Dagster's catch-up runs too; `kappa replay start`'s catch-up), and briefly
    by whatever else writes or deletes the checkpoint (a deployment start, a retire). Never waits: raises a
    KappaError naming the holder (`holder` says who we are). A flock, so a killed holder's lock goes with it."""
    settings.deployments_path.mkdir(parents=True, exist_ok=True)
    with (settings.deployments_path / f"{version_name(job, version)}.checkpoint.lock").open("a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            held_by = lock.read().strip() or "another process"
            raise CheckpointInUseError(job, version, held_by) from None
        lock.seek(0)
        lock.truncate()
        lock.write(f"{holder} (pid {os.getpid()}, since {now_iso()})")
        lock.flush()
        yield
