"""The README's `make demo` path: `kappa demo` on its own stack (own ports), start to finish."""

import re

import pytest

from tests.e2e.stackctl import kappa

DEMO_PORTS = {"KAPPA_KAFKA_PORT": "26092", "KAPPA_CONTROLLER_PORT": "26192", "KAPPA_REGISTRY_PORT": "26081"}


@pytest.mark.timeout(1200)
def test_demo_runs_the_pipeline_and_reconciles() -> None:
    run = kappa("demo", "--events", "3000", "--malformed-share", "0.02", env=DEMO_PORTS, timeout=900)
    assert run.code == 0, run.err[-3000:]
    reconciled = re.search(r"reconciled: (\d+) in = (\d+) in Delta \+ (\d+) dead-lettered", run.out)
    assert reconciled, run.out
    sent, rows, dead = map(int, reconciled.groups())
    assert sent == 3000
    assert rows + dead == sent
    assert 0 < dead < 150
    for job in ("enrich_clicks", "sessionize", "page_stats", "user_activity", "sessions_table", "raw_clicks"):
        assert re.search(rf"{job} v\d+ -> .*: \d+ records", run.out), job
    assert "Top pages" in run.out
    sessions = re.search(r"sessions: (\d+), ([\d.]+) clicks on average", run.out)
    assert sessions, run.out
    assert int(sessions.group(1)) > 30
    assert "users by segment (user_activity):" in run.out
    assert "/page/0000" in run.out  # the Zipf head is the most viewed page
    assert "stack stopped and demo data removed" in run.out
