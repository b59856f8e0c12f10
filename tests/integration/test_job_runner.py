"""`kappa jobs run`: a job version drains its input, records its progress as group offsets, stops on a signal.

Each test runs the CLI on its own copy of the pipeline (tests/integration/replay_pipeline.py): the copy's
catalog topics are prefixed, so the job reads a `clicks` topic that only this test writes.
"""

import dataclasses
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from deltalake import DeltaTable
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from jobs.catalog import CLICKS
from jobs.clickstream.generator import click_messages, clicks
from jobs.raw_clicks.declaration import JOB
from kappa.contracts.avro_serde import AvroEncoder
from kappa.contracts.dead_letter_format import DeadLetterKind
from kappa.contracts.registry import Registry, value_subject
from kappa.contracts.schema_files import topic_value_schema
from kappa.contracts.topic_declarations import Topic
from kappa.core.settings import KappaSettings
from kappa.kafka.clients import Outgoing, admin_client, produce_all
from kappa.runtime import run_record
from kappa.runtime.metrics import LATENCY_BUCKETS_S
from kappa.runtime.run_record import RunState
from kappa.spark.driver_files import QUIET_LOGGERS, log_file
from tests.integration.replay_pipeline import Deployment, deploy_copy
from tests.waiting import wait_until


@pytest.fixture
def pipeline(stack: KappaSettings, tmp_path: Path, unique_name: Callable[[str], str]) -> Deployment:
    """This test's copy of the pipeline: its topics (and schemas) set up, its own Delta and checkpoints."""
    return deploy_copy(stack, tmp_path / "pipeline", unique_name("jr") + "_")


def _clicks_of(d: Deployment) -> Topic:
    return dataclasses.replace(CLICKS, name=f"{d.prefix}{CLICKS.name}")


def _committed(settings: KappaSettings, group: str, topic: Topic) -> dict[int, int]:
    admin = admin_client(settings)
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic.name, p) for p in range(topic.partitions)])
    result = admin.list_consumer_group_offsets([request])[group].result(timeout=15)
    return {tp.partition: tp.offset for tp in result.topic_partitions}


def _ends(settings: KappaSettings, topic: Topic) -> dict[int, int]:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": settings.bootstrap, "group.id": "probe"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic.name, p), timeout=10)[1]
            for p in range(topic.partitions)
        }
    finally:
        consumer.close()


def _clicks(
    stack: KappaSettings, topic: Topic, count: int, seed: int, schema: dict[str, Any] | None = None
) -> list[Outgoing]:
    """Seeded clicks, encoded with `schema` (registered if new; the topic's declared schema by default)."""
    with Registry(stack.registry) as registry:
        writer = schema or topic_value_schema(stack.schemas_path, topic)
        encoder = AvroEncoder(registry, value_subject(topic.name), writer)
        return list(click_messages(clicks(count, seed=seed), encoder.encode, topic.partitions))


def _produce(stack: KappaSettings, topic: Topic, count: int, seed: int) -> None:
    produce_all(stack, topic.name, _clicks(stack, topic, count, seed))


def _count(settings: KappaSettings, topic: str) -> int:
    """How many records a (non-compacted) topic holds: the sum of its partitions' end offsets."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": settings.bootstrap, "group.id": "probe"})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions)
    finally:
        consumer.close()


def _scrape(url: str | None) -> list[Sample]:
    """Every sample at a metrics address."""
    assert url is not None, "the run record names no metrics address"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return [sample for family in text_string_to_metric_families(text) for sample in family.samples]


def _metrics(url: str | None, job: str) -> dict[tuple[str, str], float]:
    """The job's samples at a metrics address, by (name, its topic or kind label, or "")."""
    return {
        (sample.name, sample.labels.get("topic") or sample.labels.get("kind") or ""): sample.value
        for sample in _scrape(url)
        if sample.labels.get("job") == job
    }


def _sample(url: str | None, name: str, **labels: str) -> float | None:
    """One sample at a metrics address, by its name and labels (those it has beside them ignored)."""
    found = (s.value for s in _scrape(url) if s.name == name and labels.items() <= s.labels.items())
    return next(found, None)


def _sent_now(records: list[Outgoing]) -> list[Outgoing]:
    """The records without their event-time timestamps: Kafka stamps each with when it is sent."""
    return [dataclasses.replace(r, timestamp_ms=None) for r in records]


