"""Day two for a Delta table, shortened to a minute: a view's MERGE compacts in its own commits and keeps each batch id
once; raw_clicks appends many small batches, its writer compacts
them as it goes (Delta's auto compaction), `kappa tables maintain` vacuums the replaced files while the writer runs
and a reader reads, and compacts once the writer has stopped; Dagster's scheduled job does the same through the
CLI. The table holds every produced click exactly once throughout, and nobody saw an error."""

from __future__ import annotations

import argparse
import dataclasses
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable as DeltaRsTable
from pyspark.sql import SparkSession

from dagster_project.definitions import build_definitions
from dagster_project.maintenance import maintain_job_name
from dagster_project.resources import KappaResource
from jobs.clickstream.generator import clicks
from jobs.raw_clicks.declaration import JOB as RAW_CLICKS
from kappa.cli.delta_tables import cmd_tables_maintain
from kappa.contracts.avro_serde import AvroEncoder
from kappa.contracts.registry import Registry
from kappa.contracts.schema_files import topic_value_schema
from kappa.contracts.schema_rollout import apply_schemas
from kappa.contracts.topic_declarations import Cleanup, Topic
from kappa.core.settings import KappaSettings
from kappa.kafka.clients import Outgoing, admin_client, produce_all
from kappa.kafka.topic_admin import apply
from kappa.lifecycle.maintenance import HOLDER, OnDisk
from kappa.lifecycle.state_files import checkpoint_lock
from kappa.runtime.binding import deployment_topics
from kappa.runtime.runner import run_job
from kappa.spark.delta_merge import DeltaMerge
from kappa.spark.session import get_spark
from tests.environment import stack_env

FIRST, SECOND = 240, 160  # clicks before the writer runs live, and while it runs
LAST = 20  # clicks after it stopped, in two small batches
RETENTION_S = 4  # replaced files older than this are vacuumed: longer than any read here takes


def _maintained(out: str) -> str:
    """The one line `kappa tables maintain` printed for raw_clicks v1."""
    [line] = [line for line in out.splitlines() if line.startswith("raw_clicks v1: ")]
    return line


def _data_files(path: str) -> set[str]:
    return {p.name for p in Path(path).glob("*.parquet")}


def _history(spark: SparkSession, path: str) -> list[Any]:
    return spark.sql(f"DESCRIBE HISTORY delta.`{path}`").orderBy("version").collect()


