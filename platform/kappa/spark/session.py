"""The Spark session factory: Delta, Kafka and Avro from local jar files, tuned for a small machine.

`local[*]` by default; any master by setting (spark://, k8s://, yarn: the connector jars ship with the job).
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from kappa.core.errors import StackError
from kappa.core.security import SPARK_REDACTION, SPARK_REDACTION_KEYS
from kappa.core.settings import KappaSettings
from kappa.spark.class_archive import java_options, usable_archive
from kappa.spark.code_archive import code_archive
from kappa.spark.delta_upkeep import session_conf as delta_upkeep_conf
from kappa.spark.driver_files import log4j_config_path, prepare_driver_files, scratch_folder, use_scratch_folder
from kappa.stack.artifacts import artifacts_present
from kappa.stack.java import spark_java, spark_java_path
from kappa.stack.spark_standalone import spark_jars

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# JVM options of a Spark driver that lives minutes (the demo, tests): C1-only JIT and the serial collector start it
# with about half the CPU (measured: 24 s against 44-57 s for enrich_clicks over 3,000 clicks); answers do not
# depend on them. C1's code cache (48 MB by default) is too small for several queries: five fill it in a minute,
# and then the JVM runs interpreted (a view's batch of 500 rows took 30-60 s) or dies. A driver that runs for
# hours keeps the JVM's defaults: C2's code is faster once compiled.
SHORT_RUN_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:ReservedCodeCacheSize=240m"
_STATE_STORES = {
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
}
# Greedy artifact: the version is the last "-<digits>.<digits>…" (artifact ids hold digits too: kafka-0-10_2.13).
_VERSIONED_JAR = re.compile(r"^(?P<artifact>.+)-\d+(?:\.\d+)+(?:[-.]\w+)*\.jar$")


def artifact_name(jar: str) -> str:
    """`jackson-core-2.13.5.jar` -> `jackson-core`."""
    match = _VERSIONED_JAR.match(jar)
    return match.group("artifact") if match else jar.removesuffix(".jar")


def connector_jars(connector_dir: Path, spark_jars_dir: Path) -> list[Path]:
    """The connector jars Spark does not already have.

    The connectors' transitive dependencies include libraries Spark ships in another version (Jackson, Hadoop,
    Parquet, Scala); loading both invites NoSuchMethodError, so Spark's own copy wins.
    """
    bundled = {artifact_name(p.name) for p in spark_jars_dir.glob("*.jar")}
    return sorted(p for p in connector_dir.glob("*.jar") if artifact_name(p.name) not in bundled)


def driver_classpath(settings: KappaSettings) -> list[Path]:
    """Every jar a local driver loads, in order: the platform's own on the JVM's classpath (Hadoop looks its file
    system classes up there, before the session adds `spark.jars`), Spark's, then the connectors."""
    home = spark_jars()
    return [
        *platform_classpath(settings),
        *sorted(home.glob("*.jar")),
        *connector_jars(settings.jars_path / "spark", home),
    ]


def platform_jars(settings: KappaSettings) -> list[Path]:
    """What a session adds to Spark's own jars: the connectors, then the platform's operators (kappa.operators)."""
    return [*connector_jars(settings.jars_path / "spark", spark_jars()), *platform_classpath(settings)]


def platform_classpath(settings: KappaSettings) -> list[Path]:
    """The platform's JVM code (infra/jvm/operators: kappa.operators' processors, io.kappa.fs)."""
    return sorted((settings.jars_path / "operators").glob("*.jar"))


