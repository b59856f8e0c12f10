"""The Kappa promise: for one generated input, a live run (every job running at once, each killed inside one of
its batches and restarted) and one availableNow replay from the start both equal an answer computed without the
code under test, for every output: the two topics (as the latest value per key, what a compacted topic's
readers see), the three Delta tables row for row, the late records' side topics and the dead-letter topics.

The independent answer (tests/oracles.py: set-based DuckDB SQL restating each rule from its documentation) is
computed from the generator's own records, never from what a job wrote: the as-of enrichment from the clicks and
profile versions as generated, sessions and late clicks from each user's clicks in the order they were produced
with their enriched segment, page_stats from the clicks, user_activity and the sessions table from the sessions.
Dead letters: undecodable records the test puts into every job's inputs, each known by its position; each must
come back as a dead letter of that job, once in the replay and at least once live (a batch run again after a
crash sends its side records again), and nothing else may.

Live: all five jobs run continuously in one process, as the job host runs deployments (one Spark application,
each job a query of its own with a freshness of 2 seconds: a batch every second, so many batches wherever the
clicks fall), while the generator produces (so clicks, late profile versions and enrich_clicks' corrections reach
each job interleaved, as in production). The process dies by SIGKILL five times, each time at a fault point inside
a batch of the next job in pipeline order (kappa.runtime.faults: the topic jobs after their Kafka write and before
the checkpoint knows, so the batch runs again; page_stats and the sessions table between a view's two writes, its
dead letters sent and its table not merged; user_activity after its merge), and every other job dies with it
wherever it is, as with a lost machine; each start resumes every job from its checkpoint and gets the next slice
of the log's first half. The second half comes once the last start's enrich_clicks has caught up, so it is read as
it is produced. Then the jobs are stopped in pipeline order, each when it has read its inputs to their end.
Replay: each job in one availableNow run into its own outputs.

Size: KAPPA_TEST_PROMISE_EVENTS clicks (CI's default below); `make soak` runs 200,000. The generator spreads them
over len(KILLS) * CHUNK_S + LIVE_PART_S seconds at most, so the live jobs see many batches whatever the size.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from fastavro import parse_schema, schemaless_reader
from pyspark.sql import DataFrame, Row, SparkSession

from jobs.catalog import CLICKS, ENRICHED_CLICKS, SESSIONS, USER_PROFILES
from jobs.clickstream.generator import START, Click, Emission, ProfileVersion, StreamConfig, clickstream
from jobs.clickstream.produce import generate
from jobs.enrich_clicks.declaration import JOB as ENRICH
from jobs.enrich_clicks.declaration import Settings as EnrichSettings
from jobs.page_stats.declaration import JOB as PAGE_STATS
from jobs.page_stats.declaration import Settings as PageStatsSettings
from jobs.sessionize.declaration import JOB as SESSIONIZE
from jobs.sessionize.declaration import Settings as SessionizeSettings
from jobs.sessions_table.declaration import JOB as SESSIONS_TABLE
from jobs.user_activity.declaration import JOB as USER_ACTIVITY
from kappa.contracts.avro_serde import AvroEncoder
from kappa.contracts.dead_letter_format import (
    H_JOB,
    H_KIND,
    H_SOURCE_OFFSET,
    H_SOURCE_PARTITION,
    H_SOURCE_TOPIC,
    DeadLetterKind,
)
from kappa.contracts.registry import Registry, value_subject
from kappa.contracts.schema_files import topic_value_schema
from kappa.contracts.topic_declarations import MINUTE_MS, Topic, dead_letters_of, late_events_of
from kappa.core.settings import KappaSettings
from kappa.kafka.clients import Outgoing, admin_client, produce_all
from kappa.kafka.partitioning import partition_for
from kappa.kafka.reading import whole_topic
from kappa.kafka.topic_admin import apply
from kappa.operators.page_stats import SETTLED
from kappa.runtime import DeltaTable, JobSpec
from kappa.runtime.faults import KILL_AT, FaultPoint
from kappa.runtime.outputs import output_of
from kappa.runtime.runner import run_job
from kappa.spark.compacted import latest_per_key
from tests import oracles
from tests.environment import stack_env
from tests.waiting import wait_until

EVENTS = int(os.environ.get("KAPPA_TEST_PROMISE_EVENTS", "8000"))
# About 25 clicks per user whatever the size. Late clicks arrive 150 min late: beyond sessionize's allowed
# lateness (120), so `.late` is exercised too.
CONFIG = StreamConfig(
    events=EVENTS, users=max(100, EVENTS // 25), seed=31, late_share=0.01, late_by_ms=150 * 60_000,
    profile_change_share=0.02,
)  # fmt: skip
SCALE = max(1.0, EVENTS / 50_000)  # waits grow with the size of the run
# The log reaches the live jobs in two parts: the first while they start and are killed and restarted, the
# second over LIVE_PART_S once the restarted enrich_clicks has caught up, so that it reads clicks and late profile
# versions as they are produced (a version after the clicks it corrects: the correction path runs). One part only
# was a backlog on a slow machine: after its restart the job read all the remaining profiles in its first batch,
# ahead of the clicks, and re-emitted nothing.
SPLIT = EVENTS // 2  # emissions (clicks and profile versions) in the first part
LIVE_PART_S = 40.0
# The rules' parameters, as the jobs declare them (the answer's inputs, not its code).
LATENESS_MS = ENRICH.settings_as(EnrichSettings).profile_lateness_minutes * MINUTE_MS
DISORDER_MS = ENRICH.settings_as(EnrichSettings).disorder_minutes * MINUTE_MS
GAP_MS = SESSIONIZE.settings_as(SessionizeSettings).gap_minutes * MINUTE_MS
ALLOWED_MS = SESSIONIZE.settings_as(SessionizeSettings).allowed_lateness_minutes * MINUTE_MS
PAGE_GAP_MS = PAGE_STATS.settings_as(PageStatsSettings).gap_minutes * MINUTE_MS
PAGE_LATENESS_MS = PAGE_STATS.settings_as(PageStatsSettings).lateness_minutes * MINUTE_MS
# The jobs after enrich_clicks, in pipeline order; each reads what the one before produced.
DOWNSTREAM = (SESSIONIZE, PAGE_STATS, USER_ACTIVITY, SESSIONS_TABLE)
PIPELINE = (ENRICH, *DOWNSTREAM)
# Where the host dies, at each of its starts: in which job's batch, at which point, and the how-manieth such batch
# of that job in this start of the host (kappa.runtime.faults). After writes: the second batch (a job's batches run
# when its inputs grew: the part of the log produced in this start, and the poison that drips into the live topics).
# Between writes: the first batch with table rows.
KILLS = (
    (ENRICH, FaultPoint.AFTER_WRITES, 2),  # in Kafka, not in the checkpoint: the batch runs again
    (SESSIONIZE, FaultPoint.AFTER_WRITES, 2),
    (PAGE_STATS, FaultPoint.BETWEEN_WRITES, 1),  # its dead letters sent, its table not merged
    (USER_ACTIVITY, FaultPoint.AFTER_WRITES, 2),  # merged, not in the checkpoint: Delta skips the batch id
    (SESSIONS_TABLE, FaultPoint.BETWEEN_WRITES, 1),
)
CHUNK_S = 6.0  # each start of the host gets a slice of the log's first part, over this long
EDGE_HOUR = (int(START.timestamp() * 1000) + 2 * 3_600_000) // 3_600_000 * 3_600_000
# A value no decoder accepts: its first byte is not the Confluent wire format's magic byte (0).
POISON = b"\x07not an Avro record of any registered schema"


def _edges() -> list[Emission]:
    """A few users whose data sits on the rules' boundaries, to the millisecond, in log order: a rule off by one
    (a gap, an allowed lateness or a visibility compared with < instead of <=) changes an output. The generated
    data alone never comes within a minute of them."""
    t0 = int(START.timestamp() * 1000) + 2 * 3_600_000
    first = int(START.timestamp() * 1000) - MINUTE_MS  # every edge user's first version, valid from the start

    def click(event_id: str, user: str, at: int) -> Emission:
        return Emission(at, Click(f"edge-{event_id}", f"edge-{user}", f"/edge/{event_id}", None, at))

    def version(user: str, number: int, segment: str, valid_from: int, published: int) -> Emission:
        return Emission(published, ProfileVersion(f"edge-{user}", number, segment, "DE", valid_from))

    return [
        version("gap", 1, "FREE", first, t0 - 1000),
        click("g1", "gap", t0),
        click("g2", "gap", t0 + GAP_MS),  # exactly the gap after g1: the same session, g1's time on page
        click("g3", "gap", t0 + 2 * GAP_MS + 1),  # 1 ms more than the gap after g2: a session of its own
        version("late", 1, "FREE", first, t0 - 1000),
        click("l1", "late", t0 + ALLOWED_MS + 10 * MINUTE_MS),
        click("l2", "late", t0 + 10 * MINUTE_MS),  # exactly the allowed lateness behind l1: accepted
        click("l3", "late", t0 + 10 * MINUTE_MS - 1),  # 1 ms more: late
        version("asof", 1, "FREE", first, t0 - 1000),
        click("a1", "asof", t0),
        click("a2", "asof", t0 + MINUTE_MS),
        version("asof", 2, "PRO", t0, t0 + LATENESS_MS),  # valid from a1's time, published L after it: a1's
        version("asof", 3, "TRIAL", t0 + MINUTE_MS, t0 + MINUTE_MS + LATENESS_MS + 1),  # 1 ms too late for a2
    ]


EDGES = _edges()
EDGE_CLICKS = sum(1 for e in EDGES if isinstance(e.record, Click))
SESSION_FIELDS = ("session_id", "start_time", "end_time", "clicks", "distinct_pages", "entry_page", "exit_page",
                  "segment")  # fmt: skip


class Host:
    """The pipeline's jobs in one process, as the job host runs them (one Spark application), its output lines
    collected as they come."""

    def __init__(
        self, jobs: tuple[JobSpec, ...], bindings: dict[str, str], env: dict[str, str], log_file: Path
    ) -> None:
        # A batch every second, views too: many batches, each cut where the clicks happen to be.
        command = [sys.executable, "-m", "tests.integration.pipeline_driver", ",".join(j.name for j in jobs),
                   json.dumps(bindings), "--freshness", "2 seconds"]  # fmt: skip
        # Its own process group: once the host's Python is dead, its JVM goes too (killed_by_its_fault_point).
        self.process = subprocess.Popen(command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True, start_new_session=True)  # fmt: skip
        self.lines: queue.Queue[str] = queue.Queue()
        self.log: list[str] = []
        self.pump = threading.Thread(target=self._pump, args=(log_file,), daemon=True)
        self.pump.start()

    def _pump(self, log_file: Path) -> None:
        assert self.process.stdout is not None
        with log_file.open("w") as kept:  # the whole output, for a failure's reader
            for line in self.process.stdout:
                kept.write(line)
                kept.flush()
                self.log.append(line)
                self.lines.put(line)

    def wait_for(self, predicate: Callable[[str], bool], timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=1)
            except queue.Empty:
                if not self.pump.is_alive():  # the output ended, and every line of it was seen
                    break
                continue
            if predicate(line):
                return line
        raise AssertionError(f"no such line within {timeout_s:.0f} s; last output:\n{''.join(self.log[-30:])}")

    def started(self, jobs: tuple[JobSpec, ...], timeout_s: float, or_killed: bool = False) -> None:
        """Every job's query started (or, `or_killed`, the process met its fault point first)."""
        waiting = {f"query {j.name}_v{j.version} started" for j in jobs}
        deadline = time.monotonic() + timeout_s

        def news(line: str) -> bool:
            return any(w in line for w in waiting) or (or_killed and line.startswith("fault point:"))

        while waiting:
            line = self.wait_for(news, max(1.0, deadline - time.monotonic()))
            if line.startswith("fault point:"):
                self.lines.put(line)  # for killed_by_its_fault_point
                return
            waiting = {w for w in waiting if w not in line}

    def killed_by_its_fault_point(self, timeout_s: float) -> str:
        """The process killed itself at its armed fault point: -> the line that says where."""
        line = self.wait_for(lambda line: line.startswith("fault point: SIGKILL"), timeout_s)
        assert self.process.wait(timeout=60) == -signal.SIGKILL, "".join(self.log[-30:])
        # The JVM dies with it, as with a lost machine: alone, it would run on for a moment, its queries failing,
        # beside the next start of the host.
        self.kill()
        assert not [f for f in self.log if f.startswith("FAILED ")], "".join(self.log[-40:])  # no job ended early
        return line.strip()

    def kill(self) -> None:
        """Whatever is left of the process group (its JVM), at once."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=60)
        self.pump.join(timeout=30)  # the output ends with the group: every line is in the log
        assert self.process.stdin is not None
        with contextlib.suppress(OSError):
            self.process.stdin.close()

    def stop(self, job: JobSpec, timeout_s: float) -> None:
        """Stop one job after its current batch: its thread ends, the others run on."""
        assert self.process.stdin is not None
        self.process.stdin.write(f"stop {job.name}\n")
        self.process.stdin.flush()
        self.wait_for(lambda line: line.startswith(f"STOPPED {job.name} "), timeout_s)

    def finish(self, timeout_s: float) -> None:
        """Every job stopped: the process ends, with status 0."""
        code = self.process.wait(timeout=timeout_s)
        self.pump.join(timeout=30)  # the pump ends at the end of the output: every line is in the log
        assert not self.pump.is_alive(), "the host's output did not end with its process"
        assert code == 0, "".join(self.log[-40:])
        assert not [line for line in self.log if line.startswith("FAILED ")], "".join(self.log[-40:])


class Poison:
    """Undecodable records put into topics, each remembered by its position: the dead letters to expect."""

    def __init__(self, settings: KappaSettings) -> None:
        self.producer = Producer({"bootstrap.servers": settings.bootstrap, "enable.idempotence": True})
        self.sent: dict[str, set[tuple[int, int]]] = defaultdict(set)  # topic -> {(partition, offset)}
        self.failed: list[str] = []
        self._lock = threading.Lock()

    def into(self, topic: Topic, count: int) -> None:
        for _ in range(count):
            key = f"poison-{uuid.uuid4().hex[:8]}".encode()
            self.producer.produce(topic.name, key=key, value=POISON, on_delivery=self._delivered)
        assert self.producer.flush(30) == 0, f"poison for {topic.name} not delivered"
        assert not self.failed, self.failed

    def _delivered(self, error: object, message: object) -> None:
        if error is not None:
            self.failed.append(str(error))
            return
        with self._lock:
            self.sent[message.topic()].add((message.partition(), message.offset()))  # type: ignore[attr-defined]

    def of(self, *topics: Topic) -> set[tuple[str, int, int]]:
        return {(t.name, p, o) for t in topics for p, o in self.sent[t.name]}


class Record(NamedTuple):
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: dict[str, str]


def _size(settings: KappaSettings, topic: str) -> int:
    """The records a topic holds now (never compacted away in a test this short)."""
    consumer = Consumer({"bootstrap.servers": settings.bootstrap, "group.id": "probe-size"})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return sum(e - s for s, e in (consumer.get_watermark_offsets(TopicPartition(topic, p)) for p in partitions))
    finally:
        consumer.close()


def _records(settings: KappaSettings, topic: str) -> list[Record]:
    """Every record of a topic up to its end as it is now, read once. The topics read here are written without
    transactions and not compacted in a test this short, so every offset holds a record."""
    size = _size(settings, topic)
    found = [
        Record(int(m.partition() or 0), int(m.offset() or 0), m.key(), m.value(),
               {str(k): v.decode() if isinstance(v, bytes) else str(v) for k, v in m.headers() or []})
        for m in whole_topic(settings, topic)
    ]  # fmt: skip
    assert len(found) == size, f"{topic}: read {len(found)} of {size} records"
    return found


def _dead_letters(dead: list[Record], job: str, offsets: range) -> Counter[tuple[str, int, int]]:
    """(source topic, partition, offset) of the dead letters `job` wrote at those offsets of a dead-letter topic
    (`dead`, its records), each with the number of times it was written (a batch run again after a crash sends
    its side records again)."""
    return Counter(
        (r.headers[H_SOURCE_TOPIC], int(r.headers[H_SOURCE_PARTITION]), int(r.headers[H_SOURCE_OFFSET]))
        for r in dead
        if r.headers[H_JOB] == job and r.offset in offsets
    )


def _end_offset(settings: KappaSettings, topic: str) -> int:
    return _size(settings, topic)  # a dead-letter topic: one partition


def _caught_up(settings: KappaSettings, group: str, topics: list[Topic]) -> bool:
    """Whether the job version's recorded progress has reached the end of each input."""
    partitions = [TopicPartition(t.name, p) for t in topics for p in range(t.partitions)]
    request = ConsumerGroupTopicPartitions(group, partitions)
    admin = admin_client(settings)  # held: a client collected while its future is pending never answers
    committed = admin.list_consumer_group_offsets([request])[group].result(timeout=30)
    done = {(tp.topic, tp.partition): tp.offset for tp in committed.topic_partitions}
    consumer = Consumer({"bootstrap.servers": settings.bootstrap, "group.id": "probe-ends"})
    try:
        ends = {(tp.topic, tp.partition): consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in partitions}
    finally:
        consumer.close()
    return all(done.get(k, -1) >= end for k, end in ends.items())


