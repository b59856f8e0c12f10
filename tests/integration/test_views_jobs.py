"""The three materialized-view jobs on the real stack: many small batches and one catch-up batch give the same
Delta tables, row for row, and both equal the rule computed in plain Python over the produced records."""

from __future__ import annotations

import dataclasses
import random
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable as DeltaRsTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.catalog import CLICKS
from jobs.clickstream.generator import Click, StreamConfig, clickstream
from jobs.page_stats.declaration import JOB as PAGE_STATS
from jobs.sessions_table.declaration import JOB as SESSIONS_TABLE
from jobs.user_activity.declaration import JOB as USER_ACTIVITY
from kappa.contracts.avro_serde import AvroEncoder
from kappa.contracts.registry import Registry, value_subject
from kappa.contracts.schema_files import topic_value_schema
from kappa.contracts.topic_declarations import Topic
from kappa.core.settings import KappaSettings
from kappa.kafka.clients import Outgoing, admin_client, produce_all
from kappa.kafka.partitioning import partition_for
from kappa.kafka.topic_admin import apply
from kappa.ops import duckdb_delta
from kappa.runtime import DeltaTable, JobSpec
from kappa.runtime.binding import deployment_topics
from kappa.runtime.runner import run_job

MIN = 60_000
HOUR = 60 * MIN
GAP_MS = 30 * MIN
SEGMENTS = ("FREE", "TRIAL", "PRO", "ENTERPRISE")
Rows = list[tuple[Any, ...]]


def _ms(t: datetime) -> int:
    return int(t.astimezone(UTC).timestamp() * 1000)


def _at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def _encoder(stack: KappaSettings, topic: Topic) -> AvroEncoder:
    with Registry(stack.registry) as registry:
        return AvroEncoder(registry, value_subject(topic.name), topic_value_schema(stack.schemas_path, topic))


def _run_twice(
    job: JobSpec, stack: KappaSettings, spark: SparkSession, tmp_path: Path, small_batches: int, min_batches: int
) -> tuple[Rows, Rows, str]:
    """The job over the same input as many small batches and as one catch-up batch: both tables' rows, sorted."""
    tables = []
    apply(admin_client(stack), deployment_topics(job, job.version))
    for name, max_offsets in (("small", small_batches), ("one", None)):
        settings = stack.model_copy(
            update={"checkpoint_root": str(tmp_path / f"cp-{name}"), "delta_root": str(tmp_path / f"delta-{name}")}
        )
        report = run_job(job, settings, available_now=True, max_offsets_per_trigger=max_offsets)
        batches = report.batches[f"{job.name}_v{job.version}"]
        assert batches >= min_batches if max_offsets else batches == 1
        assert isinstance(job.output, DeltaTable)
        tables.append(job.output.path(settings, job.version))
    small, one = (_rows(spark, path) for path in tables)
    return small, one, tables[0]


def _rows(spark: SparkSession, path: str) -> Rows:
    df = spark.read.format("delta").load(path)
    columns = [F.unix_millis(c.name).alias(c.name) if c.dataType.typeName() == "timestamp" else c.name for c in
               df.schema]  # fmt: skip
    return sorted(tuple(r) for r in df.select(*columns).collect())


# --- page_stats ---------------------------------------------------------------------------------------------------


def _enriched_log(seed: int) -> list[tuple[Click, str]]:
    """Enriched clicks in log order, some late (they change a predecessor's time on page) and 8% re-emitted later
    under the same event id with another segment (what enrich_clicks does when a late profile changes the answer)."""
    config = StreamConfig(events=1200, users=25, pages=12, seed=seed, late_share=0.05, late_by_ms=20 * MIN)
    clicks = [e.record for e in clickstream(config) if isinstance(e.record, Click)]
    rng = random.Random(seed)
    placed: list[tuple[float, Click, str]] = []
    for i, click in enumerate(clicks):
        placed.append((i, click, "FREE"))
        if rng.random() < 0.08:  # re-emitted after up to 200 more clicks
            placed.append((i + rng.randrange(1, 200) + 0.5, click, rng.choice(SEGMENTS)))
    return [(click, segment) for _, click, segment in sorted(placed, key=lambda p: p[0])]


