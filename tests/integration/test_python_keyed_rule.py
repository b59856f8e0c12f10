"""A per-key rule written in Python (kappa.job's KeyedRule, Spark's transformWithState) runs under the platform:
its state carries across batches and across restarts from the job's checkpoint, and the input's dead letters
pass through it to `<input>.dlq`.

The job keeps each user's earliest click (by event time, then event id) and emits it under the user's id
whenever a batch brings an earlier one. Its log arrives in two parts, in random event-time order, so that the
second holds earlier clicks of users already seen; each part is read by a run of its own (one batch; the second
restarts from the first's checkpoint). What each batch must emit is worked out below with `min` over the clicks
read so far.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from pyspark.sql import Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StatefulProcessorHandle

from kappa.contracts.avro_serde import AvroEncoder
from kappa.contracts.registry import Registry, value_subject
from kappa.contracts.schema_files import topic_value_schema
from kappa.contracts.schema_rollout import apply_schemas
from kappa.contracts.topic_declarations import Cleanup, Topic, late_events_of
from kappa.core.settings import KappaSettings
from kappa.job import JobContext, JobSpec, KeyedRule, TopicPlan, keyed_rule, partition_column
from kappa.kafka.clients import Outgoing, admin_client, produce_all
from kappa.kafka.partitioning import partition_for
from kappa.kafka.topic_admin import apply
from kappa.ops import dlq
from kappa.runtime.runner import run_job
from kappa.spark.topic_io import read_topic

CLICKS = Topic("clicks", partitions=2, cleanup=Cleanup.COMPACT, value_schema="clicks.avsc", key_field="event_id")
FIRST_CLICKS = Topic(
    "first_clicks", partitions=2, cleanup=Cleanup.COMPACT, value_schema="clicks.avsc", key_field="user_id"
)
T0 = 1_767_225_600_000  # 2026-01-01, the clicks' clock
CLICK_COLUMNS = "event_id string, user_id string, page string, referrer string, event_time timestamp, device string"


class EarliestClick(KeyedRule):
    """Per user: the earliest click so far (event time, then event id), emitted when a batch changes it."""

    output = CLICK_COLUMNS

    def init(self, handle: StatefulProcessorHandle) -> None:
        # (event_time_ms, event_id, page, referrer, device): the time in milliseconds, as state keeps no zone
        self.earliest = handle.getValueState(
            "earliest", "event_time_ms long, event_id string, page string, referrer string, device string"
        )

    def apply(self, key: Any, rows: list[Row]) -> Iterator[dict[str, Any]]:
        stored = self.earliest.get()  # None for a user seen the first time
        best = stored
        for r in rows:
            click = (round(r.event_time.timestamp() * 1000), r.event_id, r.page, r.referrer, r.device)
            if best is None or click[:2] < best[:2]:
                best = click
        if best is not None and best != stored:
            self.earliest.update(best)
            time_ms, event_id, page, referrer, device = best
            at = datetime.fromtimestamp(time_ms / 1000, tz=UTC)
            yield {"event_id": event_id, "user_id": key, "page": page, "referrer": referrer, "event_time": at,
                   "device": device}  # fmt: skip


def plan(ctx: JobContext) -> TopicPlan:
    decoded = ctx.read(CLICKS)
    first = keyed_rule(decoded.rows, F.col("user_id"), EarliestClick())  # one row per user whose first click changed
    return TopicPlan(first, key=F.col("user_id"), partition=partition_column(F.col("user_id"), 2))


JOB = JobSpec("first_clicks", 1, "each user's earliest click", (CLICKS,), FIRST_CLICKS, plan)


class Click(NamedTuple):
    event_id: str
    user_id: str
    page: str
    event_time_ms: int

    def as_avro(self) -> dict[str, object]:
        at = datetime.fromtimestamp(self.event_time_ms / 1000, tz=UTC)
        return {"event_id": self.event_id, "user_id": self.user_id, "page": self.page, "referrer": None,
                "event_time": at, "device": "DESKTOP"}  # fmt: skip


def _parts() -> list[list[Click]]:
    """120 clicks of 12 users in two parts, in a random log order (earlier clicks arrive later), some at the
    same millisecond (the event id decides)."""
    draw = random.Random(11)
    generated = [
        Click(f"e{n:03d}", f"user-{draw.randrange(12):02d}", f"/p/{draw.randrange(20)}", T0 + draw.randrange(60) * 1000)
        for n in range(120)
    ]
    return [generated[:50], generated[50:]]


def _expected(parts: list[list[Click]]) -> tuple[int, dict[str, str]]:
    """(records the two batches emit, user -> event id of their earliest click), by `min` per user."""
    emitted, read = 0, []
    answer: dict[str, str] = {}
    for part in parts:
        read += part
        after = {
            user: min((c.event_time_ms, c.event_id) for c in read if c.user_id == user)[1]
            for user in {c.user_id for c in read}
        }
        emitted += sum(after[u] != answer.get(u) for u in after)
        answer = after
    return emitted, answer


@pytest.mark.slow
def test_a_python_rule_keeps_its_state_across_batches_and_restarts(
    stack: KappaSettings,
    spark: SparkSession,
    avro_topic: Callable[..., Topic],
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    source = avro_topic("clicks", partitions=2)
    output = dataclasses.replace(FIRST_CLICKS, name=unique_name("first-clicks"))
    apply(admin_client(stack), [output, late_events_of(output)])  # the runtime wants every topic it may write
    apply_schemas(stack.schemas_path, [output], stack.registry)
    job = dataclasses.replace(JOB, inputs=(source,), output=output)
    settings = stack.model_copy(update={"checkpoint_root": str(tmp_path / "cp")})
    parts = _parts()
    emitted, answer = _expected(parts)
    assert emitted > len(answer)  # later parts change earlier answers: only the state tells which

    with Registry(stack.registry) as registry:
        encoder = AvroEncoder(registry, value_subject(source.name), topic_value_schema(stack.schemas_path, source))
        for n, part in enumerate(parts):
            records = [
                Outgoing(c.event_id.encode(), encoder.encode(c.as_avro()), partition=partition_for(c.user_id, 2))
                for c in part
            ]
            if n == len(parts) - 1:
                records.append(Outgoing(b"broken", b"\x00\x01"))  # a dead letter, amid the rule's rows
            produce_all(stack, source.name, records)
            run = run_job(job, settings, available_now=True)  # a restart from the checkpoint, then one batch
            assert run.batches == {"first_clicks_v1": 1}

    written = read_topic(spark, stack, output, job="test", job_version=0, streaming=False)
    assert written.dead_letters.count() == 0
    rows = sorted(written.records.collect(), key=lambda r: (r.kafka_partition, r.kafka_offset))
    assert len(rows) == emitted  # each batch emitted exactly the users whose earliest click it changed
    assert {r.key: r.event_id for r in rows} == answer  # the latest record per user: their earliest click
    assert dlq.inspect(stack, source.name, samples=1).total == 1  # the dead letter passed through the rule
