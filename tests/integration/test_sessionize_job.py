"""sessionize on the real stack: many small batches at two shuffle-partition counts give exactly the sessions
(and late events) of the whole log at once, as computed independently in SQL (tests/oracles.py) and by the
job's own rule (logic.py).

Spread through the generated log are three hand-written users whose clicks enrich_clicks re-emits with another
segment (corrections: the same event id again) and who have a click that arrives after later ones (it becomes
its session's entry): the rule's docstring says a correction changes a session's segment only when it is of the
session's first click (by event time), and a late-arriving earlier click's segment becomes the session's. Their
sessions are worked out by hand below from that rule, not by the rule's code."""

import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pyspark.sql import Row, SparkSession

from jobs.clickstream.generator import Click, StreamConfig, clickstream
from jobs.sessionize.declaration import JOB, Settings
from jobs.sessionize.logic import Event, UserState, sessionize
from kappa.contracts.avro_serde import AvroEncoder
from kappa.contracts.dead_letter_format import late_topic
from kappa.contracts.registry import Registry, value_subject
from kappa.contracts.schema_files import topic_value_schema
from kappa.contracts.topic_declarations import MINUTE_MS, Topic, late_events_of
from kappa.core.settings import KappaSettings
from kappa.kafka.clients import Outgoing, admin_client, produce_all
from kappa.kafka.partitioning import partition_for
from kappa.kafka.topic_admin import apply
from kappa.runtime.runner import run_job
from kappa.spark.topic_io import decode_topic, kafka_source, writer_schemas
from tests import oracles
from tests.integration.conftest import partitions_of

SEGMENTS = ("FREE", "PRO", "TRIAL")
T0, M = 1_700_000_000_000, MINUTE_MS  # the hand-written users' clock (event times are per user)
# (event_id, user_id, page, event_time_ms, segment) in log order; an event id seen before is a correction.
CORRECTED: tuple[oracles.SessionEvent, ...] = (
    # fix-a: the session's first click is corrected (its segment follows), then a later click (it does not).
    ("fix-a1", "fix-a", "/a/1", T0, "FREE"),
    ("fix-a2", "fix-a", "/a/2", T0 + 5 * M, "FREE"),
    ("fix-a3", "fix-a", "/a/3", T0 + 10 * M, "FREE"),
    ("fix-a1", "fix-a", "/a/1", T0, "PRO"),
    ("fix-a2", "fix-a", "/a/2", T0 + 5 * M, "TRIAL"),
    # fix-b: an earlier click arrives late (25 min behind, within the allowed 120): it is the entry now and its
    # segment the session's; a correction of the click that opened the session then changes nothing.
    ("fix-b1", "fix-b", "/b/1", T0 + 60 * M, "FREE"),
    ("fix-b2", "fix-b", "/b/2", T0 + 70 * M, "FREE"),
    ("fix-b0", "fix-b", "/b/0", T0 + 45 * M, "TRIAL"),
    ("fix-b1", "fix-b", "/b/1", T0 + 60 * M, "PRO"),
    # fix-c: the first click corrected, then an earlier click arrives (its segment wins), then that one is
    # corrected in turn (it is the first click now).
    ("fix-c1", "fix-c", "/c/1", T0, "FREE"),
    ("fix-c2", "fix-c", "/c/2", T0 + 10 * M, "FREE"),
    ("fix-c1", "fix-c", "/c/1", T0, "PRO"),
    ("fix-c0", "fix-c", "/c/0", T0 - 20 * M, "TRIAL"),
    ("fix-c0", "fix-c", "/c/0", T0 - 20 * M, "ENTERPRISE"),
)
# Their sessions by hand: session id -> (start_ms, end_ms, clicks, distinct_pages, entry, exit, segment).
CORRECTED_SESSIONS = {
    "fix-a:fix-a1": (T0, T0 + 10 * M, 3, 3, "/a/1", "/a/3", "PRO"),
    "fix-b:fix-b1": (T0 + 45 * M, T0 + 70 * M, 3, 3, "/b/0", "/b/2", "TRIAL"),
    "fix-c:fix-c1": (T0 - 20 * M, T0 + 10 * M, 3, 3, "/c/0", "/c/2", "ENTERPRISE"),
}


