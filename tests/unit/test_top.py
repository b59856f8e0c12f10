"""kappa top: samples parsed from the metrics a process serves, rates and the p99 from two samples, sparklines,
and the frame over run records (a real metrics server on loopback; answers worked out by hand)."""

import argparse
import json
import socket
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from kappa.cli.top import cmd_top
from kappa.core.settings import KappaSettings, load_settings
from kappa.ops.top import Sample, Top, quantile, rate, sample_of, sparkline
from kappa.runtime import run_record
from kappa.runtime.metrics import REGISTRY, JobMetrics, start_server
from kappa.runtime.run_record import RunRecord, RunState


def _progress(batch: int, end: int, latest: int, rows: int, ms: int) -> dict:
    return {
        "name": "x",
        "batchId": batch,
        "numInputRows": rows,
        "durationMs": {"triggerExecution": ms},
        "sources": [
            {
                "startOffset": {"clicks": {"0": end - rows}},
                "endOffset": {"clicks": {"0": end}},
                "latestOffset": {"clicks": {"0": latest}},
                "numInputRows": rows,
            }
        ],
    }


def test_a_sample_is_read_from_the_exposition_of_the_real_metrics() -> None:
    job = f"top_{uuid.uuid4().hex[:8]}"
    metrics = JobMetrics(job, 2)
    metrics.started()
    metrics.batch(_progress(0, end=100, latest=130, rows=100, ms=700))
    metrics.restarting("kafka")
    sample = sample_of(generate_latest(REGISTRY).decode(), job, 2, at=5.0)
    assert sample is not None
    assert (sample.records, sample.lag, sample.restarts, sample.running) == (100, 30, 1, False)
    assert sample.buckets[0.5] == 0
    assert sample.buckets[1.0] == 1
    assert sample_of(generate_latest(REGISTRY).decode(), job, 3, at=5.0) is None  # another version: none


def _sample(at: float, records: float, buckets: dict[float, float]) -> Sample:
    return Sample(at=at, records=records, lag=0.0, buckets=buckets, last_batch=None, restarts=0, running=True)


def test_rate_and_p99_come_from_the_difference_of_two_samples() -> None:
    older = _sample(10.0, 1000, {0.5: 5, 1.0: 10, 2.0: 10, float("inf"): 10})
    newer = _sample(14.0, 3000, {0.5: 103, 1.0: 109, 2.0: 110, float("inf"): 110})
    assert rate(older, newer) == 500  # 2000 records in 4 s
    # Between them 100 batches: 98 within 0.5 s, 99 within 1 s, 100 within 2 s: the 99th percentile is in (0.5, 1].
    assert quantile(older, newer) == 1.0
    assert quantile(older, newer, q=0.5) == 0.5
    assert quantile(newer, newer) is None  # no batch in between
    assert rate(newer, replace(older, at=20.0)) == 0  # the process restarted: its counter went back


def test_sparkline_scales_to_its_maximum() -> None:
    assert sparkline([0, 4, 8]) == "▁▅█"
    assert sparkline([0, 0]) == "▁▁"
    assert sparkline([]) == ""
    assert sparkline(range(9), width=3) == "▆▇█"  # the last three: 6, 7, 8


def _record(settings: KappaSettings, job: str, state: RunState, url: str | None) -> None:
    path = run_record.record_path(settings, job, 1)
    run_record.write(path, RunRecord(job, 1, state, pid=1, metrics_url=url))


def test_top_shows_each_live_run_from_its_metrics_and_names_a_silent_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = load_settings(state_dir=tmp_path)
    job, silent, stopped = (f"{name}_{uuid.uuid4().hex[:6]}" for name in ("live", "silent", "stopped"))
    url = start_server("127.0.0.1", 0)
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{closed.getsockname()[1]}/metrics"
    _record(settings, job, RunState.RUNNING, url)
    _record(settings, silent, RunState.RUNNING, dead)
    _record(settings, stopped, RunState.STOPPED, url)  # not live: not shown
    metrics = JobMetrics(job, 1)
    metrics.started()
    metrics.batch(_progress(0, end=50, latest=80, rows=50, ms=300))
    top = Top(settings)
    top.poll()
    metrics.batch(_progress(1, end=250, latest=250, rows=200, ms=2500))
    top.poll()
    [live_row, silent_row] = top.rows()
    assert live_row[:3] == (job, "1", "running")
    assert float(live_row[3].replace(",", "")) > 0  # 200 records over the time between the two polls
    assert live_row[4] == "0"  # caught up at its last batch
    assert live_row[5] == "≤ 5 s"  # one batch in between, of 2.5 s: in the bucket up to 5 s
    assert live_row[7] == "0"
    assert silent_row[:5] == (silent, "1", "running", "-", "-")
    assert "does not answer" in top.unreachable[(silent, 1)]

    assert cmd_top(settings, argparse.Namespace(interval=0.01, once=True)) == 0
    out = capsys.readouterr().out
    assert f"{silent} v1: {dead} does not answer" in out
    assert job in out
    assert stopped not in out


def test_dagsters_observation_plots_throughput_and_p99_between_two_ticks() -> None:
    from dagster_project.operations import throughput

    job = f"dag_{uuid.uuid4().hex[:6]}"
    run = RunRecord(job, 1, RunState.RUNNING, pid=1, metrics_url=start_server("127.0.0.1", 0))
    metrics = JobMetrics(job, 1)
    metrics.batch(_progress(0, end=100, latest=100, rows=100, ms=400))
    first, sample = throughput(run, None)
    assert first == {"records_read": 100}  # one sample: no rate yet
    metrics.batch(_progress(1, end=400, latest=400, rows=300, ms=1500))
    second, _ = throughput(run, json.loads(json.dumps(sample)))  # through the cursor's JSON
    assert second["records_read"] == 400
    assert second["input_records_per_s"] > 0  # 300 records over the time between the ticks
    assert second["batch_p99_s"] == 2.0  # the one batch in between took 1.5 s: in the bucket up to 2 s
    moved, _ = throughput(replace(run, metrics_url="http://127.0.0.1:9/metrics"), sample)
    assert moved == {}  # a process that does not answer: nothing to plot this tick
