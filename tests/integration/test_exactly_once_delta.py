"""Exactly-once into Delta: SIGKILL a view job inside its batches, restart it, and nothing is lost or doubled."""

import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from kappa.contracts.avro_serde import AvroEncoder
from kappa.contracts.registry import Registry, value_subject
from kappa.contracts.schema_files import topic_value_schema
from kappa.contracts.topic_declarations import Topic
from kappa.core.settings import KappaSettings
from kappa.kafka.clients import produce_all
from kappa.ops.clickstream import click_messages, clicks
from kappa.spark.delta_merge import committed_batch
from tests.environment import stack_env
from tests.integration.view_job_under_fire import APP_ID


@pytest.mark.slow
def test_sigkill_inside_batches_neither_loses_nor_doubles(
    stack: KappaSettings, spark: SparkSession, avro_topic: Callable[..., Topic], tmp_path: Path
) -> None:
    topic = avro_topic("under-fire", partitions=2)
    events = list(clicks(3000, users=100, pages=40, seed=13))
    with Registry(stack.registry) as registry:
        encoder = AvroEncoder(registry, value_subject(topic.name), topic_value_schema(stack.schemas_path, topic))
        produce_all(stack, topic.name, click_messages(events, encoder.encode, topic.partitions))
    table, checkpoint = str(tmp_path / "page_views"), str(tmp_path / "checkpoint")
    command = [sys.executable, "-m", "tests.integration.view_job_under_fire", topic.name, table, checkpoint]
    rng = random.Random(2026)

    kills = 0
    # Three runs, each killed in one of its batches: once somewhere inside the MERGE, twice in the riskiest
    # window, after the MERGE committed and before Spark recorded the batch as done (the job holds that
    # window open for 2 s), so the restarted job runs the same batch id again.
    for moment in ("inside", "after-commit", "after-commit"):
        env = stack_env(stack, PAUSE_AFTER_MERGE_S="2")
        job = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert job.stdout is not None
        target = rng.randint(1, 3)  # the how-manieth batch of this run to die in
        marker = "START" if moment == "inside" else "DONE"
        seen = 0
        for line in job.stdout:
            if line.startswith("BATCH") and line.rstrip().endswith(marker):
                seen += 1
                if seen == target:
                    if moment == "inside":
                        time.sleep(rng.uniform(0.0, 0.8))
                    job.send_signal(signal.SIGKILL)
                    kills += 1
                    break
        job.wait(timeout=60)
    final = subprocess.run(command, env=stack_env(stack), capture_output=True, text=True, timeout=600)
    assert final.returncode == 0, final.stderr[-2000:]
    assert "DRAINED" in final.stdout
    assert kills == 3

    got = {r.page: r.views for r in spark.read.format("delta").load(table).collect()}
    assert got == dict(Counter(e.page for e in events))  # every click counted once: no loss, no duplicate
    assert sum(got.values()) == 3000
    last = committed_batch(spark, table, APP_ID)
    assert last is not None
    assert last >= 11  # 3000 records / 250 per batch, batch ids from 0
