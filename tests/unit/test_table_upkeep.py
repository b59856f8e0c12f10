"""What keeps the Delta tables bounded, as pure logic: the properties every table gets from the settings, the
retention rule the settings enforce, the maintenance schedule per table in Dagster, what `kappa tables maintain`
finds on disk and how it counts it (the maintenance itself runs on real tables in
tests/integration/test_table_maintenance.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from dagster import DefaultScheduleStatus

from dagster_project.definitions import defs
from dagster_project.maintenance import maintain_job_name
from kappa.core.errors import KappaError, SettingsError
from kappa.core.settings import load_settings
from kappa.lifecycle.maintenance import Maintained, OnDisk, describe, table_versions
from kappa.runtime.discovery import discover
from kappa.runtime.outputs import output_of
from kappa.spark.delta_upkeep import session_conf, table_properties

JOBS = discover()
TABLES = sorted(output_of(j.output).name for j in JOBS.values() if output_of(j.output).storage == "delta")


def test_every_new_table_gets_the_declared_retention_and_auto_compaction() -> None:
    settings = load_settings(delta_file_retention_hours=48, delta_log_retention_hours=72, delta_compact_min_files=9)
    assert table_properties(settings) == {
        "delta.autoOptimize.autoCompact": "true",
        "delta.deletedFileRetentionDuration": "interval 172800 seconds",
        "delta.logRetentionDuration": "interval 259200 seconds",
    }
    conf = session_conf(settings)
    # Session defaults: Delta gives them to every table the session creates (MERGE or append alike).
    assert conf["spark.databricks.delta.properties.defaults.autoOptimize.autoCompact"] == "true"
    assert conf["spark.databricks.delta.properties.defaults.deletedFileRetentionDuration"] == "interval 172800 seconds"
    assert conf["spark.databricks.delta.autoCompact.minNumFiles"] == "9"
    # A retention under a second is still a whole second (Delta's parser takes whole units only).
    tiny = load_settings(delta_file_retention_hours=0.0001, delta_log_retention_hours=0.0001)
    assert table_properties(tiny)["delta.deletedFileRetentionDuration"] == "interval 1 seconds"


def test_the_log_must_outlive_the_files_it_remembers() -> None:
    with pytest.raises(SettingsError, match="KAPPA_DELTA_LOG_RETENTION_HOURS \\(24\\) is shorter than"):
        load_settings(delta_file_retention_hours=48, delta_log_retention_hours=24)
    assert load_settings(delta_file_retention_hours=24, delta_log_retention_hours=24).delta_log_retention_hours == 24


def test_the_spark_session_carries_the_upkeep_settings() -> None:
    from kappa.spark.session import spark_conf

    settings = load_settings(
        streaming_batches_retained=7, delta_compact_min_files=11, delta_file_retention_hours=5, spark_state_memory_mb=0
    )
    conf = spark_conf(settings, "t")
    assert conf["spark.sql.streaming.minBatchesToRetain"] == "7"
    # 0: Spark's own memory keys left unset, so its defaults hold.
    memory_keys = {
        "spark.sql.streaming.stateStore.rocksdb.boundedMemoryUsage",
        "spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB",
    }
    assert memory_keys.isdisjoint(conf)
    bounded = spark_conf(load_settings(spark_state_memory_mb=300), "t")
    assert bounded["spark.sql.streaming.stateStore.rocksdb.boundedMemoryUsage"] == "true"
    assert bounded["spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB"] == "300"
    # The driver's heap is taken at start; a cluster's executors get the capped malloc arenas, 0 leaves glibc's.
    assert "-Xms2g" in conf["spark.driver.extraJavaOptions"].split()
    assert conf["spark.executorEnv.MALLOC_ARENA_MAX"] == "2"
    assert "spark.executorEnv.MALLOC_ARENA_MAX" not in spark_conf(load_settings(spark_malloc_arenas=0), "t")
    assert conf["spark.databricks.delta.autoCompact.minNumFiles"] == "11"
    assert conf["spark.databricks.delta.autoCompact.enabled"] == "true"  # tables created before the platform set it
    assert conf["spark.databricks.delta.properties.defaults.deletedFileRetentionDuration"] == "interval 18000 seconds"
    # Turned off: neither the session nor the tables it creates compact in their writers.
    off = spark_conf(load_settings(delta_auto_compact=False), "t")
    assert off["spark.databricks.delta.autoCompact.enabled"] == "false"
    assert off["spark.databricks.delta.properties.defaults.autoOptimize.autoCompact"] == "false"


def test_each_delta_table_has_a_maintenance_job_on_a_running_hourly_schedule() -> None:
    assert TABLES, "the pipeline writes Delta tables: the check below is not vacuous"
    schedules = {s.job_name: s for s in defs.schedules or []}  # type: ignore[union-attr]
    minutes = []
    for table in TABLES:
        name = maintain_job_name(table)
        assert defs.get_job_def(name).name == name
        schedule = schedules[name]
        minute, *every = str(schedule.cron_schedule).split()
        assert every == ["*", "*", "*", "*"]  # hourly
        minutes.append(int(minute))
        assert schedule.default_status is DefaultScheduleStatus.RUNNING
    assert set(schedules) == {maintain_job_name(t) for t in TABLES}  # and no topic gets one
    assert len(set(minutes)) == len(TABLES)  # each at its own minute: one maintenance JVM at a time


def test_maintenance_finds_every_version_on_disk_and_refuses_an_unknown_table(tmp_path: Path) -> None:
    settings = load_settings(delta_root=str(tmp_path / "delta"))
    spec = next(j for j in JOBS.values() if output_of(j.output).name == TABLES[0])
    for version in (1, 3):
        (tmp_path / "delta" / TABLES[0] / f"v{version}" / "_delta_log").mkdir(parents=True)
    (tmp_path / "delta" / TABLES[0] / "v2").mkdir()  # no log: not a table (a retire half done, a stray folder)
    (tmp_path / "delta" / TABLES[0] / "scratch").mkdir()
    assert table_versions(settings, JOBS, [TABLES[0]]) == [(spec, 1), (spec, 3)]
    assert table_versions(settings, JOBS) == [(spec, 1), (spec, 3)]  # the other tables have nothing on disk
    with pytest.raises(KappaError, match="no job writes a Delta table named nope \\(the tables: "):
        table_versions(settings, JOBS, ["nope"])


def test_on_disk_counts_data_files_and_log_files_apart(tmp_path: Path) -> None:
    (tmp_path / "_delta_log").mkdir()
    for name in ("00000.json", "00001.json", "00010.checkpoint.parquet"):
        (tmp_path / "_delta_log" / name).write_text("{}")
    (tmp_path / "part-0.parquet").write_bytes(b"x" * 10)
    (tmp_path / "hour=1").mkdir()
    (tmp_path / "hour=1" / "part-1.parquet").write_bytes(b"x" * 5)
    (tmp_path / "_change_data").mkdir()
    (tmp_path / "_change_data" / "cdc-0.parquet").write_bytes(b"x" * 3)
    (tmp_path / ".part-0.parquet.crc").write_text("c")
    assert OnDisk.of(f"file:{tmp_path}") == OnDisk(data_files=3, data_bytes=18, log_files=3)


def test_one_line_per_table_says_what_maintenance_did() -> None:
    before, after = OnDisk(120, 3_000_000, 40), OnDisk(12, 2_500_000, 42)
    done = Maintained("page_stats", 2, "/d", before, after, 110, ("delta.logRetentionDuration",), None, 3.2)
    assert describe(done) == (
        "page_stats v2: 120 -> 12 data files (3.0 MB -> 2.5 MB), log 42 files; compacted 110 small files; vacuumed; "
        "set delta.logRetentionDuration"
    )
    running = Maintained("page_stats", 2, "/d", before, after, 0, (), "page_stats v2 in the job host", 1.0)
    assert describe(running).endswith("; its writer compacts (page_stats v2 in the job host); vacuumed")


def test_maintenance_compacts_only_what_no_writer_runs_or_is_due_to(tmp_path: Path) -> None:
    from dataclasses import replace

    from kappa.lifecycle.maintenance import _unless_running
    from kappa.lifecycle.state_files import Deployment, checkpoint_lock, save

    settings = load_settings(deployments_dir=tmp_path)
    with _unless_running(settings, "page_stats", 1) as writer:  # never deployed: maintenance holds the lock
        assert writer is None
        with (
            pytest.raises(KappaError, match=r"in use by `kappa tables maintain`"),
            checkpoint_lock(settings, "page_stats", 1, "a catch-up"),
        ):
            pass
    with (
        checkpoint_lock(settings, "page_stats", 1, "page_stats.v1 in the job host"),  # a writer runs
        _unless_running(settings, "page_stats", 1) as writer,
    ):
        assert writer is not None
        assert writer.startswith("page_stats.v1 in the job host")
    # Deployed to run but down (crashed): its writer, so that the sensor's restart finds the lock free.
    deployed = Deployment("page_stats", 1, 4242, ["kappa"], "shared", "2026-11-27T00:00:00Z", str(tmp_path / "l"))
    save(settings, deployed)
    with _unless_running(settings, "page_stats", 1) as writer:
        assert writer == "page_stats v1, deployed to run"
        with checkpoint_lock(settings, "page_stats", 1, "the sensor's restart"):
            pass  # free
    save(settings, replace(deployed, desired="stopped"))
    with _unless_running(settings, "page_stats", 1) as writer:
        assert writer is None
