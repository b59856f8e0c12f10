"""The alert rules of infra/prometheus/alerts.yml, with their real durations, checked and run by Prometheus' own
promtool (`promtool test rules`: synthetic series, evaluated as Prometheus would) against the times at which an
on-call engineer should be paged; and the stack's Prometheus configuration checked by `promtool check config`."""

import json
import shutil
import subprocess
from pathlib import Path

import yaml

from kappa.core.settings import load_settings
from kappa.stack.prometheus import prometheus_config

RULES = Path(__file__).resolve().parents[2] / "infra" / "prometheus" / "alerts.yml"
PROMTOOL = shutil.which("promtool")  # Debian's prometheus package, installed by `make setup`

JOB = 'job="raw_clicks", version="1"'
REPLAY = 'job="enrich_clicks", version="3"'
LAG = f'kappa_job_consumer_lag_offsets{{{JOB}, topic="clicks"}}'
DOWN_AT_6 = "1x5 0x35"  # a target that answers for 6 minutes, then not
# Series every 1m. Behind: 2000 more offsets each minute. Catching up: from 20,000 down by 2000 a minute.
TESTS = [
    {
        "interval": "1m",
        "input_series": [
            {"series": LAG, "values": "0+2000x40"},
            {"series": f"kappa_job_running{{{JOB}}}", "values": "1x40"},
            {"series": f"kappa_job_last_batch_timestamp_seconds{{{JOB}}}", "values": "0+60x40"},
        ],
        "alert_rule_test": [
            # Above 1000 and growing from minute 1 (delta extrapolates from two samples): pending 10m, then paged.
            {"eval_time": "10m", "alertname": "KappaJobFallingBehind", "exp_alerts": []},
            {
                "eval_time": "12m",
                "alertname": "KappaJobFallingBehind",
                "exp_alerts": [
                    {
                        "exp_labels": {"severity": "page", "job": "raw_clicks", "version": "1", "topic": "clicks"},
                        "exp_annotations": {
                            "summary": "raw_clicks v1 falls behind on clicks",
                            "description": "24000 offsets behind, and growing: the job reads slower than its "
                            "input arrives.",
                        },
                    }
                ],
            },
            {"eval_time": "30m", "alertname": "KappaJobNoBatch", "exp_alerts": []},  # batches every minute
        ],
    },
    {
        "interval": "1m",
        "input_series": [
            {"series": LAG, "values": "20000-2000x10 0x30"},  # a backlog that shrinks: catching up, no page
            {"series": f"kappa_job_running{{{JOB}}}", "values": "1x40"},
            # Its last batch at minute 10 read the rest: from then on nothing to read is no stall.
            {"series": f"kappa_job_last_batch_timestamp_seconds{{{JOB}}}", "values": "0+60x10 600x30"},
        ],
        "alert_rule_test": [
            {"eval_time": "20m", "alertname": "KappaJobFallingBehind", "exp_alerts": []},
            {"eval_time": "39m", "alertname": "KappaJobNoBatch", "exp_alerts": []},
        ],
    },
    {
        "interval": "1m",
        "input_series": [
            # Its lag stays behind while it completes no batch for good: paged 5m after 10m without a batch.
            {"series": LAG, "values": "500x40"},
            {"series": f"kappa_job_running{{{JOB}}}", "values": "1x40"},
            {"series": f"kappa_job_last_batch_timestamp_seconds{{{JOB}}}", "values": "0x40"},
            # A query that waits for a lost service: not running, restarted in the last ten minutes.
            {"series": 'kappa_job_running{job="sessionize", version="2"}', "values": "0x40"},
            # 20 undecodable records a minute (paged once over 100 in ten minutes), and late records (never).
            {"series": f'kappa_job_side_rows_total{{{JOB}, kind="undecodable"}}', "values": "0+20x40"},
            {"series": f'kappa_job_side_rows_total{{{JOB}, kind="late-event"}}', "values": "0+500x40"},
            {"series": 'kappa_job_restarts_total{job="sessionize", version="2", service="kafka"}', "values": "0+1x40"},
            {"series": f"kappa_job_replay_progress_ratio{{{REPLAY}}}", "values": "0 0.1 0.2 0.3 0.4x37"},
            {"series": f"kappa_job_last_batch_timestamp_seconds{{{REPLAY}}}", "values": "0 60 120 180 240x37"},
            {
                "series": 'up{job="kappa", instance="127.0.0.1:4000", kappa_version="sessionize.v2"}',
                "values": "1x5 0x35",
            },
        ],
        "alert_rule_test": [
            {"eval_time": "15m", "alertname": "KappaJobNoBatch", "exp_alerts": []},
            {
                "eval_time": "17m",
                "alertname": "KappaJobNoBatch",
                "exp_alerts": [
                    {
                        "exp_labels": {"severity": "page", "job": "raw_clicks", "version": "1"},
                        "exp_annotations": {
                            "summary": "raw_clicks v1 completed no batch for ten minutes with input left"
                        },
                    }
                ],
            },
            {
                "eval_time": "12m",
                "alertname": "KappaJobWaitingForAService",
                "exp_alerts": [
                    {
                        "exp_labels": {"severity": "ticket", "job": "sessionize", "version": "2"},
                        "exp_annotations": {
                            "summary": "sessionize v2 waits for a lost service: see `kappa jobs status`"
                        },
                    }
                ],
            },
            {"eval_time": "4m", "alertname": "KappaJobDeadLetters", "exp_alerts": []},  # 80 so far
            {
                "eval_time": "12m",
                "alertname": "KappaJobDeadLetters",
                "exp_alerts": [
                    {
                        "exp_labels": {
                            "severity": "ticket",
                            "job": "raw_clicks",
                            "version": "1",
                            "kind": "undecodable",
                        },
                        "exp_annotations": {
                            "summary": "raw_clicks v1 dead-lettered 200 records (undecodable) in 10 minutes: see "
                            "`kappa dlq inspect`"
                        },
                    }
                ],
            },
            # A replay that read 40 % of its plan by minute 4, then completed no batch: a ticket from minute 25.
            {"eval_time": "24m", "alertname": "KappaReplayStalled", "exp_alerts": []},
            {
                "eval_time": "26m",
                "alertname": "KappaReplayStalled",
                "exp_alerts": [
                    {
                        "exp_labels": {"severity": "ticket", "job": "enrich_clicks", "version": "3"},
                        "exp_annotations": {
                            "summary": "the replay of enrich_clicks v3 stalled at 40% of its plan: see `kappa jobs "
                            "status` and its log"
                        },
                    }
                ],
            },
            {"eval_time": "7m", "alertname": "KappaJobDown", "exp_alerts": []},
            {
                "eval_time": "9m",
                "alertname": "KappaJobDown",
                "exp_alerts": [
                    {
                        "exp_labels": {
                            "severity": "page",
                            "job": "kappa",
                            "instance": "127.0.0.1:4000",
                            "kappa_version": "sessionize.v2",
                        },
                        "exp_annotations": {
                            "summary": "sessionize.v2 no longer answers at 127.0.0.1:4000: see `kappa jobs status`"
                        },
                    }
                ],
            },
        ],
    },
]


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None, "promtool is missing: `make setup` installs Debian's prometheus package"
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=60)


def test_the_rules_page_when_a_job_falls_behind_or_stalls_and_not_while_it_catches_up(tmp_path: Path) -> None:
    tests = tmp_path / "alerts_test.yml"
    tests.write_text(yaml.safe_dump({"rule_files": [str(RULES)], "evaluation_interval": "1m", "tests": TESTS}))
    done = _promtool("test", "rules", str(tests))
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_stacks_prometheus_configuration_is_valid(tmp_path: Path) -> None:
    settings = load_settings(state_dir=tmp_path, prometheus_scrape_interval_s=2)
    config = tmp_path / "prometheus.yml"
    config.write_text(prometheus_config(settings))
    loaded = json.loads(config.read_text())
    assert loaded["rule_files"] == [str(RULES)]
    assert loaded["scrape_configs"][0]["file_sd_configs"][0]["files"] == [
        str(settings.deployments_path / "*.scrape.json")
    ]
    done = _promtool("check", "config", str(config))
    assert done.returncode == 0, done.stdout + done.stderr
