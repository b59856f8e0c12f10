"""The fault points' plan (kappa.runtime.faults): read from KAPPA_TEST_KILL_AT, fired once, at its point only."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kappa.core.errors import KappaError
from kappa.runtime.faults import KILL_AT, FaultPlan, FaultPoint


def test_unarmed_and_armed_plans_are_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KILL_AT, raising=False)
    assert FaultPlan.from_environment().point is None
    monkeypatch.setenv(KILL_AT, "between-writes:3")
    plan = FaultPlan.from_environment()
    assert (plan.point, plan.batch) == (FaultPoint.BETWEEN_WRITES, 3)
    monkeypatch.setenv(KILL_AT, "after-writes")
    assert FaultPlan.from_environment().batch == 1
    monkeypatch.setenv(KILL_AT, "after-writes:2@page_stats_v1")
    plan = FaultPlan.from_environment()
    assert (plan.point, plan.batch, plan.query) == (FaultPoint.AFTER_WRITES, 2, "page_stats_v1")


@pytest.mark.parametrize("armed", ["inside-merge:2", "after-writes:two", "after-writes:x@q"])
def test_a_bad_plan_names_the_points(monkeypatch: pytest.MonkeyPatch, armed: str) -> None:
    monkeypatch.setenv(KILL_AT, armed)
    with pytest.raises(KappaError, match="before-writes, between-writes, after-writes"):
        FaultPlan.from_environment()


def test_the_process_dies_the_nth_time_a_batch_reaches_its_point_and_nowhere_else() -> None:
    script = """
from kappa.runtime.faults import FaultPlan, FaultPoint
plan = FaultPlan(FaultPoint.BETWEEN_WRITES, 2)
for point in FaultPoint:
    plan.reached(point, "q", 7)  # the first time
plan.reached(FaultPoint.BETWEEN_WRITES, "q", 8, counts=lambda: False)  # a batch that does not count
plan.reached(FaultPoint.AFTER_WRITES, "q", 8)
print("alive", flush=True)
plan.reached(FaultPoint.BETWEEN_WRITES, "q", 9, lambda: "what it did", counts=lambda: True)
print("not reached", flush=True)
"""
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert run.returncode == -9
    assert run.stdout == "alive\n"
    assert run.stderr == "fault point: SIGKILL at between-writes of q batch 9 (#2 here): what it did\n"


def test_a_plan_for_one_query_counts_that_query_s_batches_only() -> None:
    script = """
from kappa.runtime.faults import FaultPlan, FaultPoint
plan = FaultPlan(FaultPoint.AFTER_WRITES, 2, "views_v1")
for batch_id in range(5):
    plan.reached(FaultPoint.AFTER_WRITES, "topics_v1", batch_id)  # another job of the same process
plan.reached(FaultPoint.AFTER_WRITES, "views_v1", 3)
print("alive", flush=True)
plan.reached(FaultPoint.AFTER_WRITES, "views_v1", 4)
print("not reached", flush=True)
"""
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert run.returncode == -9
    assert run.stdout == "alive\n"
    assert run.stderr == "fault point: SIGKILL at after-writes of views_v1 batch 4 (#2 here)\n"
