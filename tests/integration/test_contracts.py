"""Row-level data contracts in a real job: raw_clicks on the real stack sends records breaking the clicks
suite to `<topic>.dlq` (kind, broken expectations), keeps every good record, and loses nothing."""

import dataclasses
import uuid
from collections.abc import Callable

import pytest
from pyspark.sql import SparkSession

from jobs.clickstream.generator import Click, clicks
from jobs.raw_clicks.declaration import JOB as RAW_CLICKS
from kappa.contracts.avro_serde import AvroEncoder
from kappa.contracts.dead_letter_format import (
    H_CONTRACT_BROKEN,
    H_CONTRACT_SUITE,
    H_JOB,
    H_SOURCE_TOPIC,
    DeadLetterKind,
)
from kappa.contracts.registry import Registry
from kappa.contracts.schema_files import topic_value_schema
from kappa.contracts.schema_rollout import apply_schemas
from kappa.contracts.topic_declarations import Cleanup, Topic
from kappa.core.settings import KappaSettings
from kappa.kafka.clients import Outgoing, admin_client, produce_all
from kappa.kafka.topic_admin import apply
from kappa.ops import dlq
from kappa.runtime.binding import deployment_topics
from kappa.runtime.outputs import DeltaTable
from kappa.runtime.runner import run_job

GOOD = 400


@pytest.mark.slow
def test_raw_clicks_dead_letters_contract_violations_and_keeps_the_rest(
    stack: KappaSettings, spark: SparkSession, unique_name: Callable[[str], str]
) -> None:
    # A physical topic of the clicks dataset (as a versioned or test copy is): the clicks suite applies.
    topic = Topic(unique_name("clicks"), partitions=2, cleanup=Cleanup.COMPACT, value_schema="clicks.avsc",
                  dataset="clicks")  # fmt: skip
    apply(admin_client(stack), [topic, Topic(f"{topic.name}.dlq", partitions=1, cleanup=Cleanup.DELETE)])
    apply_schemas(stack.schemas_path, [topic], stack.registry)
    bad = {
        "bad-page": Click("bad-page", "u1", "products/42", None, 1767225600000, "DESKTOP"),
        "bad-clock": Click("bad-clock", "u2", "/p", "https://elsewhere", 1000, "MOBILE"),
        "bad-user": Click("bad-user", "", "/p", None, 1767225600000, "TABLET"),
    }
    with Registry(stack.registry) as registry:
        encoder = AvroEncoder(registry, topic.value_subject, topic_value_schema(stack.schemas_path, topic))
        good = [Outgoing(c.event_id.encode(), encoder.encode(c.as_avro())) for c in clicks(GOOD, seed=3)]
        broken = [Outgoing(k.encode(), encoder.encode(c.as_avro())) for k, c in bad.items()]
    # The poison pill: not framed, and its "schema id" (bytes 2-5) is 2^31 or more; it once stopped the job for ever.
    garbage = [Outgoing(b"garbage", b"\x17\x99"), Outgoing(b"poison", b"\x01\xff\xff\xff\xff\x00")]
    produce_all(stack, topic.name, good[:200] + broken + good[200:] + garbage)

    suffix = uuid.uuid4().hex[:8]
    table = DeltaTable(f"raw_clicks_{suffix}")
    job = dataclasses.replace(RAW_CLICKS, name=f"raw_clicks_{suffix}", inputs=(topic,), output=table)
    apply(admin_client(stack), deployment_topics(job, job.version))
    run_job(job, stack, available_now=True)

    rows = spark.read.format("delta").load(table.path(stack, job.version))
    kept = {r.event_id for r in rows.select("event_id").collect()}
    report = dlq.inspect(stack, topic.name, samples=10)
    # Nothing lost, nothing doubled: records in = rows in Delta + dead letters.
    assert rows.count() + report.total == GOOD + len(bad) + len(garbage)
    assert kept == {o.key.decode() for o in good if o.key}
    assert dict(report.by_kind) == {DeadLetterKind.CONTRACT_VIOLATION: 3, DeadLetterKind.NOT_CONFLUENT_FRAMED: 2}
    letters = {(d.key or b"").decode(): d for d in report.samples[DeadLetterKind.CONTRACT_VIOLATION]}
    assert {k: letters[k].headers[H_CONTRACT_BROKEN] for k in bad} == {
        "bad-page": "expect_column_values_to_match_regex(page)",
        "bad-clock": "expect_column_values_to_match_regex(referrer), expect_column_values_to_be_between(event_time)",
        "bad-user": "expect_column_value_lengths_to_be_between(user_id)",
    }
    sample = letters["bad-clock"]
    assert sample.headers[H_CONTRACT_SUITE] == "clicks"
    assert sample.headers[H_SOURCE_TOPIC] == topic.name
    assert sample.headers[H_JOB] == job.name
    assert sample.value == broken[1].value  # the original bytes, ready for `kappa dlq replay`