def _ms(t: datetime | None) -> int | None:
    return None if t is None else int(t.astimezone(UTC).timestamp() * 1000)  # pyspark: naive local time


def _same(actual: Mapping[Any, Any], expected: Mapping[Any, Any], what: str) -> None:
    """Equal mappings, the differences named."""
    missing = {k: v for k, v in expected.items() if actual.get(k, KeyError) != v}
    extra = [k for k in actual if k not in expected]
    differences = (
        f"{what}: {len(missing)} keys missing or different, {len(extra)} unexpected; "
        f"e.g. expected {list(missing.items())[:3]}, got {[(k, actual.get(k)) for k in list(missing)[:3]]}, "
        f"unexpected {[(k, actual[k]) for k in extra[:3]]}"
    )
    assert not missing, differences
    assert not extra, differences


def _produce_edges(settings: KappaSettings, clicks: Topic, profiles: Topic) -> None:
    """The edge users' records, in their log order, as the generator writes records (key, partition, time)."""
    with Registry(settings.registry) as registry:
        encoders = {t.name: AvroEncoder(registry, value_subject(t.name), topic_value_schema(settings.schemas_path, t),
                                        register=False) for t in (clicks, profiles)}  # fmt: skip
    for e in EDGES:
        r = e.record
        topic, key = (clicks, r.event_id) if isinstance(r, Click) else (profiles, r.user_id)
        value = encoders[topic.name].encode(r.as_avro())
        produce_all(settings, topic.name, [Outgoing(key.encode(), value, partition_for(r.user_id, topic.partitions),
                                                    timestamp_ms=e.log_time_ms)])  # fmt: skip