def spark_conf(settings: KappaSettings, app_name: str) -> dict[str, str]:
    """The session's configuration, as a plain dict (also what `spark-submit --conf` would get)."""
    if not artifacts_present(settings):
        raise StackError(
            f"the Spark connectors or the platform's operators are missing from {settings.jars_path}: run `kappa setup`"
        )
    jars = platform_jars(settings)
    platform = os.pathsep.join(str(j) for j in platform_classpath(settings))
    local = settings.spark_master.startswith("local")
    archive = usable_archive(settings, spark_java_path(), driver_classpath(settings))
    scratch = scratch_folder(settings)
    # HotSpot compiles no method over 8,000 bytes of bytecode by default; Spark generates larger ones for a
    # fused stage (a topic's decoding, data contract and the job's projection), which then ran interpreted:
    # replaying 5M clicks, raw_clicks 43.6 -> 30.7 s and enrich_clicks 51.1 -> 37.7 s with them compiled.
    jit = ["-XX:-DontCompileHugeMethods"]
    # Avro 1.12 decodes through a JVM-wide cache of readers keyed weakly by the schema objects they hold, so no
    # entry is ever freed (AVRO-4253, unfixed in any release). Spark's from_avro parses its schemas again in every
    # task of every batch: a job host's heap after GC grew 3 to 5 MB a minute with parsed schemas (make soak-live).
    # Without the fast reader Avro resolves through a per-thread cache whose entries do go (README, "Day two").
    avro = ["-Dorg.apache.avro.fastread=false"]
    executor_options = [*jit, *avro, *shlex.split(settings.spark_executor_java_options)]
    driver_options = [
        *jit,
        *avro,
        # The heap is taken at start, as its maximum: a driver's footprint is then known when it starts, not
        # reached hours later as the collector commits more, and a growing RSS is what grows outside the heap.
        f"-Xms{settings.spark_driver_memory}",
        f"-Dderby.system.home={settings.state_dir / 'derby'}",
        f"-Dlog4j2.configurationFile={log4j_config_path(settings)}",
        *([f"-Djava.io.tmpdir={scratch}"] if local else []),
        *(java_options(archive) if archive else []),
        *shlex.split(settings.spark_driver_java_options),
    ]
    # A local session, or one on a cluster on loopback (the stack's), stays there: Spark would otherwise pick the
    # first non-loopback interface and tell the executors to call the driver back on it.
    only_local = {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}
    # New tables' retention and auto compaction (kappa.spark.delta_upkeep), under the session's own settings.
    base = (only_local if on_loopback(settings) else {}) | delta_upkeep_conf(settings) | state_memory_conf(settings)
    base |= {f"spark.executorEnv.{k}": v for k, v in malloc_env(settings).items()}  # a cluster's executors too
    if not local:
        # The job code ships with the application (kappa.spark.code_archive): files go to every executor, and
        # PySpark puts the pyFiles on its Python workers' path, first.
        code = str(code_archive(settings))
        base |= {"spark.executor.memory": settings.spark_executor_memory, "spark.files": code,
                 "spark.submit.pyFiles": code}  # fmt: skip
        base |= {"spark.cores.max": str(settings.spark_cores_max)} if settings.spark_cores_max else {}
    return base | {
        "spark.master": settings.spark_master,
        "spark.app.name": app_name,
        "spark.jars": ",".join(str(j) for j in jars),
        "spark.driver.extraClassPath": platform,
        "spark.executor.extraClassPath": platform,
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.shuffle.partitions": str(settings.spark_shuffle_partitions),
        "spark.default.parallelism": str(settings.spark_shuffle_partitions),
        "spark.driver.memory": settings.spark_driver_memory,
        "spark.ui.enabled": str(settings.spark_ui).lower(),
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.streaming.stateStore.providerClass": _STATE_STORES[settings.spark_state_store],
        # Event times are UTC everywhere; a session time zone must never change an answer.
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.adaptive.enabled": "true",
        "spark.databricks.delta.schema.autoMerge.enabled": "false",
        # Delta rebuilds a table's state from its log in this many tasks (50 by default) before every MERGE.
        # Measured per batch of a view (2 cores): 4 tasks instead of 50 took a small batch from 5 s to 2 s; 1 task
        # instead of 4 saves 6 % more (page_stats with its facts tables, 500 clicks: 5.25 vs 5.56 s per batch).
        "spark.databricks.delta.snapshotPartitions": str(settings.delta_snapshot_partitions),
        # A view's batch generates about 250 classes (its MERGEs' stages); Spark keeps 100 compiled, least
        # recently used first out, so each batch compiled every one again. With room for them: 268 -> 18
        # compilations and 5.30 -> 3.83 s per page_stats batch (with its facts tables). Static: read at session start.
        "spark.sql.codegen.cache.maxEntries": str(settings.spark_codegen_cache_entries),
        # A 0 s trigger's query that found no new data asks Kafka again after this pause. Spark's 10 ms kept the
        # idle pipeline's jobs at 0.23 cores, 100 ms at 0.13 (make bench-live --idle), for at most 0.1 s more
        # on the first click after an idle spell.
        "spark.sql.streaming.pollingDelay": f"{settings.spark_polling_delay_ms}ms",
        # A stateful batch commits its RocksDB state as a changelog of what changed, not a checkpoint of the store
        # (Spark's default copies the store's new files at every commit); a snapshot follows every few batches.
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        # A checkpoint keeps this many batches' offsets, commits and state versions, and drops the older ones
        # (a restart needs the last): what bounds a checkpoint folder of a job that runs for weeks.
        "spark.sql.streaming.minBatchesToRetain": str(settings.streaming_batches_retained),
        # file:// paths (checkpoints, local Delta tables) through the platform's local file system: Hadoop's runs
        # `chmod` after every file it creates and `readlink` for every rename's status check, a process each
        # (io.kappa.fs, in the operators' jar).
        "spark.hadoop.fs.file.impl": "io.kappa.fs.LocalFileSystem",
        "spark.hadoop.fs.AbstractFileSystem.file.impl": "io.kappa.fs.LocalFs",
        "spark.sql.warehouse.dir": str(settings.state_dir / "spark-warehouse"),
        # A Kafka login's JAAS line carries its password: blanked by key in the UI, event logs and option maps,
        # and as text in plans and descriptions (Spark's default key pattern has no `jaas`).
        "spark.redaction.regex": SPARK_REDACTION_KEYS,
        "spark.redaction.string.regex": SPARK_REDACTION,
        **event_log_conf(settings),
        "spark.driver.extraJavaOptions": shlex.join(driver_options),
        # Executors of a cluster (local mode runs them in the driver): Spark's setting, not the cluster's defaults.
        "spark.executor.extraJavaOptions": shlex.join(executor_options),
    }