def _expected_page_stats(log: list[tuple[Click, str]]) -> Rows:
    latest = {c.event_id: c for c, _ in log}  # one row per event id
    by_user: dict[str, list[Click]] = defaultdict(list)
    for c in latest.values():
        by_user[c.user_id].append(c)
    groups: dict[tuple[str, int], list[tuple[str, int | None]]] = defaultdict(list)
    for clicks in by_user.values():
        clicks.sort(key=lambda c: (c.event_time_ms, c.event_id))
        for c, following in zip(clicks, [*clicks[1:], None], strict=True):
            gap = following.event_time_ms - c.event_time_ms if following else None
            on_page = gap if gap is not None and gap <= GAP_MS else None
            groups[(c.page, c.event_time_ms - c.event_time_ms % HOUR)].append((c.user_id, on_page))
    rows = []
    for (page, hour), views in groups.items():
        times = sorted(t for _, t in views if t is not None)
        n = len(times)
        median = None if n == 0 else times[n // 2] if n % 2 else (times[n // 2 - 1] + times[n // 2]) // 2
        rows.append((page, hour, len(views), len({u for u, _ in views}), median))
    return sorted(rows)


@pytest.mark.slow
def test_page_stats_is_exact_whatever_the_batches(
    stack: KappaSettings, spark: SparkSession, avro_topic: Callable[..., Topic], tmp_path: Path
) -> None:
    # as many partitions as clicks, as page_stats requires (its stamps are per clicks partition; these records
    # have none, written as before enrich_clicks v2: never late, nothing forgotten)
    source = avro_topic("enriched", value_schema="enriched_clicks.avsc", partitions=CLICKS.partitions)
    log = _enriched_log(seed=23)
    encoder = _encoder(stack, source)
    records = [
        Outgoing(
            c.event_id.encode(),
            encoder.encode(c.as_avro() | {"profile_version": 1, "segment": segment, "country": "DE"}),
            partition=partition_for(c.user_id, source.partitions),
            timestamp_ms=c.event_time_ms,
        )
        for c, segment in log
    ]
    produce_all(stack, source.name, records)
    expected = _expected_page_stats(log)
    assert len(log) - len({c.event_id for c, _ in log}) > 50  # re-emitted clicks
    assert sum(1 for row in expected if row[4] is not None) > 20  # hours with a time on page

    job = dataclasses.replace(PAGE_STATS, inputs=(source,))
    small, one, path = _run_twice(job, stack, spark, tmp_path, small_batches=250, min_batches=5)
    assert small == one
    assert small == expected

    # Downstream readers see the same table: delta-rs and DuckDB (with the Delta extension from its wheel).
    by_delta_rs = sorted(
        (r["page"], _ms(r["hour_start"]), r["views"], r["distinct_users"], r["median_time_on_page_ms"])
        for r in DeltaRsTable(path).to_pyarrow_table().to_pylist()
    )
    with duckdb_delta.connect() as con:
        by_duckdb = sorted(
            con.execute(
                "SELECT page, epoch_ms(hour_start), views, distinct_users, median_time_on_page_ms "
                f"FROM delta_scan('{path}')"
            ).fetchall()
        )
    assert by_delta_rs == expected
    assert by_duckdb == expected


# --- sessions_table and user_activity -----------------------------------------------------------------------------


def _sessions_log(seed: int) -> list[tuple[str, str, dict[str, Any] | None]]:
    """(session id, user, value or None for a tombstone) in log order: sessions grow in 1-3 upserts, a quarter of
    them are tombstoned (merged away) afterwards; the sessions' changes interleave."""
    rng = random.Random(seed)
    base = _ms(datetime(2026, 1, 1, tzinfo=UTC))
    timed: list[tuple[int, int, str, str, dict[str, Any] | None]] = []
    for n in range(160):
        user = f"user-{rng.randrange(20):05d}"
        sid = f"{user}:evt-{n:05d}"
        start = base + rng.randrange(3 * 24 * 60) * MIN
        end, clicks, log_time = start, 0, rng.randrange(10_000)
        for _ in range(rng.randint(1, 3)):
            end += rng.randrange(1, 20) * MIN
            clicks += rng.randint(1, 5)
            value = {
                "session_id": sid,
                "user_id": user,
                "start_time": _at(start),
                "end_time": _at(end),
                "clicks": clicks,
                "distinct_pages": min(clicks, 3),
                "entry_page": "/page/0001",
                "exit_page": f"/page/{clicks:04d}",
                "segment": rng.choice(SEGMENTS),
            }
            timed.append((log_time, len(timed), sid, user, value))
            log_time += rng.randrange(1, 3_000)
        if rng.random() < 0.25:
            timed.append((log_time, len(timed), sid, user, None))
    return [(sid, user, value) for _, _, sid, user, value in sorted(timed)]


def _current(log: list[tuple[str, str, dict[str, Any] | None]]) -> dict[str, dict[str, Any]]:
    state: dict[str, dict[str, Any]] = {}
    for sid, _, value in log:  # a key's changes share one partition: production order is its log order
        if value is None:
            state.pop(sid, None)
        else:
            state[sid] = value
    return state


def _expected_sessions(state: dict[str, dict[str, Any]]) -> Rows:
    fields = ("session_id", "user_id", "start_time", "end_time", "clicks", "distinct_pages", "entry_page",
              "exit_page", "segment")  # fmt: skip
    return sorted(tuple(_ms(v[f]) if isinstance(v[f], datetime) else v[f] for f in fields) for v in state.values())


def _expected_user_activity(state: dict[str, dict[str, Any]]) -> Rows:
    by_user: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for v in state.values():
        by_user[v["user_id"]].append(v)
    return sorted(
        (
            user,
            len(sessions),
            sum(s["clicks"] for s in sessions),
            min(_ms(s["start_time"]) for s in sessions),
            max(_ms(s["end_time"]) for s in sessions),
            max(sessions, key=lambda s: (s["start_time"], s["session_id"]))["segment"],
        )
        for user, sessions in by_user.items()
    )


@pytest.mark.slow
def test_session_views_follow_upserts_and_tombstones(
    stack: KappaSettings, spark: SparkSession, avro_topic: Callable[..., Topic], tmp_path: Path
) -> None:
    source = avro_topic("sessions", value_schema="sessions.avsc", partitions=3)
    log = _sessions_log(seed=31)
    encoder = _encoder(stack, source)
    records = [
        Outgoing(
            sid.encode(),
            None if value is None else encoder.encode(value),
            partition=partition_for(user, source.partitions),
        )
        for sid, user, value in log
    ]
    broken = [Outgoing(b"broken-1", b"\x01garbage", partition=0), Outgoing(b"broken-2", b"\x00\x00", partition=1)]
    produce_all(stack, source.name, records + broken)
    state = _current(log)
    tombstones = sum(1 for _, _, v in log if v is None)
    assert tombstones > 20
    assert 0 < len(state) < 160

    sessions_small, sessions_one, _ = _run_twice(
        dataclasses.replace(SESSIONS_TABLE, inputs=(source,)), stack, spark, tmp_path / "sessions", 60, min_batches=5
    )
    # Tombstones are deletes, not dead letters: only the two broken values reached the dead-letter topic.
    dead = spark.read.format("kafka").option("kafka.bootstrap.servers", stack.bootstrap)
    dead = dead.option("subscribe", f"{source.name}.dlq").load()
    assert sorted(r.key for r in dead.collect()) == [b"broken-1", b"broken-1", b"broken-2", b"broken-2"]
    assert sessions_small == sessions_one
    assert sessions_small == _expected_sessions(state)

    activity_small, activity_one, _ = _run_twice(
        dataclasses.replace(USER_ACTIVITY, inputs=(source,)), stack, spark, tmp_path / "activity", 60, min_batches=5
    )
    assert activity_small == activity_one
    assert activity_small == _expected_user_activity(state)