@pytest.mark.slow
@pytest.mark.usefixtures("session_conf_restored")
def test_a_table_stays_compact_and_vacuumed_while_its_writer_and_a_reader_run(
    stack: KappaSettings,
    spark: SparkSession,
    tmp_path: Path,
    unique_name: Callable[[str], str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings = stack.model_copy(
        update={
            "delta_root": str(tmp_path / "delta"),
            "checkpoint_root": str(tmp_path / "checkpoints"),
            "deployments_dir": tmp_path / "deployments",
            "delta_compact_min_files": 4,
            "delta_file_retention_hours": RETENTION_S / 3600,
            "delta_log_retention_hours": RETENTION_S / 3600,
        }
    )
    topic = Topic(unique_name("clicks"), partitions=2, cleanup=Cleanup.COMPACT, value_schema="clicks.avsc",
                  dataset="clicks")  # fmt: skip
    apply(admin_client(stack), [topic, Topic(f"{topic.name}.dlq", partitions=1, cleanup=Cleanup.DELETE)])
    apply_schemas(stack.schemas_path, [topic], stack.registry)
    with Registry(stack.registry) as registry:
        encoder = AvroEncoder(registry, topic.value_subject, topic_value_schema(stack.schemas_path, topic))
        made = [
            Outgoing(c.event_id.encode(), encoder.encode(c.as_avro())) for c in clicks(FIRST + SECOND + LAST, seed=11)
        ]
    sent = {o.key.decode() for o in made if o.key}
    assert len(sent) == FIRST + SECOND + LAST
    # The real job, under its own name (so `kappa tables maintain raw_clicks` finds it), a batch a second live.
    job = dataclasses.replace(RAW_CLICKS, inputs=(topic,), freshness="2 seconds")
    apply(admin_client(stack), deployment_topics(job, job.version))  # its late records' topic too
    path = job.output.path(settings, job.version)  # type: ignore[union-attr]

    # 0. A view's MERGE compacts in its own commit and still writes each batch id at most once.
    get_spark(settings, "kappa-tests")  # the settings' compaction threshold on the session
    merged = str(tmp_path / "merged")
    view = DeltaMerge(merged, keys=("k",), app_id="maintenance-test.v1")
    for batch_id in range(12):  # 10 new keys a batch, 2 files each
        view.write(spark.range(batch_id * 10, batch_id * 10 + 10).selectExpr("id AS k", "id AS v").repartition(2),
                   batch_id)  # fmt: skip
    view.write(spark.range(0, 10).selectExpr("id AS k", "-1 AS v"), 3)  # batch 3 again, as after a crash: skipped
    merges = _history(spark, merged)
    assert sum(h.operation == "OPTIMIZE" and h.operationParameters.get("auto") == "true" for h in merges) >= 2
    assert sorted(tuple(r) for r in spark.read.format("delta").load(merged).collect()) == [(k, k) for k in range(120)]

    # 1. Many small batches: the writer compacts its small files every few commits, in its own commits.
    produce_all(stack, topic.name, made[:FIRST])
    report = run_job(job, settings, available_now=True, max_offsets_per_trigger=16)
    appends = report.batches["raw_clicks_v1"]
    assert appends >= 12
    history = _history(spark, path)
    compactions = [h for h in history if h.operation == "OPTIMIZE" and h.operationParameters.get("auto") == "true"]
    assert len(compactions) >= 2, [h.operation for h in history]
    live_files = len(DeltaRsTable(path).file_uris())
    assert live_files < 4  # without compaction: one or two files per append
    assert OnDisk.of(path).data_files > live_files  # the compacted files wait for VACUUM

    # 2. The writer runs live (holding its checkpoint, as every runner does), a reader reads, clicks arrive, and
    #    maintenance runs meanwhile: it vacuums and leaves compaction to the writer.
    stop, errors, counts = threading.Event(), [], []

    def writer() -> None:
        try:
            with checkpoint_lock(settings, job.name, job.version, "the test's writer"):
                run_job(job, settings, stop=stop)
        except BaseException as exc:  # any error is the test's failure, raised below
            errors.append(exc)

    def reader() -> None:  # another engine, as a downstream team reads: each read a fresh snapshot
        while not stop.is_set():
            try:
                ids = DeltaRsTable(path).to_pyarrow_table(columns=["event_id"]).column("event_id").to_pylist()
                assert len(ids) == len(set(ids)), "a click twice"
            except BaseException as exc:  # the same
                errors.append(exc)
                return
            counts.append(len(ids))
            time.sleep(0.2)

    def producer() -> None:  # clicks arrive while maintenance runs: the writer commits beside its VACUUM
        try:
            for i in range(0, SECOND, 20):
                produce_all(stack, topic.name, made[FIRST + i : FIRST + i + 20])
                time.sleep(0.75)
        except BaseException as exc:  # the same
            errors.append(exc)

    threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
    for t in threads:
        t.start()
    try:
        time.sleep(RETENTION_S)  # what phase 1's compactions replaced is now older than the retention
        threads.append(threading.Thread(target=producer))
        threads[-1].start()
        before = _data_files(path)
        capsys.readouterr()
        cmd_tables_maintain(settings, argparse.Namespace(tables=["raw_clicks"], json=False))
        line = _maintained(capsys.readouterr().out)  # among the running writer's progress lines
        assert "its writer compacts (the test's writer" in line, line
        removed = before - _data_files(path)
        assert removed, "VACUUM deleted nothing beside the running writer"
        assert not removed & {Path(u).name for u in DeltaRsTable(path).file_uris()}  # never a live file
        deadline = time.monotonic() + 120
        while (not counts or counts[-1] < FIRST + SECOND) and time.monotonic() < deadline and not errors:
            time.sleep(0.5)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=120)
    assert not errors, errors
    assert all(not t.is_alive() for t in threads)
    assert len(counts) >= 10
    assert counts == sorted(counts)
    assert counts[-1] == FIRST + SECOND

    # 3. The writer stopped: maintenance compacts too (a commit of its own, under the writer's checkpoint lock).
    # The writer's own compaction may have left one file (CI saw it): two more small batches, with the writers'
    # compaction off, leave small files whatever the timing was.
    plain = settings.model_copy(update={"delta_auto_compact": False})
    get_spark(plain, "kappa-tests")
    for part in (made[FIRST + SECOND : FIRST + SECOND + LAST // 2], made[FIRST + SECOND + LAST // 2 :]):
        produce_all(stack, topic.name, part)
        run_job(job, plain, available_now=True)
    small = len(DeltaRsTable(path).file_uris())
    assert small >= 3  # what the writer left, and at least a file from each batch
    capsys.readouterr()
    cmd_tables_maintain(settings, argparse.Namespace(tables=["raw_clicks"], json=False))
    line = _maintained(capsys.readouterr().out)
    assert "compacted " in line, line
    assert "its writer" not in line, line
    assert int(line.split("compacted ")[1].split()[0]) == small  # every small file, into one
    assert len(DeltaRsTable(path).file_uris()) == 1
    assert _history(spark, path)[-1].operation in {"OPTIMIZE", "VACUUM END"}

    # 4. Dagster's scheduled job runs the same through the CLI, in a process of its own, and observes the table.
    time.sleep(RETENTION_S)  # the files step 3 compacted are vacuumable now
    overrides = {k: v for k, v in stack_env(stack).items() if k.startswith("KAPPA_")} | {
        "KAPPA_DELTA_ROOT": str(settings.delta_root),
        "KAPPA_CHECKPOINT_ROOT": str(settings.checkpoint_root),
        "KAPPA_DEPLOYMENTS_DIR": str(settings.deployments_dir),
        "KAPPA_DELTA_FILE_RETENTION_HOURS": str(RETENTION_S / 3600),
        "KAPPA_DELTA_LOG_RETENTION_HOURS": str(RETENTION_S / 3600),
    }
    definitions = build_definitions(kappa=KappaResource(overrides=overrides))
    result = definitions.get_job_def(maintain_job_name("raw_clicks")).execute_in_process()
    assert result.success
    observed = [e.asset_observation_data.asset_observation for e in result.all_events if e.is_asset_observation]
    assert [(o.asset_key.path, o.metadata["data_files"].value) for o in observed] == [(["delta", "raw_clicks"], 1)]
    assert OnDisk.of(path).data_files == 1  # one file on disk: the live one

    # Throughout, every click exactly once; the lock is free again (nothing of maintenance still holds it).
    ids = DeltaRsTable(path).to_pyarrow_table(columns=["event_id"]).column("event_id").to_pylist()
    assert sorted(ids) == sorted(sent)
    with checkpoint_lock(settings, job.name, job.version, HOLDER):
        pass
