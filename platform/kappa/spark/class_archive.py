"""A class-data-sharing (CDS) archive of the Spark driver's classes, built once by `kappa setup`.

A Spark driver loads and verifies some 20,000 classes (Spark SQL, streaming, Delta, Kafka, Avro, Arrow) every
time it starts. A JVM started with `-XX:SharedArchiveFile` maps them from one file instead. Measured on 2 cores
(enrich_clicks over 3,000 clicks, a fresh driver): the JVM's CPU fell from 44-57 s to 41-44 s, and to 24 s
together with the short-run JIT options of `KAPPA_SPARK_DRIVER_JAVA_OPTIONS`. Answers do not change: the
archive holds class metadata only.

The archive is tied to the java binary and the classpath it was made with; the stamp beside it names both, and
`kappa setup` makes it again when either changes. A JVM given an archive that does not match ignores it (the
option is `-Xshare:auto`, and its warnings are switched off), so a stale archive costs speed, never a run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kappa.core.errors import StackError
from kappa.core.settings import KappaSettings

ARCHIVE = "spark-driver-classes.jsa"
_STAMP = "spark-driver-classes.json"


@dataclass(frozen=True)
class ArchiveReport:
    built: bool  # False: the archive was current, nothing was done
    seconds: float
    path: Path


def archive_path(settings: KappaSettings) -> Path:
    return settings.jars_path / ARCHIVE


def _fingerprint(java: Path, classpath: Sequence[Path]) -> dict[str, object]:
    """What the archive depends on: the JVM binary and every jar on the driver's classpath, in its order."""
    java = java.resolve()
    return {"java": str(java), "java_size": java.stat().st_size, "jars": [p.name for p in classpath]}


def usable_archive(settings: KappaSettings, java: Path, classpath: Sequence[Path]) -> Path | None:
    """The archive, when `kappa setup` made it for this JVM and classpath; None otherwise."""
    path, stamp = archive_path(settings), settings.jars_path / _STAMP
    if not settings.spark_class_archive or not path.is_file() or not stamp.is_file():
        return None
    try:
        recorded = json.loads(stamp.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return path if recorded == _fingerprint(java, classpath) else None


def java_options(archive: Path) -> list[str]:
    """The driver's JVM options that map the archive (silently skipped by a JVM it does not fit)."""
    return [f"-XX:SharedArchiveFile={archive}", "-Xshare:auto", "-Xlog:cds=off", "-Xlog:cds+dynamic=off"]


def ensure_archive(settings: KappaSettings, java: Path, classpath: Sequence[Path]) -> ArchiveReport:
    """Build the archive unless a current one exists: a short Spark session in a child process that touches
    the classes jobs use, dumping them when its JVM exits."""
    path = archive_path(settings)
    if usable_archive(settings, java, classpath) is not None:
        return ArchiveReport(built=False, seconds=0.0, path=path)
    started = time.monotonic()
    path.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="kappa-cds-") as work:
        partial = Path(work) / ARCHIVE
        env = {k: v for k, v in os.environ.items() if not k.startswith("KAPPA_")}
        env.update(KAPPA_STATE_DIR=str(settings.state_dir), KAPPA_JARS_DIR=str(settings.jars_path))
        done = subprocess.run(
            [sys.executable, "-m", "kappa.spark.class_archive_training", str(partial), work],
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=600,
        )
        if done.returncode != 0 or not partial.is_file():
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            raise StackError(f"building the Spark class archive failed (exit {done.returncode}):\n{tail}")
        partial.replace(path)
    (settings.jars_path / _STAMP).write_text(json.dumps(_fingerprint(java, classpath), indent=1) + "\n")
    return ArchiveReport(built=True, seconds=time.monotonic() - started, path=path)
