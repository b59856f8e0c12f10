"""docs/tutorial.md, run as written: every file it shows is written, every shell line it shows is run, in order,
in a copy of the repository with a stack of its own (the tutorial starts and stops it), and the tables it builds
are checked in DuckDB against counts computed here from the tutorial's own data.

The one liberty: `uv run X` runs X from this test's environment (the same installed project) instead of asking uv
to resolve it again in the copy.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest

from kappa.core.settings import load_settings
from kappa.ops.duckdb_delta import connect
from kappa.spark.session import SHORT_RUN_JVM
from kappa.stack import LocalStack

REPO = Path(__file__).resolve().parents[2]
TUTORIAL = REPO / "docs" / "tutorial.md"
PORTS = {"KAPPA_KAFKA_PORT": "25092", "KAPPA_CONTROLLER_PORT": "25192", "KAPPA_REGISTRY_PORT": "25081"}
# A fenced block, with the file it is when the line before says so.
BLOCK = re.compile(r"(?:<!-- file: (?P<path>\S+) -->\n)?```(?P<lang>\w*)\n(?P<body>.*?)```", re.S)
SHELL = 'set -euo pipefail\nuv() { if [ "$1" = run ]; then shift; fi; "$@"; }\n'


def tutorial_steps() -> list[tuple[str, str]]:
    """(path, text) for a file to write; ("", lines) for shell lines to run."""
    steps = []
    for block in BLOCK.finditer(TUTORIAL.read_text()):
        if block["path"]:
            steps.append((block["path"], block["body"]))
        elif block["lang"] == "bash":
            steps.append(("", block["body"]))
    return steps


def expected_clicks(steps: list[tuple[str, str]], *, bots: bool) -> Counter[tuple[datetime, str]]:
    """Clicks per (10-second window start, advertiser), from the tutorial's data, computed without the platform."""
    files = dict(steps)
    campaigns = [json.loads(line) for line in files["campaigns.jsonl"].splitlines() if line]
    advertisers = {row["campaign_id"]: row["advertiser"] for row in campaigns}
    counts: Counter[tuple[datetime, str]] = Counter()
    for event in csv.DictReader(io.StringIO(files["ad_events.csv"])):
        if event["event_type"] != "CLICK" or not event["campaign_id"] or (event["is_bot"] == "true" and not bots):
            continue  # an impression; a record breaking the contract (a dead letter); a bot, from v2 on
        at = datetime.fromisoformat(event["event_time"])
        window = at.replace(second=at.second // 10 * 10)
        counts[(window, advertisers.get(event["campaign_id"], "unknown"))] += 1
    return counts


def table_counts(path: Path) -> Counter[tuple[datetime, str]]:
    rows = connect().sql(f"SELECT window_start, advertiser, clicks FROM delta_scan('{path}')").fetchall()
    assert len(rows) == len({(w, a) for w, a, _ in rows}), rows  # one row per key
    return Counter({(w.replace(tzinfo=UTC) if w.tzinfo is None else w.astimezone(UTC), a): c for w, a, c in rows})


@pytest.mark.slow
def test_the_tutorial_runs_as_written(tmp_path: Path) -> None:
    copy = tmp_path / "repo"
    for folder in ("jobs", "schemas"):  # what a user's checkout has that the tutorial reads or extends
        shutil.copytree(REPO / folder, copy / folder, ignore=shutil.ignore_patterns("__pycache__"))
    state = copy / ".state"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAPPA_")}
    env |= PORTS | {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}",  # the project's `kappa` and `python`
        "PYTHONPATH": str(copy),  # the copy's jobs/
        "KAPPA_STACK_DIR": str(state / "stack"),
        "KAPPA_SCHEMAS_DIR": str(copy / "schemas"),
        "KAPPA_DELTA_ROOT": str(state / "delta"),
        "KAPPA_CHECKPOINT_ROOT": str(state / "checkpoints"),
        "KAPPA_DEPLOYMENTS_DIR": str(state / "deployments"),
        "KAPPA_SPARK_SHUFFLE_PARTITIONS": "2",
        "KAPPA_SPARK_DRIVER_JAVA_OPTIONS": SHORT_RUN_JVM,
    }
    steps = tutorial_steps()
    outputs: list[tuple[str, str]] = []  # (command, its output)
    timings: list[tuple[str, float]] = []
    started = time.monotonic()
    try:
        for path, text in steps:
            if path:
                (copy / path).parent.mkdir(parents=True, exist_ok=True)
                (copy / path).write_text(text)
                continue
            for line in text.splitlines():
                command = line.split("  #")[0].strip()
                if not command or command.startswith("#"):
                    continue
                began = time.monotonic()
                done = subprocess.run(["bash", "-c", SHELL + command], cwd=copy, env=env, capture_output=True,
                                      text=True, timeout=900)  # fmt: skip
                timings.append((command, time.monotonic() - began))
                assert done.returncode == 0, f"`{command}` exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
                outputs.append((command, done.stdout))
    finally:
        settings = load_settings(
            kafka_port=25092, controller_port=25192, registry_port=25081, stack_dir=state / "stack"
        )
        LocalStack(settings).down()  # when a step failed before the tutorial's own `kappa down`
    wall = time.monotonic() - started
    print(f"\nthe tutorial ran in {wall:.0f} s:")
    for command, seconds in timings:
        print(f"  {seconds:6.1f} s  {command}")

    # v1 counted every click of a known or unknown campaign; v2, after the replay, only the humans' clicks.
    v1, v2 = state / "delta" / "ad_clicks" / "v1", state / "delta" / "ad_clicks" / "v2"
    assert table_counts(v1) == expected_clicks(steps, bots=True)
    assert table_counts(v2) == expected_clicks(steps, bots=False)
    assert sum(expected_clicks(steps, bots=True).values()) == 10  # the page's sentence, held to the data
    queries = [out.splitlines()[0] for command, out in outputs if command == "uv run python query.py"]
    assert queries == [str(v1), str(v2)]  # the query followed the cutover
    [ran] = [out for command, out in outputs if command.startswith("uv run kappa jobs run ad_clicks")]
    events = sum(1 for _ in csv.DictReader(io.StringIO(dict(steps)["ad_events.csv"])))
    assert f", {events} input rows" in ran, ran  # each record read once (no second query reading them again)
    [dead] = [out for command, out in outputs if command == "uv run kappa dlq inspect ad_events"]
    assert "e-13" in dead, dead  # the event without a campaign, set aside with the rule it broke
    assert not list(copy.glob("*.rejected.jsonl"))  # every row of the tutorial's data was produced
