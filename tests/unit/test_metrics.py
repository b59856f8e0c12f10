"""kappa.runtime.metrics: what one batch's progress, a restart and a stop make of a job version's metrics, and
the exposition a scraper reads (pure logic and a loopback HTTP server; the integration test scrapes a real job)."""

import json
import socket
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kappa.core.errors import KappaError
from kappa.core.observed import RECORD_AGE_GRID_S, record_age_column
from kappa.core.settings import load_settings
from kappa.runtime.metrics import (
    REGISTRY,
    JobMetrics,
    publish_target,
    start_server,
    version_url,
    withdraw_target,
)
from kappa.runtime.progress_offsets import EndOffsetsSeen, SourceOffsets


def _value(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def _progress(batch: int, start: dict | None, end: dict, latest: dict, rows: int, ms: int = 1500) -> dict:
    """A StreamingQueryProgress as the listener hands it over (Spark's JSON), one Kafka source."""
    return {
        "name": "job_v1",
        "batchId": batch,
        "numInputRows": rows,
        "durationMs": {"triggerExecution": ms, "addBatch": ms - 100},
        "sources": [
            {
                "description": "KafkaV2[Subscribe[clicks]]",
                "startOffset": start,
                "endOffset": end,
                "latestOffset": latest,
                "numInputRows": rows,
            }
        ],
        "sink": {"description": "ForeachBatchSink", "numOutputRows": -1},
        "stateOperators": [{"numRowsTotal": 40, "memoryUsedBytes": 4096}, {"numRowsTotal": 2, "memoryUsedBytes": 10}],
    }


def test_batches_count_records_offsets_and_lag_per_topic() -> None:
    job = f"job_{uuid.uuid4().hex[:8]}"
    labels = {"job": job, "version": "3"}
    metrics = JobMetrics(job, 3)
    assert _value("kappa_job_running", **labels) == 0
    metrics.started()
    # The first batch has no start offsets: its rows are the topic's. 12 offsets of the topic's 20 read.
    metrics.batch(_progress(0, None, {"clicks": {"0": 7, "1": 5}}, {"clicks": {"0": 12, "1": 8}}, rows=12))
    # The second batch reads 5 + 3 offsets (as JSON text, as some Spark versions write them) and catches up.
    metrics.batch(_progress(1, '{"clicks": {"0": 7, "1": 5}}', '{"clicks": {"0": 12, "1": 8}}',
                            '{"clicks": {"0": 12, "1": 8}}', rows=8, ms=300))  # fmt: skip
    topic = {**labels, "topic": "clicks"}
    assert _value("kappa_job_running", **labels) == 1
    assert _value("kappa_job_batches_total", **labels) == 2
    assert _value("kappa_job_input_records_total", **labels) == 20
    assert _value("kappa_job_input_offsets_total", **topic) == 20
    assert _value("kappa_job_consumer_lag_offsets", **topic) == 0  # after the first batch it was 8
    assert _value("kappa_job_batch_duration_seconds_count", **labels) == 2
    assert _value("kappa_job_batch_duration_seconds_sum", **labels) == pytest.approx(1.8)
    assert _value("kappa_job_batch_duration_seconds_bucket", **labels, le="0.5") == 1
    assert _value("kappa_job_state_rows", **labels) == 42
    assert _value("kappa_job_state_memory_bytes", **labels) == 4106
    assert _value("kappa_job_output_rows_total", **labels) is None  # a foreachBatch sink counts nothing
    assert _value("kappa_job_last_batch_timestamp_seconds", **labels) > 1.7e9

    metrics.restarting("kafka")
    metrics.restarting("kafka")
    metrics.restarting("registry")
    assert _value("kappa_job_running", **labels) == 0
    assert _value("kappa_job_restarts_total", **labels, service="kafka") == 2
    assert _value("kappa_job_restarts_total", **labels, service="registry") == 1
    metrics.started()
    metrics.stopped()
    assert _value("kappa_job_running", **labels) == 0


def test_lag_is_left_behind_by_the_batch_per_topic_of_a_multi_topic_source() -> None:
    source = {
        "startOffset": {"a": {"0": 10}, "b": {"0": 0, "1": 4}},
        "endOffset": {"a": {"0": 15}, "b": {"0": 3, "1": 4}},
        "latestOffset": {"a": {"0": 15}, "b": {"0": 9, "1": 6}},
        "numInputRows": 8,
    }
    assert SourceOffsets.of(source).read_and_behind() == {"a": (5, 0), "b": (3, 8)}
    # A source that does not report Kafka's latest offsets (not every Spark source does) has no lag to say.
    sparse = SourceOffsets.of({"startOffset": {"a": {"0": 1}}, "endOffset": {"a": {"0": 4}}})
    assert sparse.read_and_behind() == {"a": (3, 0)}


def test_the_server_exposes_the_registry_and_a_busy_port_is_named() -> None:
    job = f"job_{uuid.uuid4().hex[:8]}"
    JobMetrics(job, 1).batch(_progress(0, None, {"clicks": {"0": 3}}, {"clicks": {"0": 5}}, rows=3))
    url = start_server("127.0.0.1", 0)
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    samples = {
        (s.name, s.labels.get("topic")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.labels.get("job") == job
    }
    assert samples[("kappa_job_input_records_total", None)] == 3
    assert samples[("kappa_job_consumer_lag_offsets", "clicks")] == 2
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(KappaError, match=f"cannot serve metrics on 127.0.0.1:{port} .*KAPPA_METRICS_PORT"):
            start_server("127.0.0.1", port)


def test_each_version_has_its_own_address_on_a_server_of_several() -> None:
    """The job host serves several versions from one server, and Prometheus scrapes each version's target: each
    target reads that version's series alone (and those of no version), so each series is counted once."""
    first, second = f"job_{uuid.uuid4().hex[:8]}", f"job_{uuid.uuid4().hex[:8]}"
    JobMetrics(first, 1).batch(_progress(0, None, {"clicks": {"0": 3}}, {"clicks": {"0": 3}}, rows=3))
    JobMetrics(second, 2).batch(_progress(0, None, {"clicks": {"0": 7}}, {"clicks": {"0": 7}}, rows=7))
    url = start_server("127.0.0.1", 0)

    def records(address: str, name: str = "kappa_job_input_records_total") -> dict[tuple[str, str], float]:
        with urllib.request.urlopen(address, timeout=10) as response:
            families = text_string_to_metric_families(response.read().decode())
        return {
            (s.labels["job"], s.labels["version"]): s.value
            for family in families
            for s in family.samples
            if s.name == name and s.labels["job"] in (first, second)
        }

    assert records(url) == {(first, "1"): 3, (second, "2"): 7}
    assert version_url(url, first, 1) == f"{url}/{first}.v1"
    assert records(version_url(url, first, 1)) == {(first, "1"): 3}
    assert records(version_url(url, second, 2)) == {(second, "2"): 7}
    assert records(version_url(url, second, 1)) == {}  # a version the process does not run: no series
    with pytest.raises(urllib.error.HTTPError) as mistyped:  # never the whole process under a version's name
        records(f"{url}/{first}.1")
    assert mistyped.value.code == 404
    lag = "kappa_job_consumer_lag_offsets"  # computed when scraped: for the scraped version alone
    assert records(url, lag) == {(first, "1"): 0, (second, "2"): 0}
    assert records(version_url(url, second, 2), lag) == {(second, "2"): 0}


def test_a_run_publishes_its_scrape_target_for_file_sd_and_withdraws_it(tmp_path: Path) -> None:
    settings = load_settings(state_dir=tmp_path)
    publish_target(settings, "sessionize", 4, "http://127.0.0.1:40123/metrics/sessionize.v4")
    path = settings.deployments_path / "sessionize.v4.scrape.json"
    assert json.loads(path.read_text()) == [
        {
            "targets": ["127.0.0.1:40123"],
            "labels": {"__metrics_path__": "/metrics/sessionize.v4", "kappa_version": "sessionize.v4"},
        }
    ]
    withdraw_target(settings, "sessionize", 4)
    assert not path.exists()
    withdraw_target(settings, "sessionize", 4)  # twice: nothing to do


def test_side_rows_are_counted_by_kind_from_the_batchs_observed_metrics() -> None:
    job = f"job_{uuid.uuid4().hex[:8]}"
    progress = _progress(0, None, {"clicks": {"0": 9}}, {"clicks": {"0": 9}}, rows=9)
    # What Spark reports for the query's observation: every kind's count, and all side rows (2 of a job's own).
    progress["observedMetrics"] = {
        "kappa_side_rows": {"all": 6, "undecodable": 3, "late-event": 1, "contract-violation": 0}
    }
    JobMetrics(job, 1).batch(progress)
    JobMetrics(job, 1).batch(progress | {"batchId": 1, "observedMetrics": {}})  # an idle observation: nothing
    labels = {"job": job, "version": "1"}
    assert _value("kappa_job_side_rows_total", **labels, kind="undecodable") == 3
    assert _value("kappa_job_side_rows_total", **labels, kind="late-event") == 1
    assert _value("kappa_job_side_rows_total", **labels, kind="other") == 2
    assert _value("kappa_job_side_rows_total", **labels, kind="contract-violation") is None


def test_a_kafka_that_does_not_answer_leaves_the_lag_its_last_batch_planned_and_a_stopped_run_has_none() -> None:
    job = f"job_{uuid.uuid4().hex[:8]}"
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        nowhere = f"127.0.0.1:{closed.getsockname()[1]}"
    metrics = JobMetrics(job, 1, kafka={"bootstrap.servers": nowhere})
    metrics.batch(_progress(0, None, {"clicks": {"0": 7, "1": 5}}, {"clicks": {"0": 12, "1": 8}}, rows=12))
    topic = {"job": job, "version": "1", "topic": "clicks"}
    assert _value("kappa_job_consumer_lag_offsets", **topic) == 8  # as planned: Kafka did not answer
    metrics.stopped()
    assert _value("kappa_job_consumer_lag_offsets", **topic) is None


def _observed_ages(ages_s: list[float]) -> dict[str, int]:
    """What the JVM observes of a batch whose records are `ages_s` old when it starts (its definition:
    kappa.spark.topic_io.observe_record_age counts, per grid point, the records at most that old)."""
    counts = {record_age_column(point): sum(age <= point for age in ages_s) for point in RECORD_AGE_GRID_S}
    return {"records": len(ages_s), "age_sum_ms": round(sum(ages_s) * 1000), **counts}


def test_record_latency_adds_the_batch_duration_to_each_observed_age() -> None:
    job = f"job_{uuid.uuid4().hex[:8]}"
    progress = _progress(0, None, {"clicks": {"0": 5}}, {"clicks": {"0": 5}}, rows=5, ms=1500)
    # 0.04 s, 0.9 s, 12 s, 2 h old when the 1.5 s batch started; one from a producer whose clock runs ahead.
    progress["observedMetrics"] = {"kappa_record_age:clicks": _observed_ages([0.04, 0.9, 12.0, 7200.0, -0.5])}
    JobMetrics(job, 1).batch(progress)
    series = {"job": job, "version": "1", "topic": "clicks"}

    def bucket(le: str) -> float | None:
        return _value("kappa_job_record_latency_seconds_bucket", **series, le=le)

    # Each record at its grid cell's upper point plus 1.5 s: 0.05 + 1.5 (twice) -> <= 2; 1.0 + 1.5 -> <= 3;
    # 20 + 1.5 -> <= 30; 7201.5 -> above every bucket.
    assert [bucket(le) for le in ("1.0", "2.0", "3.0", "20.0", "30.0", "3600.0", "+Inf")] == [0, 2, 3, 3, 4, 4, 5]
    assert _value("kappa_job_record_latency_seconds_count", **series) == 5
    assert _value("kappa_job_record_latency_seconds_sum", **series) == pytest.approx(7212.44 + 5 * 1.5)


def test_the_lag_in_seconds_dates_the_oldest_unread_record_between_the_end_offsets_seen() -> None:
    seen = EndOffsetsSeen()
    seen.saw(100.0, 10)
    seen.saw(110.0, 20)
    # The record at offset 15 was appended when the end passed 15, interpolated: 100 + 6/10 of 10 s.
    assert seen.age_s(15, now=120.0) == pytest.approx(14.0)
    assert seen.age_s(20, now=120.0) == 0  # everything seen was read
    assert seen.age_s(5, now=120.0) == pytest.approx(20.0)  # before the first end seen: at least that old
    seen.saw(115.0, 20)  # the same end seen later: the next record is dated from the later sight,
    seen.saw(112.0, 20)  # (a batch's sight that arrives after a scrape's is put in its place)
    assert seen.age_s(15, now=120.0) == pytest.approx(14.0)  # and those before it still from the first
    seen.saw(125.0, 30)
    assert seen.age_s(20, now=130.0) == pytest.approx(130.0 - 116.0)
    seen.read_up_to(20)  # what dated records before 20 is forgotten; 20 is still dated
    assert seen.age_s(20, now=130.0) == pytest.approx(14.0)

    # Through a job's batches: it planned at 20 when the end was 12, and read up to 7 of partition 0.
    job = f"job_{uuid.uuid4().hex[:8]}"
    metrics = JobMetrics(job, 1)
    progress = _progress(0, None, {"clicks": {"0": 7, "1": 8}}, {"clicks": {"0": 12, "1": 8}}, rows=15)
    metrics.batch(progress | {"timestamp": "1970-01-01T00:00:20.000Z"})
    assert metrics.lag_seconds("clicks", now=50.0) == pytest.approx(30.0)  # partition 1 is read: 0
    metrics.saw_end("clicks", 0, 60.0, 22)  # a scrape
    metrics.batch(progress | {"timestamp": "1970-01-01T00:01:10.000Z", "sources": [
        {"startOffset": {"clicks": {"0": 7, "1": 8}}, "endOffset": {"clicks": {"0": 12, "1": 8}},
         "latestOffset": {"clicks": {"0": 22, "1": 8}}, "numInputRows": 5}]})  # fmt: skip
    # Offset 12 was appended between 20 s (end 12) and 60 s (end 22): at 24 s.
    assert metrics.lag_seconds("clicks", now=74.0) == pytest.approx(50.0)


def test_an_available_now_run_says_its_progress_through_its_plan() -> None:
    job = f"job_{uuid.uuid4().hex[:8]}"
    labels = {"job": job, "version": "2"}
    replay = JobMetrics(job, 2, available_now=True)
    assert _value("kappa_job_replay_progress_ratio", **labels) == 0
    replay.batch(_progress(0, None, {"clicks": {"0": 7, "1": 5}}, {"clicks": {"0": 12, "1": 8}}, rows=12))
    assert _value("kappa_job_replay_progress_ratio", **labels) == pytest.approx(12 / 20)
    replay.batch(_progress(1, {"clicks": {"0": 7, "1": 5}}, {"clicks": {"0": 12, "1": 8}},
                           {"clicks": {"0": 12, "1": 8}}, rows=8))  # fmt: skip
    assert _value("kappa_job_replay_progress_ratio", **labels) == 1
    JobMetrics(f"{job}_live", 1).batch(_progress(0, None, {"clicks": {"0": 1}}, {"clicks": {"0": 2}}, rows=1))
    assert _value("kappa_job_replay_progress_ratio", job=f"{job}_live", version="1") is None  # a live run: none
