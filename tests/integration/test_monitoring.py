"""Monitoring as an on-call engineer gets it: `kappa up --monitoring` adds Debian's Prometheus to the running
stack; it finds a job deployed with `kappa jobs start` by the target file the run writes (no reload), scrapes its
metrics, and the alert rules of infra/prometheus/alerts.yml fire when the job falls behind.

The job (raw_clicks, on the session's broker, from this test's copy of jobs/) is made slow on purpose: batches of
at most 100 records every second while clicks arrive at about 250 a second. The rules are the repo's, with their
durations shortened (minutes of `for:` and window are what wakes a human, not what a test waits). Once the alert
fires, the producer stops; the job catches up, and Prometheus' own answers are compared with what the test
produced: the records counter equals the records produced (the clicks and one poison record, counted as one dead
letter of its reason), the lag returns to 0 in offsets and in seconds, the Delta table holds every click.
Beside it, sessions_table idles in the same job host, as a deployed pipeline's jobs share one: Prometheus scrapes
each version's target, and still counts each series once. `kappa jobs stop` ends both and withdraws the targets.
"""

import contextlib
import dataclasses
import fcntl
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from deltalake import DeltaTable

from jobs.catalog import CLICKS
from kappa.core.errors import StackError
from kappa.core.settings import KappaSettings
from kappa.kafka.clients import Outgoing, produce_all
from kappa.lifecycle.state_files import paths
from kappa.runtime.metrics import target_path
from kappa.stack import LocalStack
from kappa.stack.local import PROMETHEUS
from tests.conftest import PORT_OFFSET, REPORTS, TEST_STACK_DIR
from tests.e2e.faults import encode_clicks
from tests.integration.replay_pipeline import deploy_copy
from tests.waiting import wait_until

PROMETHEUS_PORT = 19090 + PORT_OFFSET  # beside the session stack's ports
RULES = Path(__file__).resolve().parents[2] / "infra" / "prometheus" / "alerts.yml"
RATE_PER_S = 250  # clicks produced while the job reads at most 100 a second
MAX_CLICKS = 30_000  # encoded before the run; the alert fires long before they run out
LAG_THRESHOLD = 300  # the falling-behind alert's, shortened for the test (1,000 in the repo's rules)


def _shortened_rules(to: Path) -> Path:
    """The repo's alert rules with a test's durations: `for:` 5 s, windows of 15 s, a lag threshold of
    LAG_THRESHOLD."""
    text = RULES.read_text()
    text, windows = re.subn(r"\[(5|10)m\]", "[15s]", text)
    text, fors = re.subn(r"for: \d+m", "for: 5s", text)
    text, thresholds = re.subn(
        r"kappa_job_consumer_lag_offsets > 1000", f"kappa_job_consumer_lag_offsets > {LAG_THRESHOLD}", text
    )
    assert (windows, thresholds, fors) == (3, 1, 6), "the rules changed: change this test with them"
    to.write_text(text)
    return to


