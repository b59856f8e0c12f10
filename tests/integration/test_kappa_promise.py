"""The Kappa promise: for one generated input, a live run (every job running at once, each killed with SIGKILL
and restarted in the middle), one availableNow replay from the start, and a plain batch Spark computation give
identical outputs for every job. Kafka outputs are compared as the latest value per key (what a compacted
topic's readers see).

Live: all five jobs run continuously at once, each in its own process (each with a freshness of 2 seconds: a batch
every second, so many batches wherever the clicks fall), while the generator produces (so clicks, late profile versions
and enrich_clicks' corrections reach each job interleaved, as in production). Each job is killed with SIGKILL after
its second batch and restarted from its checkpoint while the first half of the log is produced; the second half
comes once the restarted enrich_clicks has caught up, so it is read as it is produced. Then the jobs are stopped in
pipeline order, each when it has read its inputs to their end. Replay: each job in one availableNow run into its own
outputs. Batch: enrich_clicks' and sessionize's own transforms over a batch read of their inputs (the JVM operators
of kappa.operators run the per-user rule once per user there); the Delta views' pure-Python rules
(jobs/page_stats/logic.py, jobs/user_activity/logic.py) over their input topics read in log order, and sessions as
the topic's latest value per key. Delta tables are compared row for row.

Size: KAPPA_TEST_PROMISE_EVENTS clicks (CI's default below); `make soak` runs 200,000. The generator spreads them
over PRODUCE_S + LIVE_PART_S seconds at most, so the live jobs see many batches whatever the size.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from jobs.catalog import CLICKS, ENRICHED_CLICKS, SESSIONS, USER_PROFILES
from jobs.enrich_clicks.declaration import JOB as ENRICH
from jobs.enrich_clicks.logic import MINUTE_MS
from jobs.enrich_clicks.transforms import ENRICHED, enriched_changes, union_inputs
from jobs.page_stats import logic as page_logic
from jobs.page_stats.declaration import JOB as PAGE_STATS
from jobs.sessionize.declaration import JOB as SESSIONIZE
from jobs.sessionize.transforms import LATE, UPSERT, session_changes
from jobs.sessions_table.declaration import JOB as SESSIONS_TABLE
from jobs.user_activity import logic as activity_logic
from jobs.user_activity.declaration import JOB as USER_ACTIVITY
from kappa.contracts.registry import Registry
from kappa.contracts.topic_declarations import Topic, late_events_of
from kappa.core.settings import KappaSettings
from kappa.kafka.clients import admin_client
from kappa.kafka.topic_admin import apply
from kappa.ops.clickstream import StreamConfig
from kappa.ops.produce_clickstream import generate
from kappa.runtime import DeltaTable, JobSpec
from kappa.runtime.runner import run_job
from kappa.spark.compacted import latest_per_key
from kappa.spark.topic_io import decode_topic, kafka_source, read_topic, value_schema, writer_schemas
from tests.environment import stack_env
from tests.waiting import wait_until

EVENTS = int(os.environ.get("KAPPA_TEST_PROMISE_EVENTS", "8000"))
# About 25 clicks per user whatever the size. Late clicks arrive 150 min late: beyond sessionize's allowed
# lateness (120), so `.late` is exercised too.
CONFIG = StreamConfig(
    events=EVENTS, users=max(100, EVENTS // 25), seed=31, late_share=0.01, late_by_ms=150 * 60_000,
    profile_change_share=0.02,
)  # fmt: skip
PRODUCE_S = 25.0  # the first half of the log over this long, at most (as fast as it can, for a large size)
SCALE = max(1.0, EVENTS / 50_000)  # waits grow with the size of the run
# The log reaches the live jobs in two parts: the first while they start and are killed and restarted, the
# second over LIVE_PART_S once the restarted enrich_clicks has caught up, so that it reads clicks and late profile
# versions as they are produced (a version after the clicks it corrects: the correction path runs). One part only
# was a backlog on a slow machine: after its restart the job read all the remaining profiles in its first batch,
# ahead of the clicks, and re-emitted nothing.
SPLIT = EVENTS // 2  # emissions (clicks and profile versions) in the first part
LIVE_PART_S = 40.0
ENRICHED_FIELDS = ("event_id", "user_id", "page", "referrer", "event_time", "device", "profile_version", "segment",
                   "country")  # fmt: skip
# The jobs after enrich_clicks, in pipeline order; each reads what the one before produced.
DOWNSTREAM = (SESSIONIZE, PAGE_STATS, USER_ACTIVITY, SESSIONS_TABLE)
PIPELINE = (ENRICH, *DOWNSTREAM)
SESSION_FIELDS = ("session_id", "user_id", "start_time", "end_time", "clicks", "distinct_pages", "entry_page",
                  "exit_page", "segment")  # fmt: skip


class Job:
    """A pipeline job in its own process, its output lines collected as they come."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        command = [sys.executable, "-m", "tests.integration.pipeline_driver", *args]
        self.process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        self.log: list[str] = []
        self.pump = threading.Thread(target=self._pump, daemon=True)
        self.pump.start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.log.append(line)
            self.lines.put(line)

    def wait_for(self, predicate: Callable[[str], bool], timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=1)
            except queue.Empty:
                if self.process.poll() is not None:
                    break
                continue
            if predicate(line):
                return line
        raise AssertionError(f"no such line within {timeout_s:.0f} s; last output:\n{''.join(self.log[-30:])}")

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        assert self.process.wait(timeout=60) == -signal.SIGKILL

    def finish(self, timeout_s: float) -> None:
        code = self.process.wait(timeout=timeout_s)
        self.pump.join(timeout=30)  # the pump ends at the end of the output: every line is in the log
        assert not self.pump.is_alive(), "the job's output did not end with its process"
        assert code == 0, "".join(self.log[-40:])

    def stop(self, timeout_s: float) -> None:
        """SIGTERM: the runner finishes its batch and exits 0."""
        self.process.send_signal(signal.SIGTERM)
        self.finish(timeout_s)


