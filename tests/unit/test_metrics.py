"""kappa.runtime.metrics: what one batch's progress, a restart and a stop make of a job version's metrics, and
the exposition a scraper reads (pure logic and a loopback HTTP server; the integration test scrapes a real job)."""

import json
import socket
import urllib.request
import uuid
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kappa.core.errors import KappaError
from kappa.core.settings import load_settings
from kappa.runtime.metrics import (
    REGISTRY,
    JobMetrics,
    publish_target,
    source_offsets,
    start_server,
    withdraw_target,
)


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
    assert source_offsets(source) == {"a": (5, 0), "b": (3, 8)}
    # A source that does not report Kafka's latest offsets (not every Spark source does) has no lag to say.
    assert source_offsets({"startOffset": {"a": {"0": 1}}, "endOffset": {"a": {"0": 4}}}) == {"a": (3, 0)}


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


def test_a_run_publishes_its_scrape_target_for_file_sd_and_withdraws_it(tmp_path: Path) -> None:
    settings = load_settings(state_dir=tmp_path)
    publish_target(settings, "sessionize", 4, "http://127.0.0.1:40123/metrics")
    path = settings.deployments_path / "sessionize.v4.scrape.json"
    assert json.loads(path.read_text()) == [
        {
            "targets": ["127.0.0.1:40123"],
            "labels": {"__metrics_path__": "/metrics", "kappa_version": "sessionize.v4"},
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
    metrics = JobMetrics(job, 1, bootstrap=nowhere)
    metrics.batch(_progress(0, None, {"clicks": {"0": 7, "1": 5}}, {"clicks": {"0": 12, "1": 8}}, rows=12))
    topic = {"job": job, "version": "1", "topic": "clicks"}
    assert _value("kappa_job_consumer_lag_offsets", **topic) == 8  # as planned: Kafka did not answer
    metrics.stopped()
    assert _value("kappa_job_consumer_lag_offsets", **topic) is None