def _clicks_in_log_order() -> list[Click]:
    config = StreamConfig(events=2500, users=25, seed=17, late_share=0.03, late_by_ms=150 * 60_000)
    return [e.record for e in clickstream(config) if isinstance(e.record, Click)]


def _in_log_order(clicks: list[Click]) -> list[oracles.SessionEvent]:
    """The generated clicks with the hand-written users' events spread evenly among them (so that corrections
    and their clicks fall in different micro-batches)."""
    events: list[oracles.SessionEvent] = [(c.event_id, c.user_id, c.page, c.event_time_ms, _segment(c)) for c in clicks]
    step = len(events) // (len(CORRECTED) + 1)
    for n, event in reversed(list(enumerate(CORRECTED, start=1))):
        events.insert(n * step, event)
    return events


def _expected(events: list[oracles.SessionEvent]) -> tuple[dict[str, tuple], set[str]]:  # type: ignore[type-arg]
    """The job's own rule (logic.py) over the same log, corrections included."""
    by_user: dict[str, list[Event]] = {}
    for event_id, user_id, page, event_time_ms, segment in events:
        by_user.setdefault(user_id, []).append(Event(event_id, event_time_ms, page, segment))
    sessions: dict[str, tuple] = {}  # type: ignore[type-arg]
    late: set[str] = set()
    for user, own in by_user.items():
        changes = sessionize(user, UserState(), own)
        for s in (*changes.upserts, *changes.finals):  # one batch: a session is written once, final or not
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
    events = _in_log_order(clicks)
    seen: set[str] = set()
    with Registry(stack.registry) as registry:
        encoder = AvroEncoder(registry, value_subject(source.name), topic_value_schema(stack.schemas_path, source))
        records = []
        for event_id, user_id, page, event_time_ms, segment in events:
            click = Click(event_id, user_id, page, None, event_time_ms)
            version = 2 if event_id in seen else 1  # a correction carries the late profile's version
            seen.add(event_id)
            value = click.as_avro() | {"profile_version": version, "segment": segment, "country": "DE"}
            records.append(
                Outgoing(event_id.encode(), encoder.encode(value), partition=partition_for(user_id, source.partitions))
            )
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
    changes = [(r.kafka_partition, r.kafka_offset, r.key, (_values(r), r.final)) for r in decoded.records.collect()]
    changes += [(r.kafka_partition, r.kafka_offset, r.key, None) for r in decoded.tombstones.collect()]
    table: dict[str, tuple] = {}  # type: ignore[type-arg]
    final: set[str] = set()
    for _, _, key, change in sorted(changes, key=lambda c: (c[0], c[1])):  # log order per partition
        assert key not in final, f"a record of {key} after its final one"
        if change is None:
            table.pop(key, None)
        else:
            table[key] = change[0]
            final |= {key} if change[1] else set()
    generated = [(c.event_id, c.user_id, c.page, c.event_time_ms, _segment(c)) for c in clicks]
    settings = JOB.settings_as(Settings)
    gap, allowed = settings.gap_minutes * MINUTE_MS, settings.allowed_lateness_minutes * MINUTE_MS
    independent_sessions, independent_late = oracles.sessions(generated, gap, allowed)
    assert len(independent_sessions) > 100  # a real workload, not two empty dicts
    independent_sessions |= CORRECTED_SESSIONS  # the oracle has no corrections: those users' sessions by hand
    # The corrections happened where the rule says (fix-a's and fix-c's sessions took their first click's new
    # segment; fix-b's took its late earlier click's) and nowhere else (fix-a2's and fix-b1's changed nothing).
    assert {sid: table.get(sid) for sid in CORRECTED_SESSIONS} == CORRECTED_SESSIONS
    assert table == independent_sessions
    expected_sessions, expected_late = _expected(events)  # the rule itself says the same
    assert expected_sessions == independent_sessions
    # Each session the state forgot has its last record marked final, and no other.
    ends = [(sid, sid.split(":")[0], values[1]) for sid, values in independent_sessions.items()]
    independent_final = oracles.final_sessions(ends, events, gap, allowed)
    assert len(independent_final) > 50
    assert final == independent_final

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