def _batch_line(query: str, at_least: int) -> Callable[[str], bool]:
    def matches(line: str) -> bool:
        marker = f"{query} batch "
        if marker not in line:
            return False
        number = line.split(marker, 1)[1].split(":", 1)[0]
        return number.isdigit() and int(number) >= at_least

    return matches


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


def _utc(ms: int | None) -> datetime | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, tz=UTC)


def _same_rows(a: DataFrame, b: DataFrame, what: str) -> None:
    """Equal as multisets of rows: each side read once (one Spark job), compared here with the differences named."""
    left, right = Counter(tuple(r) for r in a.collect()), Counter(tuple(r) for r in b.collect())
    missing, extra = left - right, right - left
    differences = (
        f"{what}: {sum(missing.values())} rows only on the left, {sum(extra.values())} only on the right; "
        f"e.g. {list(missing)[:3]} vs {list(extra)[:3]}"
    )
    assert not missing, differences
    assert not extra, differences


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
    apply(admin_client(stack), late)
    return made


@pytest.mark.slow
@pytest.mark.timeout(int(1800 * SCALE))
def test_live_with_sigkill_replay_and_batch_give_identical_outputs(
    stack: KappaSettings, spark: SparkSession, topics: dict[str, Topic], tmp_path: Path
) -> None:
    def bindings(run: str) -> dict[str, str]:
        return {
            CLICKS.name: topics["clicks"].name,
            USER_PROFILES.name: topics["profiles"].name,
            ENRICHED_CLICKS.name: topics[f"enriched_{run}"].name,
            SESSIONS.name: topics[f"sessions_{run}"].name,
        }

    live = stack.model_copy(update={"checkpoint_root": str(tmp_path / "live" / "cp"),
                                    "delta_root": str(tmp_path / "live" / "delta")})  # fmt: skip
    live_env = stack_env(stack, KAPPA_CHECKPOINT_ROOT=str(tmp_path / "live" / "cp"),
                         KAPPA_DELTA_ROOT=str(tmp_path / "live" / "delta"))  # fmt: skip

    # (a) Live: every job at once, as deployed, while the generator produces.
    def live_job(spec: JobSpec) -> Job:
        # The two topic jobs on 1 s, so corrections, merges and tombstones reach the views spread over many
        # batches; the Delta views on their declared trigger (a view batch is two MERGEs: back to back on a
        # 1 s trigger, they cost the machine more than they add batches to the test).
        # a batch every second, views too: many batches, each cut where the clicks happen to be
        return Job([spec.name, json.dumps(bindings("live")), "--freshness", "2 seconds"], live_env)

    jobs = {spec.name: live_job(spec) for spec in PIPELINE}
    for spec in PIPELINE:
        jobs[spec.name].wait_for(lambda line: "started" in line, timeout_s=300 * SCALE)
    producer = threading.Thread(
        target=generate,
        args=(stack, CONFIG, topics["clicks"], topics["profiles"]),
        kwargs={"rate": SPLIT / PRODUCE_S, "progress": None, "emissions": slice(0, SPLIT)},
    )
    producer.start()
    # Each job: SIGKILL after its second batch (its first one that started from a checkpoint), then a restart
    # from that checkpoint. Downstream jobs get their first rows only once enrich_clicks has written some.
    for spec in PIPELINE:
        jobs[spec.name].wait_for(_batch_line(f"{spec.name}_v{spec.version}", 1), timeout_s=600 * SCALE)
        jobs[spec.name].kill()
        jobs[spec.name] = live_job(spec)
    producer.join(timeout=600 * SCALE)
    assert not producer.is_alive(), "the generator did not finish"
    enrich_inputs = list(ENRICH.bound(bindings("live")).inputs)
    wait_until(
        lambda: _caught_up(stack, f"kappa.{ENRICH.name}.v{ENRICH.version}", enrich_inputs),
        timeout_s=900 * SCALE,
        what="the restarted enrich_clicks reads the first part of the log",
        log=jobs[ENRICH.name].log,
    )
    rest = generate(stack, CONFIG, topics["clicks"], topics["profiles"], rate=(EVENTS - SPLIT) / LIVE_PART_S,
                    progress=None, emissions=slice(SPLIT, None))  # fmt: skip
    assert rest.clicks > 0
    # Stopped in pipeline order, each once it has read its inputs to their end: then its output is final, and
    # so are the next job's inputs. Its queries run before it is asked to stop (a SIGTERM while Python still
    # imports would kill the restarted job instead of stopping it).
    for spec in PIPELINE:
        job = jobs[spec.name]
        job.wait_for(lambda line: "started" in line, timeout_s=300 * SCALE)
        inputs = list(spec.bound(bindings("live")).inputs)
        wait_until(
            lambda inputs=inputs, spec=spec: _caught_up(stack, f"kappa.{spec.name}.v{spec.version}", inputs),
            timeout_s=900 * SCALE,
            what=f"{spec.name} reads its inputs to their end",
            log=job.log,
        )
        job.stop(timeout_s=180)

    # (b) Replay: each job once from the start, availableNow, into its own outputs.
    replay = stack.model_copy(update={"checkpoint_root": str(tmp_path / "replay" / "cp"),
                                      "delta_root": str(tmp_path / "replay" / "delta")})  # fmt: skip
    run_job(ENRICH.bound(bindings("replay")), replay, available_now=True)
    for spec in DOWNSTREAM:
        run_job(spec.bound(bindings("replay")), replay, available_now=True)

    # (c) Plain batch: each job's transform over a batch read of the same input topics.
    def batch_read(topic: Topic) -> DataFrame:
        return read_topic(spark, stack, topic, job="batch", job_version=0, streaming=False, with_raw=True).records

    lateness = ENRICH.settings["profile_lateness_minutes"] * MINUTE_MS
    disorder = ENRICH.settings["disorder_minutes"] * MINUTE_MS
    enriched_batch = enriched_changes(
        union_inputs(batch_read(topics["clicks"]), batch_read(topics["profiles"])), lateness, disorder
    ).where(F.col("kind") == ENRICHED)
    gap = SESSIONIZE.settings["gap_minutes"] * MINUTE_MS
    allowed = SESSIONIZE.settings["allowed_lateness_minutes"] * MINUTE_MS
    session_batch = session_changes(batch_read(topics["enriched_replay"]), gap, allowed).cache()

    # enriched_clicks: live == replay == batch, as the latest value per event id.
    enriched = {run: latest_per_key(spark, stack, topics[f"enriched_{run}"]) for run in ("live", "replay")}
    expected = enriched_batch.select(*ENRICHED_FIELDS).cache()
    assert expected.count() == EVENTS
    for run, table in enriched.items():
        _same_rows(table.select(*ENRICHED_FIELDS), expected, f"enriched_clicks {run} vs batch")
    # The live run did re-emit corrections (late profile versions), which the replay never needed.
    live_records = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", stack.bootstrap)
        .option("subscribe", topics["enriched_live"].name)
        .load()
        .count()
    )
    assert live_records > EVENTS, f"live enrich_clicks: {live_records:,} records for {EVENTS:,} clicks, no correction"

    # sessions: live == replay == batch, as the latest value per session id; late events the same set.
    sessions = {run: latest_per_key(spark, stack, topics[f"sessions_{run}"]) for run in ("live", "replay")}
    expected_sessions = session_batch.where(F.col("kind") == UPSERT).select(*SESSION_FIELDS)
    assert expected_sessions.count() > EVENTS // 20  # about one session per 13 clicks: a real workload
    for run, table in sessions.items():
        _same_rows(table.select(*SESSION_FIELDS), expected_sessions, f"sessions {run} vs batch")
    expected_late = {r.event_id for r in batch_read(topics["enriched_replay"]).join(
        session_batch.where(F.col("kind") == LATE).select(
            F.col("side_partition").alias("kafka_partition"), F.col("side_offset").alias("kafka_offset")
        ), ["kafka_partition", "kafka_offset"]).select("event_id").collect()}  # fmt: skip
    assert expected_late
    for run in ("live", "replay"):
        # The side topic holds the original enriched records, written with the enriched topic's schemas.
        late_topic = late_events_of(topics[f"sessions_{run}"])
        with Registry(stack.registry) as registry:
            writers = writer_schemas(registry, topics[f"enriched_{run}"])
        raw = kafka_source(spark, stack, late_topic, streaming=False)
        late = decode_topic(raw, value_schema(stack, ENRICHED_CLICKS), writers, job="t", job_version=0)
        late_ids = {r.event_id for r in late.records.select("event_id").collect()}
        assert expected_late <= late_ids, run
        # Beyond those, the live run's side topic may hold corrections that came after their session settled
        # (counted, never silently dropped): only event ids enrich_clicks re-emitted, which a replay never does.
        corrected = {
            r.key
            for r in spark.read.format("kafka").option("kafka.bootstrap.servers", stack.bootstrap)
            .option("subscribe", topics[f"enriched_{run}"].name).load()
            .groupBy(F.col("key").cast("string").alias("key")).count().where("count > 1").collect()
        }  # fmt: skip
        assert late_ids - expected_late <= corrected, run
        if run == "replay":
            assert late_ids == expected_late

    # Delta views: live == replay == batch, row for row. Batch: each view's rule over the whole of its input topic
    # (the replay's), as read in one batch: page_stats' and user_activity's pure-Python specifications
    # (jobs/*/logic.py, not the operators the jobs run), and sessions as the topic's latest value per key.
    def in_log_order(topic: Topic) -> list[Row]:
        decoded = read_topic(spark, stack, topic, job="batch", job_version=0, streaming=False)
        rows = decoded.rows.where(F.col("side_kind").isNull()).collect()
        return sorted(rows, key=lambda r: (r.kafka_partition, r.kafka_offset))

    clicks_in_log = [
        page_logic.Click(r.user_id, r.event_id, r.page, _ms(r.event_time))
        for r in in_log_order(topics["enriched_replay"])
    ]
    expected_views = (  # a JobSpec is no dict key: its outputs hold dicts
        (PAGE_STATS, spark.createDataFrame(
            [(page, _utc(hour), v.views, v.distinct_users, v.median_time_on_page_ms)
             for (page, hour), v in page_logic.page_stats(clicks_in_log, gap).items()],
            "page string, hour_start timestamp, views long, distinct_users long, median_time_on_page_ms long",
        )),
        (USER_ACTIVITY, spark.createDataFrame(
            [(user, a.sessions, a.clicks, _utc(a.first_seen_ms), _utc(a.last_seen_ms), a.segment)
             for user, a in activity_logic.user_activity(
                 activity_logic.SessionChange(r.key, r.user_id, _ms(r.start_time), _ms(r.end_time), r.clicks,
                                              r.segment, r.deleted)
                 for r in in_log_order(topics["sessions_replay"])
             ).items()],
            "user_id string, sessions long, clicks long, first_seen timestamp, last_seen timestamp, segment string",
        )),
        (SESSIONS_TABLE, latest_per_key(spark, stack, topics["sessions_replay"]).select(*SESSION_FIELDS)),
    )  # fmt: skip
    for spec, expected_rows in expected_views:
        assert isinstance(spec.output, DeltaTable)
        assert expected_rows.count() > 100, spec.name
        for run, settings in (("live", live), ("replay", replay)):
            actual = spark.read.format("delta").load(spec.output.path(settings, spec.version))
            _same_rows(actual.select(*expected_rows.columns), expected_rows, f"{spec.name} {run} vs batch")
