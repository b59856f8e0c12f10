"""Rotation of the deployments' and the job host's logs, so that a pipeline that runs for weeks has bounded disk.

Every writer of these logs holds them open in append mode (the wrapper's stdout, inherited by the shell, the JVM
and Python; the host's per-job handlers): none can be told to reopen a file. So a log is rotated the way
logrotate's `copytruncate` does it: its content is copied (gzipped) to `<log>.1.gz`, the older copies shifted up
to `<log>.<keep>.gz`, and the live file truncated in place. With O_APPEND a writer's next line lands at the new
end, the start of the file, never past a hole. The newest lines stay in the live file, where `kappa jobs status`
reads a crash's last lines (kappa.lifecycle.exits.ended_because).

A log that several processes rotate (`.state/logs/spark.log`, which every Spark driver of the state folder
appends to: the job host and each `kappa jobs run` rotate it) is rotated under an exclusive lock on
`<log>.rotating`, so that two rotations never copy the same lines twice.
"""

from __future__ import annotations

import fcntl
import gzip
import io
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from kappa.core.settings import KappaSettings

log = logging.getLogger("kappa.deployments")

CHECK_S = 60.0  # how often a LogRotation looks at its logs' sizes
_CHUNK = 1024 * 1024
_MB = 1024 * 1024


def rotate_if_large(path: Path, max_bytes: int, keep: int) -> bool:
    """Copy-then-truncate `path` when it is larger than `max_bytes`, keeping `keep` gzipped copies (`<name>.1.gz`
    the newest). True when it was rotated; a missing file is not rotated.

    Nothing is copied twice: the copy is of the file's bytes up to the moment it is truncated, and what is
    written after the truncation lands in the live file. What a writer appends while the copy runs is copied
    too (the copy reads on until it finds no more); only a line written between that last read and the
    truncation is lost: a window of one system call, and of the wait for the GIL after it while another thread
    of this process runs. Writers that cannot be told to reopen their file leave no way to close it (logrotate's
    copytruncate has the same window); a log's lines are far apart, so it is rarely hit."""
    try:
        if path.stat().st_size <= max_bytes:
            return False
    except FileNotFoundError:  # deleted (a purge), or not written yet
        return False
    with path.with_name(f"{path.name}.rotating").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process's rotation of the same log finishes first
        return _rotate(path, max_bytes, keep)


def _rotate(path: Path, max_bytes: int, keep: int) -> bool:
    try:
        if path.stat().st_size <= max_bytes:  # again, under the lock: another process may have just rotated it
            return False
        src = path.open("r+b", buffering=0)  # unbuffered: each read asks the file for what it has now
    except FileNotFoundError:
        return False
    pending = path.with_name(f"{path.name}.1.gz.tmp")
    truncated = False
    try:
        with src, gzip.open(pending, "wb", compresslevel=6) as copy:  # 6: zlib's default, far faster than 9
            _copy_all(src, copy)
            copy.flush()  # the copy on disk before anything is truncated: a full disk fails here, losing nothing
            _copy_all(src, copy)  # what was appended during the flush
            os.ftruncate(src.fileno(), 0)  # at once after the read that found no more
            truncated = True
    finally:
        if truncated:  # even if closing the copy failed: short of its last bytes, it is better kept than lost
            try:
                _shift(path, keep)
            except OSError:  # the copy is the only one of its lines: out of the next rotation's way, not overwritten
                pending.replace(path.with_name(f"{path.name}.unshifted-{time.time_ns()}.gz"))
                raise
            pending.replace(_generation(path, 1))
        else:  # the log is whole: a partial copy would only hold the disk that rotation is to free
            pending.unlink(missing_ok=True)
    return True


def _copy_all(src: io.FileIO, copy: gzip.GzipFile) -> None:
    """Copy until a read finds nothing more: what writers append meanwhile is copied too."""
    while chunk := src.read(_CHUNK):
        copy.write(chunk)


def _generation(path: Path, n: int) -> Path:
    return path.with_name(f"{path.name}.{n}.gz")


def _shift(path: Path, keep: int) -> None:
    """Make room for a new `.1.gz`: each copy one up, and none past `keep` (also those of a larger keep before)."""
    numbered = re.compile(rf"{re.escape(path.name)}\.(\d+)\.gz")
    found = sorted(int(m[1]) for p in path.parent.glob(f"{path.name}.*.gz") if (m := numbered.fullmatch(p.name)))
    for n in reversed(found):
        if n >= keep:
            _generation(path, n).unlink(missing_ok=True)
        else:
            _generation(path, n).replace(_generation(path, n + 1))


class LogRotation:
    """A daemon thread that rotates the logs `paths()` names (asked again at each check, so a job host gives the
    logs of the jobs it runs now) every `check_s`, starting at once. A failure to rotate is logged and tried
    again at the next check: housekeeping never ends the process it runs in."""

    def __init__(
        self, paths: Callable[[], Iterable[Path]], max_bytes: int, keep: int, check_s: float = CHECK_S
    ) -> None:
        self._paths = paths
        self._max_bytes = max_bytes
        self._keep = keep
        self._check_s = check_s
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kappa-log-rotation", daemon=True)
        self._thread.start()

    @classmethod
    def of(cls, settings: KappaSettings, paths: Callable[[], Iterable[Path]]) -> LogRotation:
        """Rotation at the settings' KAPPA_LOG_MAX_MB, keeping KAPPA_LOG_KEEP copies."""
        return cls(paths, int(settings.log_max_mb * _MB), settings.log_keep)

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stopped.is_set():
            self._check()
            self._stopped.wait(self._check_s)

    def _check(self) -> None:
        try:
            paths = list(self._paths())
        except Exception as exc:  # an unreadable state file, say: the next check asks again
            log.warning("log rotation: could not list the logs (%s); trying again in %.0f s", exc, self._check_s)
            return
        for path in paths:
            try:
                if rotate_if_large(path, self._max_bytes, self._keep):
                    log.info("rotated %s past %.1f MB: its earlier lines are in %s (%d copies kept)", path,
                             self._max_bytes / _MB, _generation(path, 1).name, self._keep)  # fmt: skip
            except OSError as exc:  # a full disk, a permission: the log grows on until a check succeeds
                log.warning("log rotation: could not rotate %s (%s); trying again in %.0f s", path, exc, self._check_s)
