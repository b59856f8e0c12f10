"""The upkeep of the platform's Delta tables (`kappa tables maintain`, Dagster's `maintain_<table>` schedules):
every version of a table that is on disk, compacted and vacuumed as kappa.spark.delta_upkeep says, without racing
its writer.

A version's writer holds its checkpoint lock for as long as it runs (kappa.lifecycle.state_files.checkpoint_lock).
Maintenance takes the same lock: held, it compacts the table (OPTIMIZE, a commit) and gives it the platform's
properties it lacks or holds with other values; refused, or the version deployed to run (even while it is down:
the health sensor's restart must find the lock free), the writer compacts its own table after its commits (auto
compaction), so maintenance only vacuums, which commits no data change. While maintenance holds a lock (a version
nobody deployed to run), a `kappa jobs run` or replay catch-up of it is refused with the holder named.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kappa.core.errors import KappaError
from kappa.core.settings import KappaSettings
from kappa.lifecycle.state_files import CheckpointInUseError, checkpoint_lock, load
from kappa.runtime.declaration import JobSpec
from kappa.runtime.outputs import output_of

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

HOLDER = "`kappa tables maintain`"  # how a refused start names maintenance


@dataclass(frozen=True)
class OnDisk:
    """A table's folder as the disk holds it: its data files (those of the current version and those replaced
    and not yet vacuumed, the Change Data Feed's included), and its log."""

    data_files: int
    data_bytes: int
    log_files: int

    @staticmethod
    def of(path: str) -> OnDisk:
        """Counted on the local file system (a table on object storage is counted by its store)."""
        root = Path(path.removeprefix("file:"))
        files = size = logs = 0
        for folder, _, names in os.walk(root):
            in_log = Path(folder).relative_to(root).parts[:1] == ("_delta_log",)
            for name in names:
                if in_log:
                    logs += 1
                elif name.endswith(".parquet"):
                    files += 1
                    size += (Path(folder) / name).stat().st_size
        return OnDisk(files, size, logs)


@dataclass(frozen=True)
class Maintained:
    """One table version's maintenance."""

    table: str
    version: int
    path: str
    before: OnDisk
    after: OnDisk
    compacted_files: int  # small files compacted into larger ones (0 while the writer runs: it compacts)
    properties_set: tuple[str, ...]  # declared properties the table lacked or held otherwise (set now)
    writer: str | None  # the running writer that holds the version (then vacuumed only); None: none ran
    seconds: float

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def table_versions(
    settings: KappaSettings, jobs: Mapping[str, JobSpec], tables: Sequence[str] = ()
) -> list[tuple[JobSpec, int]]:
    """(writing job, version) of every table version on disk, of the `tables` named (default: all)."""
    writers = {output_of(spec.output).name: spec for spec in jobs.values() if output_of(spec.output).storage == "delta"}
    unknown = sorted(set(tables) - set(writers))
    if unknown:
        raise KappaError(
            f"no job writes a Delta table named {', '.join(unknown)} (the tables: {', '.join(sorted(writers))})"
        )
    found = []
    for name in sorted(tables or writers):
        spec = writers[name]
        root = Path(output_of(spec.output).location(settings, 0).removeprefix("file:")).parent
        versions = sorted(int(p.name[1:]) for p in root.glob("v*") if p.name[1:].isdigit()) if root.is_dir() else []
        found += [(spec, v) for v in versions if output_of(spec.output).exists(settings, v)]
    return found


def maintain(
    settings: KappaSettings,
    spark: SparkSession,
    versions: Sequence[tuple[JobSpec, int]],
    on_table: Callable[[Maintained], None] = lambda _: None,
) -> list[Maintained]:
    """Maintain each (job, version)'s table, one at a time, calling `on_table` after each."""
    # Lazy: pyspark and Delta, only where a Spark session runs (this module is imported without one).
    from kappa.spark.delta_upkeep import compact, vacuum

    done = []
    for spec, version in versions:
        began = time.monotonic()
        output = output_of(spec.output)
        path = output.location(settings, version)
        before = OnDisk.of(path)
        compacted, properties = 0, tuple[str, ...]()
        with _unless_running(settings, spec.name, version) as writer:
            if writer is None:
                upkeep = compact(spark, path, settings)
                compacted, properties = upkeep.compacted_files, upkeep.properties_set
            vacuum(spark, path)
        result = Maintained(
            table=output.name,
            version=version,
            path=path,
            before=before,
            after=OnDisk.of(path),
            compacted_files=compacted,
            properties_set=properties,
            writer=writer,
            seconds=round(time.monotonic() - began, 1),
        )
        on_table(result)
        done.append(result)
    return done


@contextmanager
def _unless_running(settings: KappaSettings, job: str, version: int) -> Iterator[str | None]:
    """Hold the version's checkpoint lock if no writer runs or is due: yields None then, else who writes. A
    deployment that should run counts as its writer even while it is down (crashed): the health sensor's
    restart must find the lock free, never refused by maintenance."""
    deployment = load(settings, job, version)
    if deployment is not None and deployment.desired == "running":
        yield f"{job} v{version}, deployed to run"
        return
    with contextlib.ExitStack() as held:
        holder = None
        try:
            held.enter_context(checkpoint_lock(settings, job, version, HOLDER))
        except CheckpointInUseError as exc:
            holder = exc.holder
        yield holder


def describe(m: Maintained) -> str:
    """One line for an operator."""
    files = f"{m.before.data_files:,} -> {m.after.data_files:,} data files"
    size = f"{_mb(m.before.data_bytes)} -> {_mb(m.after.data_bytes)}"
    how = f"compacted {m.compacted_files:,} small files" if m.writer is None else f"its writer compacts ({m.writer})"
    added = f"; set {', '.join(m.properties_set)}" if m.properties_set else ""
    return f"{m.table} v{m.version}: {files} ({size}), log {m.after.log_files:,} files; {how}; vacuumed{added}"


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"
