"""Exactly-once into Delta: the shipped page_stats job, killed with SIGKILL at the fault points inside its batches
(kappa.runtime.faults), restarted from its checkpoint each time, leaves the table and its dead letters exactly as
one uninterrupted run would: equal to the independent answer (tests/oracles.py), each poison record one dead
letter.

The kills, each in a run of its own over the same log (small batches: a catch-up of 250 records per batch):
1. between a view's two writes: the batch's dead letters sent, the table not merged;
2. after both writes, before Spark records the batch in the checkpoint: the restarted job runs the same batch id
   again (its state store from before the batch, its MERGE skipped by Delta's idempotent write);
3. after the writes of that very batch run again: the window twice in a row.
Then a last run drains the log (in the test's own Spark session).
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from pyspark.sql import SparkSession

from jobs.catalog import ENRICHED_CLICKS
from jobs.clickstream.generator import Click, StreamConfig, clickstream
from jobs.page_stats.declaration import JOB as PAGE_STATS
from jobs.page_stats.declaration import Settings as PageStatsSettings
from kappa.contracts.avro_serde import AvroEncoder
from kappa.contracts.dead_letter_format import H_JOB, H_SOURCE_OFFSET, H_SOURCE_PARTITION
from kappa.contracts.registry import Registry, value_subject
from kappa.contracts.schema_files import topic_value_schema
from kappa.contracts.topic_declarations import Topic, dead_letters_of
from kappa.core.settings import KappaSettings
from kappa.kafka.clients import Outgoing, admin_client, produce_all
from kappa.kafka.partitioning import partition_for
from kappa.kafka.topic_admin import apply
from kappa.runtime import DeltaTable
from kappa.runtime.binding import deployment_topics
from kappa.runtime.faults import KILL_AT, FaultPoint
from kappa.runtime.runner import run_job
from kappa.spark.delta_merge import committed_batch
from tests import oracles
from tests.environment import stack_env

GAP_MS = PAGE_STATS.settings_as(PageStatsSettings).gap_minutes * 60_000
POISON = b"\x07not an Avro record"  # no Confluent magic byte: a dead letter
PER_BATCH = 250
KILLS = (  # (fault point, the how-manieth batch of the run)
    (FaultPoint.BETWEEN_WRITES, 2),
    (FaultPoint.AFTER_WRITES, 2),
    (FaultPoint.AFTER_WRITES, 1),  # the batch id the previous kill left half done, run again and killed again
)
KILLED = re.compile(  # the job's own line: where it died (and, between writes, what the batch had sent)
    r"fault point: SIGKILL at (\S+) of \S+ batch (\d+) .*?(?:: (\d+) side rows sent, (\d+) rows unwritten)?$"
)


def _log(seed: int) -> list[tuple[Click | None, str]]:
    """Enriched clicks in log order, 8% re-emitted later with another segment (an enrich_clicks correction),
    some late; None: a poison record, one in about 60."""
    config = StreamConfig(events=1200, users=40, pages=15, seed=seed, late_share=0.05, late_by_ms=20 * 60_000)
    clicks = [e.record for e in clickstream(config) if isinstance(e.record, Click)]
    rng = random.Random(seed)
    placed: list[tuple[float, Click | None, str]] = []
    for i, click in enumerate(clicks):
        placed.append((i, click, "FREE"))
        if rng.random() < 0.08:
            placed.append((i + rng.randrange(1, 200) + 0.5, click, rng.choice(("TRIAL", "PRO"))))
        if rng.random() < 1 / 60:
            placed.append((i + 0.25, None, ""))
    return [(click, segment) for _, click, segment in sorted(placed, key=lambda p: p[0])]


def _poison_and_dead_letters(stack: KappaSettings, topic: Topic) -> tuple[set[tuple[int, int]], set[tuple[int, int]]]:
    """(where the poison records are in the topic, where page_stats' dead letters say they came from)."""
    consumer = Consumer({"bootstrap.servers": stack.bootstrap, "group.id": f"probe-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False})  # fmt: skip
    found: dict[str, list[tuple[int, int, bytes | None, dict[str, str]]]] = {}
    try:
        for name, partitions in ((topic.name, topic.partitions), (dead_letters_of(topic).name, 1)):
            ends = [consumer.get_watermark_offsets(TopicPartition(name, p), timeout=10)[1] for p in range(partitions)]
            consumer.assign([TopicPartition(name, p, 0) for p in range(partitions)])
            records: list[tuple[int, int, bytes | None, dict[str, str]]] = []
            while len(records) < sum(ends):
                batch = consumer.consume(500, timeout=10)
                assert batch, f"{name}: read {len(records)} of {sum(ends)} records"
                for m in batch:
                    headers = {str(h[0]): h[1].decode() if isinstance(h[1], bytes) else str(h[1])
                               for h in m.headers() or []}  # fmt: skip
                    records.append((int(m.partition() or 0), int(m.offset() or 0), m.value(), headers))
            found[name] = records
    finally:
        consumer.close()
    poison = {(p, o) for p, o, value, _h in found[topic.name] if value == POISON}
    dead = {
        (int(h[H_SOURCE_PARTITION]), int(h[H_SOURCE_OFFSET]))
        for _p, _o, _v, h in found[dead_letters_of(topic).name]
        if h[H_JOB] == PAGE_STATS.name
    }
    return poison, dead


def _ms(t: datetime) -> int:
    return int(t.astimezone(UTC).timestamp() * 1000)  # pyspark: naive local time


@pytest.mark.slow
def test_sigkills_inside_the_views_batches_neither_lose_nor_double(
    stack: KappaSettings, spark: SparkSession, avro_topic: Callable[..., Topic], tmp_path: Path
) -> None:
    topic = avro_topic("under-fire", value_schema="enriched_clicks.avsc", partitions=2)
    log = _log(seed=13)
    with Registry(stack.registry) as registry:
        encoder = AvroEncoder(registry, value_subject(topic.name), topic_value_schema(stack.schemas_path, topic))
    produce_all(stack, topic.name, [
        Outgoing(b"poison", POISON, partition=i % topic.partitions) if click is None else Outgoing(
            click.event_id.encode(),
            encoder.encode(click.as_avro() | {"profile_version": 1, "segment": segment, "country": "DE"}),
            partition=partition_for(click.user_id, topic.partitions),
            timestamp_ms=click.event_time_ms,
        )
        for i, (click, segment) in enumerate(log)
    ])  # fmt: skip
    apply(admin_client(stack), deployment_topics(PAGE_STATS, PAGE_STATS.version))  # its late records' topic
    env = stack_env(stack, KAPPA_CHECKPOINT_ROOT=str(tmp_path / "cp"), KAPPA_DELTA_ROOT=str(tmp_path / "delta"))
    bindings = json.dumps({ENRICHED_CLICKS.name: topic.name})
    command = [sys.executable, "-m", "tests.integration.pipeline_driver", PAGE_STATS.name, bindings,
               "--available-now", "--max-offsets", str(PER_BATCH)]  # fmt: skip

    killed: list[tuple[str, int]] = []  # (point, batch id) of each kill, from the job's own line
    for point, number in KILLS:
        # Returns once the driver's JVM is gone too (it shares the output pipes, and ends when its driver does).
        run = subprocess.run(command, env=env | {KILL_AT: f"{point}:{number}"}, capture_output=True, text=True,
                             timeout=600)  # fmt: skip
        assert run.returncode == -9, f"not killed at {point}:\n{run.stdout[-2000:]}{run.stderr[-2000:]}"
        [line] = [m for m in map(KILLED.match, run.stderr.splitlines()) if m]
        print(line.group(0))
        killed.append((line.group(1), int(line.group(2))))
        if point is FaultPoint.BETWEEN_WRITES:  # the batch had both: dead letters sent, clicks not merged
            assert int(line.group(3)) > 0
            assert int(line.group(4)) > 0
    # The drain: an ordinary run from the checkpoint, in the test's own warm session (a cold driver costs a minute
    # of CPU; which process resumes a checkpoint does not matter to it).
    settings = stack.model_copy(update={"checkpoint_root": str(tmp_path / "cp"), "delta_root": str(tmp_path / "delta")})
    final = run_job(PAGE_STATS.bound({ENRICHED_CLICKS.name: topic.name}), settings, available_now=True,
                    max_offsets_per_trigger=PER_BATCH)  # fmt: skip
    assert sum(final.batches.values()) > 0, "the drain ran no batch: the kills left nothing to do"

    assert [p for p, _ in killed] == [str(p) for p, _ in KILLS]
    assert killed[2][1] == killed[1][1], "the batch killed after its writes ran again, with the same id"
    clicks = {c.event_id: c for c, _ in log if c is not None}
    expected = oracles.page_stats(((c.user_id, c.event_id, c.page, c.event_time_ms) for c in clicks.values()), GAP_MS)
    assert isinstance(PAGE_STATS.output, DeltaTable)
    path = PAGE_STATS.output.path(settings, PAGE_STATS.version)
    rows = spark.read.format("delta").load(path).collect()
    found = {(r.page, _ms(r.hour_start)): (r.views, r.distinct_users, r.median_time_on_page_ms) for r in rows}
    assert len(rows) == len(found) == len(expected)
    assert found == expected  # every click counted once, corrections replacing: no loss, no duplicate
    assert sum(v[0] for v in found.values()) == len(clicks)
    last = committed_batch(spark, path, f"{PAGE_STATS.name}.v{PAGE_STATS.version}")
    assert last is not None
    assert last >= len(log) // PER_BATCH - 1  # the log in batches of 250, ids from 0
    poison, dead = _poison_and_dead_letters(stack, topic)
    assert len(poison) == sum(1 for c, _ in log if c is None) > 10
    assert dead == poison  # each poison record a dead letter (a batch run again sends its own again)
