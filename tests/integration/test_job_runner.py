"""`kappa jobs run`: a job version drains its input, records its progress as group offsets, stops on a signal."""

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from deltalake import DeltaTable

from jobs.catalog import CLICKS, TOPICS, dead_letters_of
from jobs.raw_clicks.declaration import JOB
from kappa.avro.contracts import apply_schemas
from kappa.avro.registry import Registry, value_subject
from kappa.avro.schemas import topic_value_schema
from kappa.avro.serde import AvroEncoder
from kappa.generate import click_messages, clicks
from kappa.kafka_client import admin_client, produce_all
from kappa.settings import KappaSettings
from kappa.topics import apply
from tests.integration.conftest import stack_env


def _committed(settings: KappaSettings, group: str) -> dict[int, int]:
    admin = admin_client(settings)
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(CLICKS.name, p) for p in range(CLICKS.partitions)])
    result = admin.list_consumer_group_offsets([request])[group].result(timeout=15)
    return {tp.partition: tp.offset for tp in result.topic_partitions}


def _ends(settings: KappaSettings) -> dict[int, int]:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": settings.bootstrap, "group.id": "probe"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(CLICKS.name, p), timeout=10)[1]
            for p in range(CLICKS.partitions)
        }
    finally:
        consumer.close()


@pytest.fixture
def catalog_clicks(stack: KappaSettings, control_topics: None) -> None:
    """The catalog's `clicks` (the job's declared input) and its dead letters, and the control topics (a job's
    first run makes its version live): set up here, whichever tests ran on the session stack before."""
    needed = [t for t in TOPICS if t in (CLICKS, dead_letters_of(CLICKS))]
    apply(admin_client(stack), needed)
    apply_schemas(stack.schemas_path, needed, stack.registry)


@pytest.mark.usefixtures("catalog_clicks")
def test_run_available_now_then_continuous_until_ctrl_c(stack: KappaSettings, tmp_path: Path) -> None:
    # Other tests on the session stack may have written to `clicks` already (the Dagster materialization
    # does): count from what is there.
    before = sum(_ends(stack).values())
    with Registry(stack.registry) as registry:
        encoder = AvroEncoder(registry, value_subject(CLICKS.name), topic_value_schema(stack.schemas_path, CLICKS))
        produce_all(stack, CLICKS.name, click_messages(clicks(2000, seed=21), encoder.encode, CLICKS.partitions))
    env = stack_env(
        stack, KAPPA_DELTA_ROOT=str(tmp_path / "delta"), KAPPA_CHECKPOINT_ROOT=str(tmp_path / "checkpoints")
    )
    command = [sys.executable, "-m", "kappa.cli", "jobs", "run", JOB.name]

    done = subprocess.run([*command, "--available-now"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "raw_clicks v1: done" in done.stdout
    assert "raw_clicks_v1 batch 0:" in done.stdout  # the per-batch progress line
    assert DeltaTable(str(tmp_path / "delta" / "raw_clicks" / "v1")).to_pyarrow_table().num_rows == before + 2000
    # Kafka's own tools see this job version's progress: its group's offsets are the topic's end offsets.
    assert _committed(stack, "kappa.raw_clicks.v1") == _ends(stack)
    # The version started from earliest: a run asking it to start elsewhere is refused, not silently resumed.
    moved = subprocess.run([*command, "--from", "latest"], env=env, capture_output=True, text=True, timeout=120)
    assert moved.returncode == 2
    assert "raw_clicks v1 started from earliest and its checkpoint resumes from there" in moved.stderr

    # Continuous: more input arrives, the job picks it up from its checkpoint, Ctrl-C (SIGINT) stops it cleanly
    # after its batch, though the SparkContext sets its own SIGINT handler. (SIGTERM: test_deployments.)
    live = subprocess.Popen([*command], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        with Registry(stack.registry) as registry:
            encoder = AvroEncoder(registry, value_subject(CLICKS.name), topic_value_schema(stack.schemas_path, CLICKS))
            produce_all(stack, CLICKS.name, click_messages(clicks(500, seed=22), encoder.encode, CLICKS.partitions))
        # Wait until the batch is complete, not only written: a stop during a batch rightly leaves the group
        # at the last completed batch (the checkpoint's truth), which would make the comparison below racy.
        while time.monotonic() < deadline:
            table = DeltaTable(str(tmp_path / "delta" / "raw_clicks" / "v1")).to_pyarrow_table()
            if table.num_rows == before + 2500 and _committed(stack, "kappa.raw_clicks.v1") == _ends(stack):
                break
            time.sleep(1)
        # While it runs, it holds the version's checkpoint: a second run of the version is refused, naming it.
        second = subprocess.run([*command, "--available-now"], env=env, capture_output=True, text=True, timeout=120)
        assert second.returncode == 2
        assert (
            f"the checkpoint of raw_clicks v1 is in use by `kappa jobs run raw_clicks --version 1` (pid {live.pid},"
            in second.stderr
        )
        live.send_signal(signal.SIGINT)
        out, _ = live.communicate(timeout=120)
    finally:
        if live.poll() is None:
            live.kill()
    assert live.returncode == 0, out[-2000:]
    assert "stopped by signal" in out
    assert DeltaTable(str(tmp_path / "delta" / "raw_clicks" / "v1")).to_pyarrow_table().num_rows == before + 2500
    assert _committed(stack, "kappa.raw_clicks.v1") == _ends(stack)


@pytest.mark.usefixtures("catalog_clicks")
def test_sigterm_while_spark_starts_is_a_clean_stop(stack: KappaSettings, tmp_path: Path) -> None:
    # A deployment stopped (or a sensor-restarted one stopped again) during the tens of seconds Spark takes to
    # start: the runner's handler is set before the session is built, so the stop is graceful and starts nothing.
    env = stack_env(
        stack, KAPPA_DELTA_ROOT=str(tmp_path / "delta"), KAPPA_CHECKPOINT_ROOT=str(tmp_path / "checkpoints")
    )
    job = subprocess.Popen([sys.executable, "-m", "kappa.cli", "jobs", "run", JOB.name], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        assert job.stdout is not None
        lines: list[str] = []
        for line in job.stdout:
            lines.append(line)
            if f"starting {JOB.name}: Spark session" in line:
                break
        job.send_signal(signal.SIGTERM)
        out, _ = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            job.kill()
    out = "".join(lines) + out
    assert job.returncode == 0, out[-2000:]
    assert f"stopped before {JOB.name}_v{JOB.version} started a query" in out, out[-2000:]
    assert "stopped by signal" in out
    assert not list(tmp_path.rglob("offsets")), "a query was started"