def event_log_conf(settings: KappaSettings) -> dict[str, str]:
    """Spark's event log (what its history server shows), when KAPPA_SPARK_EVENT_LOG_DIR names a folder."""
    if settings.spark_event_log_dir is None:
        return {}
    if "://" not in settings.spark_event_log_dir:
        Path(settings.spark_event_log_dir).mkdir(parents=True, exist_ok=True)
    return {"spark.eventLog.enabled": "true", "spark.eventLog.dir": settings.spark_event_log_dir}


def on_loopback(settings: KappaSettings) -> bool:
    """Whether the driver and its executors all run on this machine's loopback: local mode, or a standalone
    master on 127.0.0.1 or localhost (the stack's `kappa up --spark-workers N`)."""
    master = settings.spark_master
    return master.startswith("local") or re.match(r"^spark://(127\.0\.0\.1|localhost):\d+$", master) is not None


def state_memory_conf(settings: KappaSettings) -> dict[str, str]:
    """KAPPA_SPARK_STATE_MEMORY_MB > 0: every RocksDB state store of the process (an operator's partition, a
    version kept open) shares one native memory budget instead of sizing its own memtables and cache. 0: Spark's
    keys stay unset, so its own defaults hold."""
    if settings.spark_state_memory_mb <= 0:
        return {}
    return {
        "spark.sql.streaming.stateStore.rocksdb.boundedMemoryUsage": "true",
        "spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB": str(settings.spark_state_memory_mb),
    }


def malloc_env(settings: KappaSettings) -> dict[str, str]:
    """The environment that caps a JVM's glibc malloc arenas (KAPPA_SPARK_MALLOC_ARENAS; 0: glibc's default)."""
    return {"MALLOC_ARENA_MAX": str(settings.spark_malloc_arenas)} if settings.spark_malloc_arenas > 0 else {}


def get_spark(settings: KappaSettings, app_name: str = "kappa", extra: Mapping[str, str] | None = None) -> SparkSession:
    """Build (or return the running) session. Starts offline: every jar is a local file. `extra`: more
    configuration for a new session (the job host's scheduler mode)."""
    spark_java()  # a clear message instead of pyspark's "Java gateway process exited"
    # Python workers must run this interpreter (the project's venv), whatever `python` is on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    for key, value in malloc_env(settings).items():  # the driver's JVM, started below, inherits it
        os.environ.setdefault(key, value)
    local = settings.spark_master.startswith("local")
    if on_loopback(settings):  # on loopback anyway (spark_conf); says so without a warning
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Python workers inherit it: pandas' notice of a future change inside PySpark's own Arrow code, once per batch.
    os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning:pyspark.sql.pandas.serializers")
    # Lazy: pyspark, only where a Spark session runs (this module is imported without one).
    from pyspark.sql import SparkSession

    prepare_driver_files(settings)
    if local:
        use_scratch_folder(settings)
    builder = SparkSession.builder
    for key, value in (spark_conf(settings, app_name) | dict(extra or {})).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
