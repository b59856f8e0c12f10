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

from kappa.errors import StackError
from kappa.settings import KappaSettings

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
    """What the archive depends on: the JVM binary and every jar on the driver's classpath."""
    java = java.resolve()
    return {"java": str(java), "java_size": java.stat().st_size, "jars": sorted(p.name for p in classpath)}


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
            [sys.executable, "-m", "kappa.spark_classes", str(partial), work],
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


def _train(archive: Path, work: Path) -> None:
    """Touch what a job's driver loads: batch and streaming SQL, the state store and a pandas-stateful
    function, Avro, Delta MERGE, and the Kafka source (planned only: no broker is needed)."""
    # Lazy: this runs only in the training child; the module itself is imported by every session's start.
    import pandas as pd
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro, to_avro

    from kappa.settings import load_settings
    from kappa.spark import get_spark

    settings = load_settings(
        spark_class_archive=False,
        spark_driver_java_options=f"-XX:ArchiveClassesAtExit={archive}",
        checkpoint_root=str(work / "checkpoints"),
        delta_root=str(work / "delta"),
    )
    spark = get_spark(settings, "kappa-class-archive")
    rows = spark.range(2000).select(
        F.col("id"), F.format_string("user-%03d", F.col("id") % 50).alias("user_id"), F.current_timestamp().alias("at")
    )
    avro = rows.select(to_avro(F.struct("id", "user_id")).alias("value"))
    schema = '{"type":"record","name":"R","fields":[{"name":"id","type":"long"},{"name":"user_id","type":"string"}]}'
    avro.select(from_avro("value", schema, {"mode": "PERMISSIVE"}).alias("r")).select("r.*").count()
    table = str(work / "delta" / "t")
    rows.write.format("delta").save(table)
    DeltaTable.forPath(spark, table).alias("t").merge(rows.alias("s"), "t.id <=> s.id").whenMatchedUpdateAll() \
        .whenNotMatchedInsertAll().execute()  # fmt: skip
    spark.read.format("kafka").option("kafka.bootstrap.servers", "127.0.0.1:1").option("subscribe", "t").load()

    def count(key: tuple[str], frames, state):  # type: ignore[no-untyped-def]
        total = sum(len(f) for f in frames) + (state.get[0] if state.exists else 0)
        state.update((total,))
        yield pd.DataFrame({"user_id": [key[0]], "n": [total]})

    source = str(work / "source")
    rows.select("user_id", "id").repartition(2).write.parquet(source)
    stream = (
        spark.readStream.schema("user_id string, id long").option("maxFilesPerTrigger", 1).parquet(source)
        .groupBy("user_id")
        .applyInPandasWithState(count, "user_id string, n long", "n long", "Update", "NoTimeout")
    )  # fmt: skip

    def merge(batch, _batch_id: int) -> None:  # type: ignore[no-untyped-def]
        target = str(work / "delta" / "counts")
        if not DeltaTable.isDeltaTable(spark, target):
            batch.limit(0).write.format("delta").save(target)
        DeltaTable.forPath(spark, target).alias("t").merge(batch.alias("s"), "t.user_id = s.user_id") \
            .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()  # fmt: skip

    query = (
        stream.writeStream.foreachBatch(merge).outputMode("update")
        .option("checkpointLocation", str(work / "checkpoints" / "counts"))
        .trigger(availableNow=True).start()
    )  # fmt: skip
    query.awaitTermination()
    spark.stop()  # the JVM exits when this process does, and writes the archive then


if __name__ == "__main__":
    _train(Path(sys.argv[1]), Path(sys.argv[2]))