@contextlib.contextmanager
def _stack_file(settings: KappaSettings) -> Iterator[None]:
    """The session stack's lock (tests/conftest.py): its state file is changed by one process at a time."""
    with (settings.stack_dir.parent / f"{TEST_STACK_DIR}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _value(base: str, promql: str) -> float | None:
    """An instant query's one value (an aggregate), None while it has no series."""
    answer = httpx.get(f"{base}/api/v1/query", params={"query": promql}, timeout=10).json()
    assert answer["status"] == "success", answer
    result = answer["data"]["result"]
    assert len(result) <= 1, result
    return float(result[0]["value"][1]) if result else None


def _series(base: str, promql: str) -> list[dict[str, str]]:
    """An instant query's series, by their labels."""
    answer = httpx.get(f"{base}/api/v1/query", params={"query": promql}, timeout=10).json()
    assert answer["status"] == "success", answer
    return [r["metric"] for r in answer["data"]["result"]]


def _targets_up(base: str) -> set[str]:
    return {s["kappa_version"] for s in _series(base, 'up{job="kappa"} == 1')}


def _firing(base: str, name: str) -> list[dict[str, Any]]:
    alerts = httpx.get(f"{base}/api/v1/alerts", timeout=10).json()["data"]["alerts"]
    return [a for a in alerts if a["labels"]["alertname"] == name and a["state"] == "firing"]


@pytest.mark.slow
@pytest.mark.usefixtures("control_topics")
def test_prometheus_scrapes_a_running_job_and_its_falling_behind_alert_fires(
    stack: KappaSettings, tmp_path: Path
) -> None:
    pipeline = deploy_copy(stack, tmp_path / "pipeline", f"mon{time.monotonic_ns() % 10**8}_")
    declaration = "raw_clicks/declaration.py"
    pipeline.edit(declaration, 'freshness="1 minute"', 'freshness="2 seconds"')  # a batch every second
    pipeline.edit(declaration, "max_batch_records=500_000", "max_batch_records=100")  # of 100 records at most
    settings = pipeline.settings(stack).model_copy(
        update={
            "prometheus_port": PROMETHEUS_PORT,
            "prometheus_scrape_interval_s": 1.0,
            "prometheus_rules": _shortened_rules(tmp_path / "alerts.yml"),
        }
    )
    monitored = LocalStack(settings)
    with _stack_file(settings):
        timings = monitored.up(monitoring=True)  # the stack runs: only Prometheus starts
    assert list(timings) == [PROMETHEUS]
    [prometheus] = [c for c in monitored.status() if c.name == PROMETHEUS]
    assert prometheus.healthy
    assert prometheus.address == f"http://127.0.0.1:{PROMETHEUS_PORT}"
    base = prometheus.address

    clicks = dataclasses.replace(CLICKS, name=f"{pipeline.prefix}{CLICKS.name}")
    encoded, _ids = encode_clicks(settings, clicks, MAX_CLICKS, first=0)
    poison = Outgoing(b"poison", b"\x17\x99\x03")  # not Confluent-framed: one dead letter, not a row
    # Deployed as a user deploys them: both jobs are queries of one job host, which serves their metrics from one
    # server (sessions_table idles: its input, the copy's sessions, stays empty).
    for job in ("raw_clicks", "sessions_table"):
        started = pipeline.kappa("jobs", "start", job)
        assert f"{job} v1: started" in started.stdout, started.stdout
    _, output = paths(settings, "raw_clicks", 1)  # the deployment's log
    sent = 0
    stop = threading.Event()

    def produce() -> None:  # RATE_PER_S clicks a second, a fifth of them every 0.2 s, until told to stop
        nonlocal sent
        while not stop.is_set() and sent < MAX_CLICKS:
            produce_all(settings, clicks.name, encoded[sent : sent + RATE_PER_S // 5])
            sent = min(MAX_CLICKS, sent + RATE_PER_S // 5)
            stop.wait(0.2)

    producer = threading.Thread(target=produce, daemon=True)
    selector = 'job="raw_clicks", version="1"'
    try:
        wait_until(lambda: _targets_up(base) == {"raw_clicks.v1", "sessions_table.v1"}, 180,
                   "Prometheus scrapes both versions' targets", log=output)  # fmt: skip
        instances = {s["instance"] for s in _series(base, 'up{job="kappa"}')}
        assert len(instances) == 1, f"one process serves both versions: {instances}"
        produce_all(settings, clicks.name, [poison])
        producer.start()
        wait_until(lambda: _firing(base, "KappaJobFallingBehind"), 180, "the falling-behind alert fires", log=output)
        [alert] = _firing(base, "KappaJobFallingBehind")
        labels = alert["labels"]
        assert (labels["job"], labels["version"], labels["topic"], labels["severity"]) == (
            "raw_clicks", "1", clicks.name, "page"
        )  # fmt: skip
        stop.set()
        producer.join(timeout=30)
        assert not producer.is_alive()
        # Fired on a lag it could have: more sent than the threshold (a count of clicks, not of seconds: on a
        # loaded machine the producer sends its 250 a second late), and before the clicks ran out.
        assert LAG_THRESHOLD < sent < MAX_CLICKS
        # It catches up: Prometheus sees every produced record read (and its latency), each offset past, nothing
        # left behind, in offsets or in seconds; the poison record as one dead letter of its reason.
        records = sent + 1
        wait_until(
            lambda: (
                _value(base, f"sum(kappa_job_input_records_total{{{selector}}})") == records
                and _value(base, f"sum(kappa_job_record_latency_seconds_count{{{selector}}})") == records
                and _value(base, f"max(kappa_job_consumer_lag_offsets{{{selector}}})") == 0
                and _value(base, f"max(kappa_job_consumer_lag_seconds{{{selector}}})") == 0
            ),
            300,
            f"Prometheus sees all {records} records read and no lag",
            log=output,
        )
        assert _value(base, f'sum(kappa_job_input_offsets_total{{{selector}, topic="{clicks.name}"}})') == records
        assert _value(base, f"sum by (kind) (kappa_job_side_rows_total{{{selector}}})") == 1
        assert _value(base, f'sum(kappa_job_side_rows_total{{{selector}, kind="not-confluent-framed"}})') == 1
        assert _value(base, f"max(kappa_job_running{{{selector}}})") == 1
        assert _value(base, f"max(kappa_job_live{{{selector}}})") == 1  # its dataset's live version
        assert _value(base, 'max(up{job="kappa", kappa_version="raw_clicks.v1"})') == 1
        table = Path(str(settings.delta_root)) / "raw_clicks" / "v1"
        assert DeltaTable(str(table)).to_pyarrow_table().num_rows == sent
        # `kappa top` shows the run from its own scrapes: running, caught up, no restart.
        shown = pipeline.kappa("top", "--once", "--interval", "1").stdout
        REPORTS.mkdir(parents=True, exist_ok=True)
        (REPORTS / "kappa-top.txt").write_text(shown)  # a frame of a real run, as the README quotes it
        [row] = [line.split() for line in shown.splitlines() if line.startswith("raw_clicks ")]
        assert row[1:3] == ["1", "running"]
        assert row[4] == "0"  # lag
        assert row[-3] == "0"  # restarts
        # Prometheus alone stopped and started again, on its port and data; a name the stack has not is refused.
        with _stack_file(settings):
            assert monitored.restart(PROMETHEUS) > 0
            with pytest.raises(StackError, match="kafka-7 is not a component of this stack"):
                monitored.start_component("kafka-7")
        [again] = [c for c in monitored.status() if c.name == PROMETHEUS]
        assert (again.healthy, again.address) == (True, base)
        for job in ("raw_clicks", "sessions_table"):
            stopped = pipeline.kappa("jobs", "stop", job)
            assert f"{job} v1: stopped" in stopped.stdout, stopped.stdout
    finally:
        stop.set()
        for job in ("raw_clicks", "sessions_table"):  # whatever happened, no deployment outlives the test
            pipeline.kappa("jobs", "stop", job, check=False)
        with _stack_file(settings):
            monitored.stop_component(PROMETHEUS)
    for job in ("raw_clicks", "sessions_table"):
        assert not target_path(settings, job, 1).exists()  # a clean stop withdraws the target
