"""What keeps a Delta table that a job writes every few seconds for weeks compact and bounded.

A view's writer commits a MERGE every batch (17,280 a day at a 5 s cadence), each adding small files, and the
replaced files stay on disk. Three things bound that, all Delta's own:

- **Auto compaction, in the writer.** Every session the platform starts turns it on for the tables it writes
  (`session_conf`; a table created before has it too), and every table it creates carries
  `delta.autoOptimize.autoCompact`: after a commit that leaves KAPPA_DELTA_COMPACT_MIN_FILES small files in a
  partition, Delta bin-packs them in a post-commit hook, in the writer's own thread. Compaction by the
  writer never races the writer's next MERGE; an OPTIMIZE from outside would (Delta fails a MERGE whose read files
  another commit removed), so `compact` is only for a table whose writer does not run.
- **VACUUM** (`vacuum`) deletes the files a newer version replaced once they are older than the table's
  `delta.deletedFileRetentionDuration`, and the Change Data Feed's files with them. It commits no data change, and
  it runs beside the writer as long as the retention is longer than the writer's longest batch (VACUUM also
  deletes files no commit names yet that are older than the retention, as an unfinished batch's would be) and
  than any reader's query: the default, 7 days, is.
- **The log** keeps `delta.logRetentionDuration`; the writer checkpoints it every 10 commits and drops the expired
  entries then (Delta rounds that down to whole days).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kappa.core.settings import KappaSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_DEFAULTS = "spark.databricks.delta.properties.defaults."  # a session's properties for the tables it creates


def table_properties(settings: KappaSettings) -> dict[str, str]:
    """The properties every table the platform writes carries (retention declared in the settings)."""
    return {
        "delta.autoOptimize.autoCompact": str(settings.delta_auto_compact).lower(),
        "delta.deletedFileRetentionDuration": _interval(settings.delta_file_retention_hours),
        "delta.logRetentionDuration": _interval(settings.delta_log_retention_hours),
    }


def session_conf(settings: KappaSettings) -> dict[str, str]:
    """Spark settings: the table properties as the defaults of every table a session creates (a MERGE's
    `createIfNotExists` and an append's first write alike), and when auto compaction starts."""
    defaults = {_DEFAULTS + key.removeprefix("delta."): value for key, value in table_properties(settings).items()}
    return defaults | {
        # Before a table's own property, in Delta's order: a table created before the platform set it compacts too.
        "spark.databricks.delta.autoCompact.enabled": str(settings.delta_auto_compact).lower(),
        "spark.databricks.delta.autoCompact.minNumFiles": str(settings.delta_compact_min_files),
    }


def _interval(hours: float) -> str:
    return f"interval {max(1, round(hours * 3600))} seconds"  # Delta's parser takes whole units only


@dataclass(frozen=True)
class Upkeep:
    """What one maintenance of a table did."""

    compacted_files: int  # small files OPTIMIZE replaced (0: not compacted)
    properties_set: tuple[str, ...]  # properties the table lacked and now has (a table created before them)


def compact(spark: SparkSession, path: str, settings: KappaSettings) -> Upkeep:
    """Bin-pack the table's small files and give it the platform's properties it lacks or holds with other values
    (a retention changed in the settings). Commits: only for a table no writer runs (the caller holds the
    version's checkpoint lock)."""
    # Lazy: pyspark and Delta, only where a Spark session runs (this module is imported without one).
    from delta.tables import DeltaTable

    table = DeltaTable.forPath(spark, path)
    have = table.detail().first()
    present = dict(have["properties"]) if have is not None else {}
    missing = {k: v for k, v in table_properties(settings).items() if present.get(k) != v}
    if missing:
        assignments = ", ".join(f"'{k}' = '{v}'" for k, v in missing.items())
        spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ({assignments})")
    metrics = table.optimize().executeCompaction().first()
    removed = int(metrics["metrics"]["numFilesRemoved"]) if metrics is not None else 0
    return Upkeep(compacted_files=removed, properties_set=tuple(sorted(missing)))


def vacuum(spark: SparkSession, path: str) -> None:
    """Delete the files the table no longer needs, after its own retention (never a shorter one)."""
    # Lazy: pyspark and Delta, only where a Spark session runs (this module is imported without one).
    from delta.tables import DeltaTable

    # VACUUM lists the table's folders in this many tasks; Spark's 10,000 took 40 s for a table of a few files.
    parallelism = str(max(1, spark.sparkContext.defaultParallelism))
    spark.conf.set("spark.sql.sources.parallelPartitionDiscovery.parallelism", parallelism)
    DeltaTable.forPath(spark, path).vacuum()
