"""The README's `make demo` path: `kappa demo` on its own stack (own ports), start to finish, checked against
the test's own count: the clicks the seeded generator makes, the ones broken on purpose (read back from the
demo's `clicks` topic: those that are not a decodable click within the clicks contract), the rows of the
Delta table and the dead letters the jobs wrote. The demo runs with --keep, so that its stack and tables are
still there to be read; the test stops the stack and removes the demo's folder afterwards, as the demo does."""

import io
import shutil
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import fastavro
import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from deltalake import DeltaTable
from fastavro.types import Schema

from jobs.catalog import CLICKS
from jobs.clickstream.generator import Click, StreamConfig, clickstream
from kappa.contracts.dead_letter_format import H_JOB, H_SOURCE_OFFSET, H_SOURCE_PARTITION, H_SOURCE_TOPIC, dlq_topic
from kappa.contracts.schema_files import load
from kappa.core.settings import load_settings, project_root
from kappa.runtime.discovery import discover
from kappa.stack import LocalStack
from tests.e2e.stackctl import kappa

DEMO_PORTS = {"KAPPA_KAFKA_PORT": "26092", "KAPPA_CONTROLLER_PORT": "26192", "KAPPA_REGISTRY_PORT": "26081"}
EVENTS, MALFORMED_SHARE = 3000, 0.02
CLICK_READERS = {"raw_clicks", "enrich_clicks", "enrich_clicks_realtime"}  # the demo's jobs that read clicks
ROOT = project_root() or Path.cwd()  # the checkout (the tests run in one)
DEMO_DIR = ROOT / ".state" / "demo"  # where `kappa demo` works (its state folder is the checkout's)


@dataclass(frozen=True)
class Record:
    partition: int
    offset: int
    key: str
    value: bytes | None
    headers: dict[str, str]


def read_topic(bootstrap: str, topic: str) -> list[Record]:
    """Every record of the topic, with a plain consumer (the platform's readers are not used)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-demo", "enable.auto.commit": False,
                         "enable.partition.eof": True, "log_level": 0})  # fmt: skip
    try:
        partitions = consumer.list_topics(topic, timeout=15).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        found: list[Record] = []
        ended: set[int] = set()
        while len(ended) < len(partitions):
            message = consumer.poll(15)
            assert message is not None, f"timed out reading {topic}"
            error = message.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                ended.add(message.partition() or 0)
                continue
            raw = message.headers() or []
            pairs = raw.items() if isinstance(raw, dict) else raw
            headers = {k: v.decode() if isinstance(v, bytes) else str(v) for k, v in pairs}
            key = bytes(message.key() or b"").decode()
            found.append(Record(message.partition() or 0, message.offset() or 0, key, message.value(), headers))
        return found
    finally:
        consumer.close()


def a_good_click(value: bytes | None, schema: Schema) -> bool:
    """A Confluent-framed Avro click (magic byte 0, a 4-byte schema id, the body and nothing more) within the
    clicks contract (schemas/expectations/clicks.json), restated here."""
    if value is None or len(value) < 5 or value[0] != 0:
        return False
    body = io.BytesIO(value[5:])
    try:
        click = fastavro.schemaless_reader(body, schema)
    except Exception:  # a truncated or garbled body
        return False
    if body.tell() != len(value) - 5 or not isinstance(click, dict):
        return False
    return (
        len(click["event_id"]) >= 1
        and len(click["user_id"]) >= 1
        and click["page"].startswith("/")
        and (click["referrer"] is None or click["referrer"].startswith("/"))
        and click["event_time"] >= datetime(2000, 1, 1, tzinfo=UTC)
    )


def delta_table(name: str) -> DeltaTable:
    """The demo's table: its only version (the demo runs each job's declared version)."""
    [version] = sorted((DEMO_DIR / "delta" / name).glob("v*"))
    return DeltaTable(str(version))


@pytest.fixture
def demo_left_running() -> Iterator[None]:
    """The demo's stack and folder, left by --keep, stopped and removed however the test ends."""
    yield
    settings = load_settings(kafka_port=26092, controller_port=26192, registry_port=26081,
                             stack_dir=DEMO_DIR / "stack")  # fmt: skip
    LocalStack(settings).down(purge=True)
    shutil.rmtree(DEMO_DIR, ignore_errors=True)


@pytest.mark.timeout(1200)
@pytest.mark.usefixtures("demo_left_running")
def test_demo_runs_the_pipeline_and_reconciles() -> None:
    run = kappa(
        "demo", "--events", str(EVENTS), "--malformed-share", str(MALFORMED_SHARE), "--keep",
        env=DEMO_PORTS, timeout=900,
    )  # fmt: skip
    assert run.code == 0, run.err[-3000:]

    # What went in: the seeded generator's clicks (users as the demo sizes them), each once in the topic.
    config = StreamConfig(events=EVENTS, users=max(20, EVENTS // 100), malformed_share=MALFORMED_SHARE)
    generated = [e.record.event_id for e in clickstream(config) if isinstance(e.record, Click)]
    assert len(generated) == EVENTS
    bootstrap = f"127.0.0.1:{DEMO_PORTS['KAPPA_KAFKA_PORT']}"
    sent = read_topic(bootstrap, CLICKS.name)
    assert sorted(r.key for r in sent) == sorted(generated)
    schema = fastavro.parse_schema(load(ROOT / "schemas" / "clicks.avsc"))
    bad = {(r.partition, r.offset): r.key for r in sent if not a_good_click(r.value, schema)}
    good = {r.key for r in sent} - set(bad.values())
    assert 0 < len(bad) < 150  # about 2 % broken on purpose

    # What came out: every good click is one row of raw_clicks; every bad one a dead letter of each job reading
    # clicks, once per job.
    rows = delta_table("raw_clicks").to_pyarrow_table(columns=["event_id"]).column("event_id").to_pylist()
    assert sorted(rows) == sorted(good)
    letters = read_topic(bootstrap, dlq_topic(CLICKS.name))
    assert {r.headers[H_SOURCE_TOPIC] for r in letters} == {CLICKS.name}
    reported = Counter((r.headers[H_JOB], int(r.headers[H_SOURCE_PARTITION]), int(r.headers[H_SOURCE_OFFSET]))
                       for r in letters)  # fmt: skip
    assert set(reported.values()) == {1}
    assert set(reported) == {(job, *position) for job in CLICK_READERS for position in bad}
    dead = {(partition, offset) for _job, partition, offset in reported}
    assert len(sent) == EVENTS == len(rows) + len(dead)

    # The demo's own summary says the same.
    assert f"reconciled: {EVENTS} in = {len(rows)} in Delta + {len(dead)} dead-lettered" in run.out, run.out
    for job in ("enrich_clicks", "sessionize", "page_stats", "user_activity", "sessions_table", "raw_clicks"):
        assert f"{job} v{discover()[job].version} -> " in run.out, job  # each job's declared version
    sessions = len(delta_table("sessions").to_pyarrow_table(columns=["session_id"]))
    assert sessions > 30
    assert f"sessions: {sessions}, " in run.out
    assert "users by segment (user_activity):" in run.out
    views = Counter(r["page"] for r in delta_table("raw_clicks").to_pyarrow_table(columns=["page"]).to_pylist())
    [(head, _n)] = views.most_common(1)
    assert head == "/page/0000"  # the Zipf head is the most viewed page
    assert f"        {head:<14} " in run.out.split("Top pages", 1)[1].splitlines()[1]  # and the demo's top one
    assert "stack left running" in run.out
