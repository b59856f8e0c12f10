"""The Spark driver's class archive is used only for the JVM and classpath it was made with; the driver's JVM
options, Delta's snapshot partitions and a session's slots on a cluster come from the settings."""

import json
import shlex
from pathlib import Path

from kappa.core.settings import KappaSettings, load_settings
from kappa.runtime.discovery import get_job
from kappa.runtime.runner import real_time_slots
from kappa.spark.class_archive import ARCHIVE, _fingerprint, usable_archive
from kappa.spark.session import driver_classpath, spark_conf
from kappa.stack.artifacts import JAR_GROUPS
from kappa.stack.java import spark_java_path


def _settings(tmp_path: Path, **overrides: object) -> KappaSettings:
    jars = tmp_path / "jars"
    for group in JAR_GROUPS:  # what `kappa setup` leaves: a non-empty folder per group
        (jars / group).mkdir(parents=True)
        (jars / group / f"{group}-lib-1.0.jar").touch()
    return load_settings(state_dir=tmp_path, jars_dir=jars, **overrides)


def _archive(settings: KappaSettings, fingerprint: dict[str, object]) -> Path:
    archive = settings.jars_path / ARCHIVE
    archive.write_bytes(b"classes")
    (settings.jars_path / "spark-driver-classes.json").write_text(json.dumps(fingerprint))
    return archive


def test_the_archive_is_used_only_for_the_jvm_and_classpath_it_was_made_with(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    java, classpath = spark_java_path(), driver_classpath(settings)
    assert usable_archive(settings, java, classpath) is None  # none built yet
    archive = _archive(settings, _fingerprint(java, classpath))
    assert usable_archive(settings, java, classpath) == archive
    assert usable_archive(settings, java, classpath[:-1]) is None  # a jar more or less: another classpath
    other_java = tmp_path / "java"
    other_java.write_bytes(b"#!/bin/sh\n")
    assert usable_archive(settings, other_java, classpath) is None
    off = settings.model_copy(update={"spark_class_archive": False})
    assert usable_archive(off, java, classpath) is None


def test_a_stamp_that_is_not_json_means_no_archive(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    _archive(settings, {})
    (settings.jars_path / "spark-driver-classes.json").write_text("{not json")
    assert usable_archive(settings, spark_java_path(), driver_classpath(settings)) is None


def test_driver_options_map_the_archive_then_add_the_settings_options(tmp_path: Path) -> None:
    settings = _settings(tmp_path, spark_driver_java_options="-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
                         delta_snapshot_partitions=3)  # fmt: skip
    archive = _archive(settings, _fingerprint(spark_java_path(), driver_classpath(settings)))
    conf = spark_conf(settings, "t")
    options = shlex.split(conf["spark.driver.extraJavaOptions"])
    assert f"-XX:SharedArchiveFile={archive}" in options
    assert "-Xlog:cds=off" in options  # a JVM the archive does not fit says nothing, and runs without it
    assert options[-2:] == ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]
    # Spark's generated methods over HotSpot's 8,000 bytes are compiled, in the driver and on executors.
    assert "-XX:-DontCompileHugeMethods" in options
    executor = ["-XX:-DontCompileHugeMethods", "-Dorg.apache.avro.fastread=false"]
    assert shlex.split(conf["spark.executor.extraJavaOptions"]) == executor
    # Avro's fast reader keeps every schema Spark parses for ever (AVRO-4253): off in every Spark JVM.
    assert "-Dorg.apache.avro.fastread=false" in options
    tuned = settings.model_copy(update={"spark_executor_java_options": "-XX:+DontCompileHugeMethods -Xss4m"})
    assert shlex.split(spark_conf(tuned, "t")["spark.executor.extraJavaOptions"])[-2:] == [
        "-XX:+DontCompileHugeMethods",  # the last of two opposite flags wins: the setting turns it off
        "-Xss4m",
    ]
    assert conf["spark.databricks.delta.snapshotPartitions"] == "3"

    (settings.jars_path / ARCHIVE).unlink()
    plain = shlex.split(spark_conf(settings, "t")["spark.driver.extraJavaOptions"])
    assert not [o for o in plain if "SharedArchiveFile" in o]


def test_a_session_on_the_stacks_cluster_stays_on_loopback_and_sizes_its_executors(tmp_path: Path) -> None:
    local = spark_conf(_settings(tmp_path / "local"), "t")
    assert local["spark.driver.host"] == "127.0.0.1"
    assert "spark.executor.memory" not in local  # local mode: the executors are the driver
    stack = _settings(tmp_path / "stack", spark_master="spark://127.0.0.1:7077", spark_executor_memory="2g",
                      spark_cores_max=1)  # fmt: skip
    conf = spark_conf(stack, "t")
    # The executors call the driver back at the address it says: the loopback one, as the cluster's own.
    assert (conf["spark.driver.host"], conf["spark.driver.bindAddress"]) == ("127.0.0.1", "127.0.0.1")
    assert (conf["spark.executor.memory"], conf["spark.cores.max"]) == ("2g", "1")
    remote = spark_conf(_settings(tmp_path / "remote", spark_master="spark://spark.example.com:7077"), "t")
    assert "spark.driver.host" not in remote  # Spark picks the interface the cluster reaches
    assert "spark.cores.max" not in remote  # 0: all the cluster offers


def test_a_real_time_job_gets_a_slot_per_input_partition_on_any_master(tmp_path: Path) -> None:
    """Real-time mode runs a task per input partition for the whole batch: local gets the threads, a cluster
    application takes exactly that many cores and no more (the applications beside it keep theirs)."""
    spec = get_job("enrich_clicks_realtime")
    needed = sum(t.partitions for t in spec.inputs)
    assert needed > 2  # more than this machine's cores: the local case below is a change
    settings = _settings(tmp_path)
    on_two = real_time_slots(spec, settings.model_copy(update={"spark_master": "local[2]"}))
    assert on_two.spark_master == f"local[{needed}]"
    many = settings.model_copy(update={"spark_master": "local[64]"})
    assert real_time_slots(spec, many).spark_master == "local[64]"
    cluster = settings.model_copy(update={"spark_master": "spark://127.0.0.1:7077", "spark_cores_max": 8})
    on_cluster = real_time_slots(spec, cluster)
    assert (on_cluster.spark_master, on_cluster.spark_cores_max) == ("spark://127.0.0.1:7077", needed)
    assert spark_conf(on_cluster, "rt")["spark.cores.max"] == str(needed)
