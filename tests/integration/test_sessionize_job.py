"""sessionize on the real stack: many small batches at two shuffle-partition counts give exactly the sessions
(and late events) of the whole log at once, as computed independently in SQL (tests/oracles.py) and by the
job's own rule (logic.py)."""

import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pyspark.sql import Row, SparkSession

from jobs.sessionize.declaration import JOB
from jobs.sessionize.logic import MINUTE_MS, Event, UserState, sessionize
from kappa.contracts.avro_serde import AvroEncoder
from kappa.contracts.dead_letter_format import late_topic
from kappa.contracts.registry import Registry, value_subject
from kappa.contracts.schema_files import topic_value_schema
from kappa.contracts.topic_declarations import Topic, late_events_of
from kappa.core.settings import KappaSettings
from kappa.kafka.clients import Outgoing, admin_client, produce_all
from kappa.kafka.partitioning import partition_for
from kappa.kafka.topic_admin import apply
from kappa.ops.clickstream import Click, StreamConfig, clickstream
from kappa.runtime.runner import run_job
from kappa.spark.topic_io import decode_topic, kafka_source, writer_schemas
from tests import oracles
from tests.integration.conftest import partitions_of

SEGMENTS = ("FREE", "PRO", "TRIAL")


def _clicks_in_log_order() -> list[Click]:
    config = StreamConfig(events=2500, users=25, seed=17, late_share=0.03, late_by_ms=150 * 60_000)
    return [e.record for e in clickstream(config) if isinstance(e.record, Click)]


def _expected(clicks: list[Click]) -> tuple[dict[str, tuple], set[str]]:  # type: ignore[type-arg]
    by_user: dict[str, list[Event]] = {}
    for c in clicks:
        by_user.setdefault(c.user_id, []).append(Event(c.event_id, c.event_time_ms, c.page, _segment(c)))
    sessions: dict[str, tuple] = {}  # type: ignore[type-arg]
    late: set[str] = set()
    for user, events in by_user.items():
        changes = sessionize(user, UserState(), events)
        for s in changes.upserts:
            sessions[s.session_id] = (
                s.start_ms,
                s.end_ms,
                s.clicks,
                len(s.pages),
                s.entry_page,
                s.exit_page,
                s.segment,
            )
        late |= {e.event_id for e in changes.late}
    return sessions, late


def _values(r: Row) -> tuple:  # type: ignore[type-arg]
    def ms(t: datetime) -> int:
        return int(t.astimezone(UTC).timestamp() * 1000)

    return (ms(r.start_time), ms(r.end_time), r.clicks, r.distinct_pages, r.entry_page, r.exit_page, r.segment)


def _segment(c: Click) -> str:
    return SEGMENTS[int(c.user_id[-2:]) % 3]


@pytest.mark.slow
@pytest.mark.usefixtures("session_conf_restored")
@pytest.mark.parametrize("shuffle_partitions", [2, 5])
def test_sessions_equal_the_rule_over_the_whole_log(
    stack: KappaSettings,
    spark: SparkSession,
    avro_topic: Callable[..., Topic],
    unique_name: Callable[[str], str],
    tmp_path: Path,
    shuffle_partitions: int,
) -> None:
    source = avro_topic("enriched", value_schema="enriched_clicks.avsc", partitions=3)
    output = avro_topic("sessions", value_schema="sessions.avsc", partitions=3)
    apply(admin_client(stack), [late_events_of(output)])
    clicks = _clicks_in_log_order()
    with Registry(stack.registry) as registry:
        encoder = AvroEncoder(registry, value_subject(source.name), topic_value_schema(stack.schemas_path, source))
        records = [
            Outgoing(
                c.event_id.encode(),
                encoder.encode(c.as_avro() | {"profile_version": 1, "segment": _segment(c), "country": "DE"}),
                partition=partition_for(c.user_id, source.partitions),
            )
            for c in clicks
        ]
    produce_all(stack, source.name, records)

    settings = stack.model_copy(
        update={"checkpoint_root": str(tmp_path / "cp"), "delta_root": str(tmp_path / "d"),
                "spark_shuffle_partitions": shuffle_partitions}
    )  # fmt: skip
    job = dataclasses.replace(JOB, inputs=(source,), output=output)
    report = run_job(job, settings, available_now=True, max_offsets_per_trigger=300)  # ~9 micro-batches
    assert report.batches[f"sessionize_v{JOB.version}"] >= 8
    # The run really had that many partitions: its offset log says so, and its state store has them.
    checkpoint = tmp_path / "cp" / JOB.name / f"v{JOB.version}" / "output"
    assert partitions_of(checkpoint) == (shuffle_partitions, shuffle_partitions)

    # The topic as a compacted reader sees it: the latest value per key, tombstones deleting.
    with Registry(stack.registry) as registry:
        writers = writer_schemas(registry, output)
    raw = kafka_source(spark, stack, output, streaming=False)
    decoded = decode_topic(
        raw, topic_value_schema(stack.schemas_path, output), writers, "test", 1,
        key_field=output.key_field, deletes=output.deletes,
    )  # fmt: skip
    assert decoded.dead_letters.count() == 0
    changes = [(r.kafka_partition, r.kafka_offset, r.key, _values(r)) for r in decoded.records.collect()] + [
        (r.kafka_partition, r.kafka_offset, r.key, None) for r in decoded.tombstones.collect()
    ]
    table: dict[str, tuple] = {}  # type: ignore[type-arg]
    for _, _, key, values in sorted(changes, key=lambda c: (c[0], c[1])):  # log order per partition
        if values is None:
            table.pop(key, None)
        else:
            table[key] = values
    events = [(c.event_id, c.user_id, c.page, c.event_time_ms, _segment(c)) for c in clicks]
    gap, allowed = (JOB.settings[k] * MINUTE_MS for k in ("gap_minutes", "allowed_lateness_minutes"))
    independent_sessions, independent_late = oracles.sessions(events, gap, allowed)
    assert len(independent_sessions) > 100  # a real workload, not two empty dicts
    assert table == independent_sessions
    expected_sessions, expected_late = _expected(clicks)  # the rule itself says the same
    assert expected_sessions == independent_sessions

    late = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", stack.bootstrap)
        .option("subscribe", late_topic(output.name))
        .option("includeHeaders", "true")
        .load()
    )
    with Registry(stack.registry) as registry:
        source_writers = writer_schemas(registry, source)
    late_decoded = decode_topic(late, topic_value_schema(stack.schemas_path, source), source_writers, "test", 1)
    late_ids = {r.event_id for r in late_decoded.records.collect()}  # the original events, decodable as ever
    assert late_ids == independent_late
    assert late_ids == expected_late
    assert expected_late
