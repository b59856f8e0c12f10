"""Dagster materializes `enriched_clicks` on the real stack: the job's catch-up runs in a subprocess launched through
Pipes, its per-batch progress and run report come back as the materialization's metadata, and the version then
runs on continuously (a deployment), until Dagster's `stop_enrich_clicks` job stops it."""

import random
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from dagster import AssetKey

from dagster_project.assets import topic_key
from dagster_project.definitions import build_definitions
from dagster_project.resources import KappaResource
from jobs.catalog import CLICKS, ENRICHED_CLICKS, TOPICS, USER_PROFILES
from kappa import deployments
from kappa.avro.contracts import apply_schemas
from kappa.deployment import physical_output, topics_to_apply
from kappa.errors import KappaError
from kappa.generate import StreamConfig
from kappa.kafka_client import admin_client
from kappa.produce_stream import generate
from kappa.runtime.discovery import discover
from kappa.settings import KappaSettings
from kappa.topics import Topic, apply
from tests.integration.conftest import stack_env


def _records_in(settings: KappaSettings, topic: Topic) -> int:
    """Records a reader from the earliest offset sees: what the catch-up run must read."""
    consumer = Consumer({"bootstrap.servers": settings.bootstrap, "group.id": "probe-dagster"})
    try:
        total = 0
        for p in range(topic.partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic.name, p), timeout=10)
            total += high - low
        return total
    finally:
        consumer.close()


def _keys(settings: KappaSettings, topic: Topic) -> set[str]:
    """Every key in the topic, read to its end offsets."""
    consumer = Consumer(
        {"bootstrap.servers": settings.bootstrap, "group.id": "probe-dagster", "enable.auto.commit": False}
    )
    try:
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic.name, p), timeout=10)
            for p in range(topic.partitions)
        }
        consumer.assign([TopicPartition(topic.name, p, low) for p, (low, high) in ends.items() if high > low])
        remaining = {p for p, (low, high) in ends.items() if high > low}
        keys: set[str] = set()
        while remaining:
            message = consumer.poll(10)
            assert message is not None, f"{topic.name}: no record within 10 s, partitions {remaining} unread"
            assert message.error() is None, message.error()
            keys.add(message.key().decode())
            if message.offset() + 1 >= ends[message.partition()][1]:
                remaining.discard(message.partition())
        return keys
    finally:
        consumer.close()


def _physical_topics(stack: KappaSettings) -> list[Topic]:
    """`topics_to_apply`, retried while the control topics just created have no partition leader yet."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return topics_to_apply(stack, TOPICS)
        except KappaError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def test_materializing_enriched_clicks_runs_the_job_through_pipes(stack: KappaSettings, tmp_path: Path) -> None:
    # The job reads and writes the catalog's topics (its declaration), shared with other tests on this stack:
    # this test's clicks carry their own seed in their event ids, and the run's counts are checked against the
    # topics' contents, not against this test's share alone.
    apply(admin_client(stack), TOPICS)
    apply(admin_client(stack), _physical_topics(stack))  # the versioned outputs (`enriched_clicks.v1`, ...)
    apply_schemas(stack.schemas_path, TOPICS, stack.registry)
    seed = random.SystemRandom().randrange(10_000, 1_000_000)
    produced = generate(stack, StreamConfig(events=600, users=25, seed=seed), CLICKS, USER_PROFILES, progress=None)
    to_read = _records_in(stack, CLICKS) + _records_in(stack, USER_PROFILES)
    assert to_read >= produced.clicks + produced.profiles

    env = stack_env(
        stack,
        KAPPA_DELTA_ROOT=str(tmp_path / "delta"),
        KAPPA_CHECKPOINT_ROOT=str(tmp_path / "cp"),
        KAPPA_DEPLOYMENTS_DIR=str(tmp_path / "deployments"),
    )
    kappa = KappaResource(overrides={k: v for k, v in env.items() if k.startswith("KAPPA_")})
    settings = kappa.settings()
    defs = build_definitions(kappa=kappa)
    key = topic_key(ENRICHED_CLICKS.name)
    job = discover()["enrich_clicks"]
    try:
        result = defs.resolve_implicit_global_asset_job_def().execute_in_process(asset_selection=[key])
        _check_materialization(stack, result, key, to_read, seed, produced.clicks)

        # Deployed: after the catch-up, the version runs on continuously, detached, from where catch-up stopped.
        [state] = deployments.status(settings)
        assert state.health is deployments.Health.RUNNING
        assert (state.deployment.job, state.deployment.version) == ("enrich_clicks", job.version)
        metadata = {
            k: getattr(v, "value", v)
            for k, v in result.get_asset_materialization_events()[0].materialization.metadata.items()
        }
        assert metadata["deployment_pid"] == state.deployment.pid
        # Dagster's stop job ends it: SIGTERM, the runner stops after its batch and exits 0. (Waiting for its
        # query to start: a stop before it starts anything is test_job_runner's case.)
        deadline = time.monotonic() + 120
        while "query enrich_clicks_v1 started" not in state.deployment.log_path.read_text():
            assert time.monotonic() < deadline, state.deployment.log_path.read_text()[-3000:]
            time.sleep(1)
        stop = defs.get_job_def("stop_enrich_clicks").execute_in_process()
        assert stop.success
        [state] = deployments.status(settings)
        assert state.health is deployments.Health.STOPPED
        assert deployments.exit_status(state.deployment.log_path.read_text()) == 0
    finally:
        for state in deployments.status(settings):  # never leave a job running after the test
            deployments.stop_if_running(settings, state.deployment.job, state.deployment.version, timeout_s=30)


def _check_materialization(
    stack: KappaSettings, result: Any, key: AssetKey, to_read: int, seed: int, clicks: int
) -> None:
    """What the catch-up reported through Pipes, and what it wrote."""
    assert result.success
    [materialization] = result.get_asset_materialization_events()
    assert materialization.asset_key == key
    metadata = {k: getattr(v, "value", v) for k, v in materialization.materialization.metadata.items()}
    # Reported by the subprocess (kappa jobs run --pipes) from its RunReport:
    assert metadata["version"] == discover()["enrich_clicks"].version
    assert metadata["input_rows"] == to_read  # a fresh checkpoint: the whole of both input logs, once
    assert metadata["batches"] >= 1
    assert metadata["seconds"] > 0
    assert metadata["rows_per_second"] > 0
    queries = metadata["queries"]
    assert set(queries) == {"enrich_clicks_v1", "enrich_clicks_v1_clicks_dlq", "enrich_clicks_v1_profiles_dlq"}
    # Every batch of every query came through as its own Pipes message, counted on the Dagster side.
    assert metadata["batches_reported"] == sum(q["batches"] for q in queries.values())
    # Added on the Dagster side after the run: the output's registered value schema.
    assert metadata["value_schema_version"] >= 1

    # The job really ran: every click of this test is in the output, keyed by its event id.
    job = discover()["enrich_clicks"]
    output = ENRICHED_CLICKS.versioned(job.version)  # the physical topic this version writes
    assert output.name == physical_output(job, stack, job.version)[1]
    mine = {k for k in _keys(stack, output) if k.startswith(f"evt-{seed}-")}
    assert mine == {f"evt-{seed}-{n:09d}" for n in range(clicks)}
