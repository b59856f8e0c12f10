"""Dagster materializes `enriched_clicks` on the real stack: the job's catch-up runs in a subprocess launched through
Pipes, its per-batch progress and run report come back as the materialization's metadata, and the version then
runs on continuously (a deployment), until Dagster's `stop_enrich_clicks` job stops it.

The test runs on its own copy of the pipeline (topics no other test writes), loaded as the code location
(`Deployment.imported`)."""

import importlib
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from dagster import AssetKey

from dagster_project.assets import topic_key
from dagster_project.definitions import build_definitions
from dagster_project.resources import KappaResource
from jobs.clickstream.generator import StreamConfig
from jobs.clickstream.produce import generate
from kappa.contracts.topic_declarations import Topic
from kappa.core.settings import KappaSettings
from kappa.lifecycle import deployments
from kappa.lifecycle.exits import exit_status
from kappa.lifecycle.launchers import driver_pids
from kappa.lifecycle.state_files import Health
from kappa.runtime.binding import physical_output
from kappa.runtime.discovery import discover
from kappa.runtime.run_record import RunState
from tests.integration.replay_pipeline import Deployment, deploy_copy
from tests.waiting import wait_until


@pytest.fixture
def pipeline(stack: KappaSettings, tmp_path: Path, unique_name: Callable[[str], str]) -> Iterator[Deployment]:
    """This test's copy of the pipeline (topics and schemas set up), as the code location of this process."""
    d = deploy_copy(stack, tmp_path / "pipeline", unique_name("dm") + "_")
    with d.imported():
        yield d


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


@pytest.mark.slow
def test_materializing_enriched_clicks_runs_the_job_through_pipes(stack: KappaSettings, pipeline: Deployment) -> None:
    catalog = importlib.import_module("jobs.catalog")  # the copy's topics, as the job reads and writes them
    seed = random.SystemRandom().randrange(10_000, 1_000_000)
    produced = generate(stack, StreamConfig(events=600, users=25, seed=seed), catalog.CLICKS, catalog.USER_PROFILES,
                        progress=None)  # fmt: skip
    to_read = _records_in(stack, catalog.CLICKS) + _records_in(stack, catalog.USER_PROFILES)
    assert to_read == produced.clicks + produced.profiles  # topics of this test alone

    kappa = KappaResource(overrides={k: v for k, v in pipeline.env.items() if k.startswith("KAPPA_")})
    settings = kappa.settings()
    defs = build_definitions(kappa=kappa)
    key = topic_key(catalog.ENRICHED_CLICKS.name)
    job = discover()["enrich_clicks"]
    try:
        result = defs.resolve_implicit_global_asset_job_def().execute_in_process(asset_selection=[key])
        _check_materialization(stack, result, key, to_read, seed, produced.clicks, catalog.ENRICHED_CLICKS)

        # Deployed: after the catch-up, the version runs on continuously, detached, from where catch-up stopped.
        [state] = deployments.status(settings)
        assert state.health is Health.RUNNING
        assert (state.deployment.job, state.deployment.version) == ("enrich_clicks", job.version)
        metadata = {
            k: getattr(v, "value", v)
            for k, v in result.get_asset_materialization_events()[0].materialization.metadata.items()
        }
        assert metadata["deployment_pid"] == state.pid  # the process that runs the job, not its wrapper
        assert state.pid in driver_pids(state.deployment)

        # Dagster's stop job ends it: SIGTERM, the runner stops after its batch and exits 0. (Waiting for its
        # query to start: a stop before it starts anything is test_job_runner's case.)
        def query_started() -> bool:  # what the job records about itself
            run = deployments.state_of(state.deployment).run
            return run is not None and "enrich_clicks_v1" in run.queries

        wait_until(
            query_started,
            timeout_s=120,
            what="the deployed enrich_clicks v1 runs its query",
            log=state.deployment.log_path,
        )
        stop = defs.get_job_def("stop_enrich_clicks").execute_in_process()
        assert stop.success
        [state] = deployments.status(settings)
        assert state.health is Health.STOPPED
        assert exit_status(state.deployment) == 0
        assert state.run is not None
        assert state.run.state is RunState.STOPPED
    finally:
        for state in deployments.status(settings):  # never leave a job running after the test
            deployments.stop_if_running(settings, state.deployment.job, state.deployment.version, timeout_s=30)


def _check_materialization(
    stack: KappaSettings, result: Any, key: AssetKey, to_read: int, seed: int, clicks: int, enriched: Topic
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
    assert set(queries) == {"enrich_clicks_v1"}  # one query: each input read once, dead letters in the same write
    # Every batch of every query came through as its own Pipes message, counted on the Dagster side.
    assert metadata["batches_reported"] == sum(q["batches"] for q in queries.values())
    # Added on the Dagster side after the run: the output's registered value schema.
    assert metadata["value_schema_version"] >= 1

    # The job really ran: every click of this test is in the output, keyed by its event id.
    job = discover()["enrich_clicks"]
    output = enriched.versioned(job.version)  # the physical topic this version writes
    assert output.name == physical_output(job, stack, job.version)[1]
    mine = {k for k in _keys(stack, output) if k.startswith(f"evt-{seed}-")}
    assert mine == {f"evt-{seed}-{n:09d}" for n in range(clicks)}