@pytest.fixture
def topics(avro_topic: Callable[..., Topic], stack: KappaSettings) -> dict[str, Topic]:
    made = {
        "clicks": avro_topic("clicks", value_schema="clicks.avsc", partitions=CLICKS.partitions),
        "profiles": avro_topic("profiles", value_schema="user_profiles.avsc", partitions=USER_PROFILES.partitions),
    }
    for run in ("live", "replay"):
        made[f"enriched_{run}"] = avro_topic(f"enriched-{run}", "enriched_clicks.avsc", ENRICHED_CLICKS.partitions)
        made[f"sessions_{run}"] = avro_topic(f"sessions-{run}", "sessions.avsc", SESSIONS.partitions)
    late = [late_events_of(t) for k, t in made.items() if k.startswith(("enriched", "sess"))]
    late += [output_of(j.output).late_events(j.version) for j in (PAGE_STATS, USER_ACTIVITY, SESSIONS_TABLE)]
    apply(admin_client(stack), late)
    return made


@pytest.fixture
def hosts() -> Iterator[list[Host]]:
    """The hosts a test starts: whatever a failed test left running is killed (the hosts have process groups of
    their own, out of reach of pytest's)."""
    started: list[Host] = []
    yield started
    for host in started:
        host.kill()


@pytest.mark.slow
@pytest.mark.timeout(int(1800 * SCALE))
def test_live_with_kills_inside_batches_and_replay_both_equal_the_independent_answer(
    stack: KappaSettings, spark: SparkSession, topics: dict[str, Topic], hosts: list[Host], tmp_path: Path
) -> None:
    def bindings(run: str) -> dict[str, str]:
        return {
            CLICKS.name: topics["clicks"].name,
            USER_PROFILES.name: topics["profiles"].name,
            ENRICHED_CLICKS.name: topics[f"enriched_{run}"].name,
            SESSIONS.name: topics[f"sessions_{run}"].name,
        }

    # Each click's partition stamp: the latest event time before it in its clicks partition, from the order the
    # clicks were produced in (the edges first), never from enriched_clicks' own order.
    produced = [e.record for e in [*EDGES, *clickstream(CONFIG)] if isinstance(e.record, Click)]
    stamps = oracles.partition_stamps(
        (c.event_id, partition_for(c.user_id, topics["clicks"].partitions), c.event_time_ms) for c in produced
    )
    answer = oracles.pipeline(
        [*clickstream(CONFIG), *EDGES],  # in log order: each user's clicks as they were produced
        lateness_ms=LATENESS_MS,
        disorder_ms=DISORDER_MS,
        gap_ms=GAP_MS,
        allowed_lateness_ms=ALLOWED_MS,
        page_gap_ms=PAGE_GAP_MS,
        page_lateness_ms=PAGE_LATENESS_MS,
        stamps=stamps,
    )
    assert len(answer.enriched) == EVENTS + EDGE_CLICKS
    # The edges, as the documented rules decide them (what makes a rule off by one fail here):
    assert answer.sessions["edge-gap:edge-g1"][3] == 2  # g1 and g2, exactly the gap apart
    assert "edge-gap:edge-g3" in answer.sessions
    assert "edge-l2" not in answer.late_clicks
    assert "edge-l3" in answer.late_clicks
    assert [answer.enriched[f"edge-{c}"][5] for c in ("a1", "a2")] == [2, 2]  # v2 visible to a1; v3 not to a2
    assert answer.page_stats[("/edge/g1", EDGE_HOUR)][2] == GAP_MS  # g1's time on page: exactly the gap
    assert answer.late_clicks, "the data must hold late clicks, or .late proves nothing"
    assert answer.late_page_clicks, "the data must hold clicks beyond page_stats' lateness"
    assert len(answer.sessions) > EVENTS // 20  # about one session per 13 clicks: a real workload
    assert len(answer.final_sessions) > 50, "sessions must end A + G before their users' last clicks"
    poison = Poison(stack)
    for name in ("clicks", "profiles", "enriched_replay", "sessions_replay"):  # the replay's come before it
        poison.into(topics[name], 3)
    _produce_edges(stack, topics["clicks"], topics["profiles"])

    live = stack.model_copy(update={"checkpoint_root": str(tmp_path / "live" / "cp"),
                                    "delta_root": str(tmp_path / "live" / "delta")})  # fmt: skip

    # (a) Live: every job at once in one host, as deployed, while the generator produces; the host dies once in a
    # batch of each job in turn (and every other job with it, wherever it was), and starts again from the jobs'
    # checkpoints.
    # One shuffle partition: one state store per stateful batch, at this size (the replay, in the test's session,
    # has two: the answer does not depend on how the keys are spread).
    env = stack_env(stack, KAPPA_CHECKPOINT_ROOT=str(tmp_path / "live" / "cp"),
                    KAPPA_DELTA_ROOT=str(tmp_path / "live" / "delta"), KAPPA_SPARK_SHUFFLE_PARTITIONS="1")  # fmt: skip
    # Poison drips into each live intermediate topic once its job has written to it, so the batches the views die
    # in carry dead letters too (the fault point's line counts them).
    stop_dripping = threading.Event()

    drip_failed: list[BaseException] = []

    def drip() -> None:
        dripping: set[str] = set()
        try:
            while not stop_dripping.wait(0.5):
                for name in ("enriched_live", "sessions_live"):
                    topic = topics[name]
                    if name in dripping or _size(stack, topic.name) > len(poison.sent[topic.name]):
                        dripping.add(name)
                        poison.into(topic, 1)
        except BaseException as exc:  # raised again in the test's thread
            drip_failed.append(exc)

    dripper = threading.Thread(target=drip, daemon=True)
    dripper.start()
    kills = []
    chunk = -(-SPLIT // len(KILLS))
    for i, (spec, point, number) in enumerate(KILLS):
        armed = env | {KILL_AT: f"{point}:{number}@{spec.name}_v{spec.version}"}
        host = Host(PIPELINE, bindings("live"), armed, tmp_path / f"host-{i + 1}.log")
        hosts.append(host)
        host.started(PIPELINE, timeout_s=300 * SCALE, or_killed=True)
        # This start's slice of the log's first part: the armed job's batches get rows while it runs.
        part = slice(i * chunk, min(SPLIT, (i + 1) * chunk))
        producer = threading.Thread(
            target=generate,
            args=(stack, CONFIG, topics["clicks"], topics["profiles"]),
            kwargs={"rate": chunk / CHUNK_S, "progress": None, "emissions": part},
        )
        producer.start()
        kills.append(host.killed_by_its_fault_point(timeout_s=600 * SCALE))
        producer.join(timeout=600 * SCALE)
        assert not producer.is_alive(), "the generator did not finish"
    print("\n".join(kills))  # where the host died: the test's log shows it
    for (spec, point, _number), line in zip(KILLS, kills, strict=True):
        assert f"at {point} of {spec.name}_v{spec.version}" in line, line
        if point is FaultPoint.BETWEEN_WRITES:  # a batch with table rows (only such batches count)
            assert not line.endswith(" 0 rows unwritten"), line
    host = Host(PIPELINE, bindings("live"), env, tmp_path / "host-last.log")
    hosts.append(host)
    host.started(PIPELINE, timeout_s=300 * SCALE)
    enrich_inputs = list(ENRICH.bound(bindings("live")).inputs)
    wait_until(
        lambda: _caught_up(stack, f"kappa.{ENRICH.name}.v{ENRICH.version}", enrich_inputs),
        timeout_s=900 * SCALE,
        what="the restarted enrich_clicks reads the first part of the log",
        log=host.log,
    )
    rest = generate(stack, CONFIG, topics["clicks"], topics["profiles"], rate=(EVENTS - SPLIT) / LIVE_PART_S,
                    progress=None, emissions=slice(SPLIT, None))  # fmt: skip
    assert rest.clicks > 0
    stop_dripping.set()
    dripper.join(timeout=60)
    assert not dripper.is_alive()
    if drip_failed:
        raise drip_failed[0]
    assert len(poison.sent[topics["enriched_live"].name]) > 10, "the drip ran while the jobs did"
    # Stopped in pipeline order, each once it has read its inputs to their end: then its output is final, and
    # so are the next job's inputs.
    for spec in PIPELINE:
        inputs = list(spec.bound(bindings("live")).inputs)
        group = f"kappa.{spec.name}.v{spec.version}"
        wait_until(
            lambda group=group, inputs=inputs: _caught_up(stack, group, inputs),  # type: ignore[misc]
            timeout_s=900 * SCALE,
            what=f"{spec.name} reads its inputs to their end",
            log=host.log,
        )
        host.stop(spec, timeout_s=180)
    host.finish(timeout_s=180)
    live_dead_letters_end = {
        t: _end_offset(stack, dead_letters_of(topics[t]).name) for t in ("clicks", "profiles")
    }  # enrich_clicks' live and replay runs share their inputs' dead-letter topics: the replay's come after

    # (b) Replay: each job once from the start, availableNow, into its own outputs.
    replay = stack.model_copy(update={"checkpoint_root": str(tmp_path / "replay" / "cp"),
                                      "delta_root": str(tmp_path / "replay" / "delta")})  # fmt: skip
    for spec in PIPELINE:
        run_job(spec.bound(bindings("replay")), replay, available_now=True)
    # Every topic is final from here: each is read once.
    records: Callable[[str], list[Record]] = functools.cache(functools.partial(_records, stack))

    # enriched_clicks: the latest value per event id, with its partition stamp (computed above).
    for run in ("live", "replay"):
        rows = latest_per_key(spark, stack, topics[f"enriched_{run}"]).collect()
        found = {r.event_id: (r.user_id, r.page, r.referrer, _ms(r.event_time), r.device, r.profile_version,
                              r.segment, r.country) for r in rows}  # fmt: skip
        assert len(rows) == len(found)  # one row per key
        _same(found, answer.enriched, f"enriched_clicks {run}")
        _same({r.event_id: (r.clicks_partition, _ms(r.partition_time_before)) for r in rows}, stamps,
              f"enriched_clicks {run}: partition stamps")  # fmt: skip
    # The live run did re-emit corrections (late profile versions), which the answer does not need.
    live_records = len(records(topics["enriched_live"].name)) - len(poison.sent[topics["enriched_live"].name])
    assert live_records > EVENTS, f"live enrich_clicks: {live_records:,} records for {EVENTS:,} clicks, no correction"

    # sessions: the latest value per session id; the late clicks, each set aside (by its key, the event id).
    for run in ("live", "replay"):
        rows = latest_per_key(spark, stack, topics[f"sessions_{run}"]).collect()
        found = {r.session_id: (r.user_id, _ms(r.start_time), _ms(r.end_time), r.clicks, r.distinct_pages,
                                r.entry_page, r.exit_page, r.segment) for r in rows}  # fmt: skip
        _same(found, answer.sessions, f"sessions {run}")
        final = {r.session_id for r in rows if r.final}
        assert final == answer.final_sessions, (
            f"sessions {run} final: {sorted(final - answer.final_sessions)[:5]} unexpected, "
            f"{sorted(answer.final_sessions - final)[:5]} missing"
        )
        # A late record holds the enriched record's bytes and, in its headers, where it was read: its event id
        # is that record's key.
        keys = {(r.partition, r.offset): r.key for r in records(topics[f"enriched_{run}"].name)}
        set_aside = Counter(
            (keys[(int(r.headers[H_SOURCE_PARTITION]), int(r.headers[H_SOURCE_OFFSET]))] or b"").decode()
            for r in records(late_events_of(topics[f"sessions_{run}"]).name)
        )
        late = set(set_aside)
        if run == "replay":  # no batch ran twice: each late click set aside once
            assert set(set_aside.values()) == {1}, f"sessions replay .late twice: {set_aside.most_common(3)}"
        assert late == answer.late_clicks, (
            f"sessions {run} .late: {len(late - answer.late_clicks)} unexpected "
            f"{sorted(late - answer.late_clicks)[:5]}, {len(answer.late_clicks - late)} missing"
        )

    # The Delta views, row for row.
    def table(spec: JobSpec, settings: KappaSettings) -> list[Row]:
        assert isinstance(spec.output, DeltaTable)
        frame: DataFrame = spark.read.format("delta").load(spec.output.path(settings, spec.version))
        return frame.collect()

    for run, settings in (("live", live), ("replay", replay)):
        page_rows = table(PAGE_STATS, settings)
        _same({(r.page, _ms(r.hour_start)): (r.views, r.distinct_users, r.median_time_on_page_ms)
               for r in page_rows}, answer.page_stats, f"page_stats {run}")  # fmt: skip
        assert len(page_rows) == len(answer.page_stats)
        # Its late clicks, by the event id of the enriched record each holds (its copies, `settled`, are held
        # byte for byte by the differential test).
        keys = {(r.partition, r.offset): r.key for r in records(topics[f"enriched_{run}"].name)}
        assert isinstance(PAGE_STATS.output, DeltaTable)
        page_late = [
            r for r in records(output_of(PAGE_STATS.output).late_events(PAGE_STATS.version).name)
            if r.headers[H_JOB] == PAGE_STATS.name and r.headers[H_SOURCE_TOPIC] == topics[f"enriched_{run}"].name
        ]  # fmt: skip
        late_pages = Counter(
            (keys[(int(r.headers[H_SOURCE_PARTITION]), int(r.headers[H_SOURCE_OFFSET]))] or b"").decode()
            for r in page_late
            if r.headers[H_KIND] == DeadLetterKind.LATE_EVENT
        )
        assert set(late_pages) == answer.late_page_clicks, (
            f"page_stats {run} .late: {sorted(set(late_pages) - answer.late_page_clicks)[:5]} unexpected, "
            f"{sorted(answer.late_page_clicks - set(late_pages))[:5]} missing"
        )
        if run == "replay":  # no batch ran twice: each late click set aside once
            assert set(late_pages.values()) == {1}, f"page_stats replay .late twice: {late_pages.most_common(3)}"
        assert {r.headers[H_KIND] for r in page_late} <= {DeadLetterKind.LATE_EVENT, SETTLED}
        activity_rows = table(USER_ACTIVITY, settings)
        _same({r.user_id: (r.sessions, r.clicks, _ms(r.first_seen), _ms(r.last_seen), r.segment)
               for r in activity_rows}, answer.user_activity, f"user_activity {run}")  # fmt: skip
        assert len(activity_rows) == len(answer.user_activity)  # one row per user
        session_rows = table(SESSIONS_TABLE, settings)
        _same({r.session_id: (r.user_id, _ms(r.start_time), _ms(r.end_time), r.clicks, r.distinct_pages,
                              r.entry_page, r.exit_page, r.segment)
               for r in session_rows}, answer.sessions, f"sessions table {run}")  # fmt: skip
        assert len(session_rows) == len(answer.sessions)

    # Dead letters: each job's, from each of its inputs, exactly the poison put there (a set: a batch run
    # again after its crash sends its side records again; `kappa dlq inspect` counts each once).
    for run in ("live", "replay"):
        for spec in PIPELINE:
            for declared in spec.inputs:
                name = next(k for k, t in topics.items() if t.name == bindings(run)[declared.name])
                shared = live_dead_letters_end.get(name)  # None: this run's input alone
                offsets = range(0, 2**62) if shared is None else range(0, shared) if run == "live" else range(
                    shared, 2**62)  # fmt: skip
                dead = _dead_letters(records(dead_letters_of(topics[name]).name), spec.name, offsets)
                assert poison.of(topics[name]), f"no poison in {name}: the check would prove nothing"
                assert set(dead) == poison.of(topics[name]), f"{spec.name} {run}: the dead letters of {name}"
                if run == "replay":  # no batch ran twice: each dead letter once
                    assert set(dead.values()) == {1}, f"{spec.name} replay: dead letters of {name} twice"

    # enrich_clicks' late profile versions (published after a click they apply to was settled): the same set.
    profile_schema = parse_schema(json.loads((Path(stack.schemas_path) / "user_profiles.avsc").read_text()))
    for run in ("live", "replay"):
        late_profiles = set()
        for r in records(late_events_of(topics[f"enriched_{run}"]).name):
            assert r.value is not None
            profile = schemaless_reader(io.BytesIO(r.value[5:]), profile_schema, None)  # the wire format's 5 bytes
            late_profiles.add((profile["user_id"], profile["profile_version"]))  # type: ignore[call-overload,index]
        assert late_profiles == answer.late_profiles, f"enriched_clicks {run} .late"
