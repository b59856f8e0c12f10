"""Dagster materializes `enriched_clicks` on the real stack: the job runs in a subprocess launched through Pipes,
and its per-batch progress and run report come back as the materialization's metadata."""

import random
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from dagster_project.assets import topic_key
from dagster_project.definitions import build_definitions
from dagster_project.resources import KappaResource
from jobs.catalog import CLICKS, ENRICHED_CLICKS, TOPICS, USER_PROFILES
from kappa.avro.contracts import apply_schemas
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


def test_materializing_enriched_clicks_runs_the_job_through_pipes(stack: KappaSettings, tmp_path: Path) -> None:
    # The job reads and writes the catalog's topics (its declaration), shared with other tests on this stack:
    # this test's clicks carry their own seed in their event ids, and the run's counts are checked against the
    # topics' contents, not against this test's share alone.
    apply(admin_client(stack), TOPICS)
    apply_schemas(stack.schemas_path, TOPICS, stack.registry)
    seed = random.SystemRandom().randrange(10_000, 1_000_000)
    produced = generate(stack, StreamConfig(events=600, users=25, seed=seed), CLICKS, USER_PROFILES, progress=None)
    to_read = _records_in(stack, CLICKS) + _records_in(stack, USER_PROFILES)
    assert to_read >= produced.clicks + produced.profiles

    env = stack_env(stack, KAPPA_DELTA_ROOT=str(tmp_path / "delta"), KAPPA_CHECKPOINT_ROOT=str(tmp_path / "cp"))
    defs = build_definitions(kappa=KappaResource(overrides={k: v for k, v in env.items() if k.startswith("KAPPA_")}))
    key = topic_key(ENRICHED_CLICKS.name)
    result = defs.resolve_implicit_global_asset_job_def().execute_in_process(asset_selection=[key])

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
    mine = {k for k in _keys(stack, ENRICHED_CLICKS) if k.startswith(f"evt-{seed}-")}
    assert mine == {f"evt-{seed}-{n:09d}" for n in range(produced.clicks)}
