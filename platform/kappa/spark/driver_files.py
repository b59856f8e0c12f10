"""What a local Spark driver leaves on this machine: its log and its scratch folders.

- Spark's warnings that ask nothing of the user (said once per query, batch or task) go to the log file only;
  one said per task and batch goes nowhere; every other warning and error goes to the terminal as well. The log
  file is `<state_dir>/logs/spark.log`.
- Spark's scratch folders (its local folders, the JVM's temporary folder) live under
  `<state_dir>/spark-local/<pid>`, one per driver process. A driver killed with SIGKILL cannot remove its own;
  the next driver to start removes every folder whose process is gone, instead of leaving them in /tmp.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from kappa.core.settings import KappaSettings

# Logger -> why its warnings need no action (they stay in the log file).
QUIET_LOGGERS = {
    "org.apache.spark.sql.execution.streaming.runtime.ResolveWriteToStream": "adaptive execution is off in streaming",
    "org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution": "the same, for stateful queries; a "
    "batch behind its trigger (the progress lines say it)",
    "org.apache.hadoop.util.NativeCodeLoader": "no native Hadoop library: the Java one does the same",
    "org.apache.spark.sql.classic.SparkSession": "a session reused by a second job in one process",
    "org.apache.spark.sql.execution.CacheManager": "a frame asked to be cached twice (the second ask does nothing)",
    "org.apache.spark.util.Utils": "the address a local driver binds, and ports already taken by another driver",
    "org.apache.spark.scheduler.DAGScheduler": "a stop cancelling the job groups of batches already finished",
    "org.apache.spark.rdd.MapPartitionsRDD": "Delta's MERGE checkpoints its source locally, per batch",
    "org.apache.spark.util.SparkStringUtils": "a long plan shortened in a log line",
    "org.apache.spark.sql.execution.datasources.v2.WriteToDataSourceV2Exec": "a stop ends a real-time batch and "
    "aborts its write (written again after a restart); a failed query is the runner's one line",
    "org.apache.spark.sql.execution.datasources.v2.DataWritingSparkTask": "the same, per task",
    "org.apache.spark.scheduler.TaskSetManager": "the same: its running tasks killed (a task that fails fails "
    "its query, which the runner reports)",
    "org.apache.kafka.clients.NetworkClient": "a broker not reachable, per connection attempt: the runner says "
    "it once per retry",
}
# Logger -> why even the log file is better without its warnings (its errors still reach the terminal).
SILENCED_LOGGERS = {
    # Said by every task of every batch that writes Avro (75,000 lines in 15 minutes of enrich_clicks alone), it
    # buried the log's real warnings. A null that does reach a non-null field fails its query, said once by the
    # runner.
    "org.apache.spark.sql.avro.AvroSerializer": "non-null Avro fields written from nullable columns, per task",
}
# Spark's own defaults (log4j2-defaults.properties) for the libraries it bundles.
_LIBRARY_LEVELS = {
    "org.sparkproject.jetty": "warn",
    "org.sparkproject.jetty.util.component.AbstractLifeCycle": "error",
    "org.apache.hadoop.hive.metastore.RetryingHMSHandler": "fatal",
    "org.apache.hadoop.hive.metastore.ObjectStore": "error",
    "org.apache.parquet.CorruptStatistics": "error",
}
_PATTERN = "%d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex"


def log_file(settings: KappaSettings) -> Path:
    return settings.state_dir / "logs" / "spark.log"


def log4j_config(settings: KappaSettings) -> str:
    """The driver's log4j2 configuration (properties format)."""
    lines = [
        "status = error",
        "appender.console.type = Console",
        "appender.console.name = console",
        "appender.console.target = SYSTEM_ERR",
        "appender.console.layout.type = PatternLayout",
        f"appender.console.layout.pattern = {_PATTERN}",
        "appender.file.type = File",
        "appender.file.name = file",
        f"appender.file.fileName = {log_file(settings)}",
        "appender.file.append = true",
        # Every driver of the machine appends to it, each event in one unbuffered write to a file opened for
        # appending: they do not interleave. No file lock: Spark interrupts task threads (a cancelled job, a
        # stopped real-time batch), and a thread interrupted while it waits for the lock closes the file for
        # the rest of the process.
        "appender.file.locking = false",
        "appender.file.bufferedIo = false",
        "appender.file.layout.type = PatternLayout",
        f"appender.file.layout.pattern = {_PATTERN.replace(': %m', ' [pid %pid]: %m')}",
        "rootLogger.level = warn",
        "rootLogger.appenderRef.console.ref = console",
        "rootLogger.appenderRef.file.ref = file",
    ]
    for n, name in enumerate(QUIET_LOGGERS):
        lines += [
            f"logger.quiet{n}.name = {name}",
            f"logger.quiet{n}.level = warn",
            f"logger.quiet{n}.additivity = false",
            f"logger.quiet{n}.appenderRef.file.ref = file",
        ]
    levels = _LIBRARY_LEVELS | dict.fromkeys(SILENCED_LOGGERS, "error")
    for n, (name, level) in enumerate(levels.items()):
        lines += [f"logger.library{n}.name = {name}", f"logger.library{n}.level = {level}"]
    return "\n".join(lines) + "\n"


def log4j_config_path(settings: KappaSettings) -> Path:
    return settings.state_dir / "spark" / "log4j2.properties"


def write_log4j_config(settings: KappaSettings) -> Path:
    """The configuration file for this state folder (rewritten only when it changes: drivers start at once)."""
    path = log4j_config_path(settings)
    text = log4j_config(settings)
    if not path.is_file() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}")
        partial.write_text(text)
        partial.replace(path)  # atomic: a driver starting meanwhile reads the old file or the new one
    log_file(settings).parent.mkdir(parents=True, exist_ok=True)
    return path


def scratch_root(settings: KappaSettings) -> Path:
    return settings.state_dir / "spark-local"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_orphaned_scratch(root: Path) -> list[Path]:
    """Remove the scratch folders of driver processes that are gone; return what was removed."""
    removed = []
    for folder in sorted(root.glob("*")) if root.is_dir() else []:
        if folder.name.isdigit() and not _alive(int(folder.name)):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def scratch_folder(settings: KappaSettings) -> Path:
    """This driver process's scratch folder."""
    return scratch_root(settings) / str(os.getpid())


def use_scratch_folder(settings: KappaSettings) -> None:
    """Spark's local folders: this driver's scratch folder, through SPARK_LOCAL_DIRS (the `spark.local.dir`
    setting would do the same with a warning at every start). A folder you set yourself is kept; one inherited
    from a parent kappa process is not (it would be the parent's, and removed when the parent is gone)."""
    inherited = os.environ.get("SPARK_LOCAL_DIRS")
    if inherited is None or Path(inherited).parent == scratch_root(settings):
        os.environ["SPARK_LOCAL_DIRS"] = str(scratch_folder(settings))


def prepare_driver_files(settings: KappaSettings) -> None:
    """Before a driver starts: its log configuration written, the folders of drivers that are gone removed,
    its own scratch folder made."""
    write_log4j_config(settings)
    remove_orphaned_scratch(scratch_root(settings))
    scratch_folder(settings).mkdir(parents=True, exist_ok=True)