@pytest.mark.slow
@pytest.mark.usefixtures("control_topics")
def test_run_available_now_then_continuous_learning_a_schema_until_ctrl_c_mid_batch(
    stack: KappaSettings, pipeline: Deployment
) -> None:
    topic, group = _clicks_of(pipeline), f"kappa.{JOB.name}.v{JOB.version}"
    dlq = f"{topic.name}.dlq"
    table = Path(str(pipeline.settings(stack).delta_root)) / JOB.name / f"v{JOB.version}"
    _produce(stack, topic, 2000, seed=21)
    command = [sys.executable, "-m", "kappa.cli", "jobs", "run", JOB.name]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*command, *args], env=pipeline.env, cwd=pipeline.code, capture_output=True, text=True, timeout=300
        )

    spark_log = log_file(pipeline.settings(stack))
    logged_before = spark_log.stat().st_size if spark_log.exists() else 0
    done = run("--available-now")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "raw_clicks v1: done" in done.stdout
    assert "starting raw_clicks: Spark session" in done.stdout  # (a refused run below never gets there)
    # Spark's warnings that ask nothing of the user stay off the terminal; its log file keeps them.
    assert "Using Spark's default log4j profile" not in done.stderr  # the platform's log configuration is in use
    quiet = [name.rsplit(".", 1)[-1] for name in QUIET_LOGGERS]
    assert not [line for line in done.stderr.splitlines() if any(f" WARN {q}:" in line for q in quiet)], done.stderr
    with spark_log.open() as log:
        log.seek(logged_before)
        assert " WARN ResolveWriteToStream [pid " in log.read()  # said by every streaming query that starts
    assert "raw_clicks_v1 batch 0:" in done.stdout  # the per-batch progress line
    assert DeltaTable(str(table)).to_pyarrow_table().num_rows == 2000
    # Kafka's own tools see this job version's progress: its group's offsets are the topic's end offsets.
    assert _committed(stack, group, topic) == _ends(stack, topic)
    # The version started from earliest: a run asking it to start elsewhere is refused, not silently resumed.
    moved = run("--from", "latest")
    assert moved.returncode == 2
    assert "raw_clicks v1 started from earliest and its checkpoint resumes from there" in moved.stderr

    # Continuous: more input arrives, the job picks it up from its checkpoint, Ctrl-C (SIGINT) stops it cleanly
    # after its batch, though the SparkContext sets its own SIGINT handler. (SIGTERM: test_deployments.)
    live = subprocess.Popen(command, env=pipeline.env, cwd=pipeline.code, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        # The live records carry no timestamp of their own: Kafka's is when the test sent them, so no latency
        # of the live run can be longer than from now to when it is scraped.
        produced_from = time.time()
        produce_all(stack, topic.name, _sent_now(_clicks(stack, topic, 500, seed=22)))
        # Wait until the batch is complete, not only written: a stop during a batch rightly leaves the group
        # at the last completed batch (the checkpoint's truth), which would make the comparison below racy.
        wait_until(
            lambda: (
                DeltaTable(str(table)).to_pyarrow_table().num_rows == 2500
                and _committed(stack, group, topic) == _ends(stack, topic)
            ),
            timeout_s=180,
            what="the continuous run writes the 500 new clicks and records its progress",
        )
        # While it runs, it holds the version's checkpoint: a second run of the version is refused, naming it.
        second = run("--available-now")
        assert second.returncode == 2
        assert (
            f"the checkpoint of raw_clicks v1 is in use by `kappa jobs run raw_clicks --version 1` (pid {live.pid},"
            in second.stderr
        )
        live_record = run_record.read(run_record.record_path(pipeline.settings(stack), JOB.name, JOB.version))
        assert live_record is not None  # the refused run left the running one's record alone
        assert (live_record.state, live_record.pid) == (RunState.RUNNING, live.pid)

        # A compatible writer version registered while the job runs is decoded from the next batch on: no restart,
        # nothing dead-lettered (an optional field added, as a producer team would).
        v2 = topic_value_schema(stack.schemas_path, topic)
        v2 = {**v2, "fields": [*v2["fields"], {"name": "campaign", "type": ["null", "string"], "default": None}]}
        produce_all(stack, topic.name, _sent_now(_clicks(stack, topic, 300, seed=23, schema=v2)))
        wait_until(
            lambda: DeltaTable(str(table)).to_pyarrow_table().num_rows == 2800,
            timeout_s=180,
            what="the continuous run decodes the 300 clicks of the schema version registered while it runs",
        )
        assert _count(stack, dlq) == 0
        # Its metrics (at the address its record names) count what this run read: 500 + 300 records, the topic's
        # offsets past by as many, none left behind, and its query running. A batch is counted when it ends, after
        # its Delta commit (and the compaction Delta may run after it): the rows can be read a moment before.
        url = live_record.metrics_url
        wait_until(
            lambda: _metrics(url, JOB.name).get(("kappa_job_input_records_total", "")) == 800,
            timeout_s=60,
            what="the run's metrics count the batch that wrote the last rows, once it ended",
        )
        scraped = _metrics(url, JOB.name)
        assert scraped[("kappa_job_input_records_total", "")] == 800
        assert scraped[("kappa_job_input_offsets_total", topic.name)] == 800
        assert scraped[("kappa_job_consumer_lag_offsets", topic.name)] == 0
        assert scraped[("kappa_job_batches_total", "")] >= 2  # one batch per write at least
        assert scraped[("kappa_job_batch_duration_seconds_count", "")] == scraped[("kappa_job_batches_total", "")]
        assert scraped[("kappa_job_running", "")] == 1
        # Each record read live has one latency (counted in the JVM as its batch ran, once though the batch is
        # read twice), no longer than from when the test produced it to now; and nothing is left unread.
        longest = time.time() - produced_from
        latency = "kappa_job_record_latency_seconds"
        assert scraped[(f"{latency}_count", topic.name)] == 800
        assert 0 < scraped[(f"{latency}_sum", topic.name)] <= 800 * longest
        within = min(le for le in LATENCY_BUCKETS_S if le / 2 >= longest)  # a grid cell: <= twice the age
        assert _sample(live_record.metrics_url, f"{latency}_bucket", le=repr(within)) == 800
        assert scraped[("kappa_job_consumer_lag_seconds", topic.name)] == 0
        # The version its dataset's alias names (the first run made v1 live), as the alias registry says it.
        url = live_record.metrics_url
        assert _sample(url, "kappa_dataset_live_version", dataset="delta:raw_clicks") == 1
        assert _sample(url, "kappa_job_live", job="raw_clicks", version="1") == 1
        counted = {name for name, _label in scraped}
        assert "kappa_job_restarts_total" not in counted  # no service went away
        assert "kappa_job_side_rows_total" not in counted  # nothing set aside yet

        # Ctrl-C while a batch is writing: the batch finishes, then the job stops. Its dead letters are already
        # out when the signal comes, so a stop that cancelled the batch would send them again on the restart.
        bad = [Outgoing(f"bad-{i}".encode(), b"\x17\x99\x03") for i in range(5)]
        produce_all(stack, topic.name, bad + _clicks(stack, topic, 3000, seed=24))  # one write: one batch, likely
        wait_until(lambda: _count(stack, dlq) >= 5, timeout_s=180, what="the batch's dead letters are written")
        # Its metrics count them by kind once their batch completes (observed as the batch runs, in the JVM).
        unframed = ("kappa_job_side_rows_total", DeadLetterKind.NOT_CONFLUENT_FRAMED.value)
        wait_until(lambda: _metrics(live_record.metrics_url, JOB.name).get(unframed) == 5, timeout_s=180,
                   what="the metrics count the batch's 5 dead letters")  # fmt: skip
        live.send_signal(signal.SIGINT)
        out, _ = live.communicate(timeout=120)
    finally:
        if live.poll() is None:
            live.kill()
    assert live.returncode == 0, out[-2000:]
    assert "stopped by signal" in out
    assert "planning the query again to decode it" in out  # the new writer version, learned without a restart
    at = out.find("Traceback")
    assert at < 0, out[max(0, at - 1500) : at + 1000]  # neither the relearning nor the stop is an error
    assert DeltaTable(str(table)).to_pyarrow_table().num_rows == 5800  # the batch in flight finished
    assert _committed(stack, group, topic) == _ends(stack, topic)
    again = run("--available-now")  # nothing left to do: no batch runs again, so no dead letter is sent twice
    assert again.returncode == 0, again.stderr[-2000:]
    assert _count(stack, dlq) == 5
    assert DeltaTable(str(table)).to_pyarrow_table().num_rows == 5800

    # A topic the job writes that does not exist is named at once: Spark's Kafka clients would wait for it, and
    # the runner would take that for an outage and retry for ever.
    admin = admin_client(stack)  # kept: a client collected mid-request cancels it
    admin.delete_topics([dlq])[dlq].result(timeout=30)
    missing = run("--available-now")
    assert missing.returncode == 2, missing.stderr[-2000:]
    refusal = f"job raw_clicks_v1: {dlq} does not exist; jobs never create topics: run `kappa topics apply`"
    assert refusal in missing.stderr
    assert "Traceback" not in missing.stderr
    assert "Spark session" not in missing.stdout, missing.stdout[-2000:]  # refused before Spark's start
    # The run's own record says the same, for `kappa jobs status` and Dagster (which read it, not the output).
    failed = run_record.read(run_record.record_path(pipeline.settings(stack), JOB.name, JOB.version))
    assert failed is not None
    assert (failed.state, failed.last_error) == (RunState.FAILED, refusal)
    assert failed.rows == 2000 + 500 + 300 + 5 + 3000  # every record this test produced, over the version's runs


@pytest.mark.slow
def test_sigterm_while_spark_starts_is_a_clean_stop(pipeline: Deployment, tmp_path: Path) -> None:
    # A deployment stopped (or a sensor-restarted one stopped again) during the tens of seconds Spark takes to
    # start: the runner's handler is set before the session is built, so the stop is graceful and starts nothing.
    env = pipeline.env
    job = subprocess.Popen([sys.executable, "-m", "kappa.cli", "jobs", "run", JOB.name], env=env, cwd=pipeline.code,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        assert job.stdout is not None
        lines: list[str] = []
        for line in job.stdout:
            lines.append(line)
            if f"starting {JOB.name}: Spark session" in line:
                break
        job.send_signal(signal.SIGTERM)
        out, _ = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            job.kill()
    out = "".join(lines) + out
    assert job.returncode == 0, out[-2000:]
    assert f"stopped before {JOB.name}_v{JOB.version} started a query" in out, out[-2000:]
    assert "stopped by signal" in out
    assert not list(tmp_path.rglob("offsets")), "a query was started"  # the copy's checkpoints are in tmp_path
