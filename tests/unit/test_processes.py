"""kappa.stack.process on real processes of this machine: what the stack and the deployments know a process by."""

from __future__ import annotations

import os
import signal
import sys
import uuid
from pathlib import Path

from kappa.core.waiting import wait_until
from kappa.stack import process


def _sleeper(tmp_path: Path) -> tuple[int, str]:
    marker = f"kappa-test-{uuid.uuid4().hex}"
    pid = process.spawn(
        [sys.executable, "-c", "import time; time.sleep(60)", marker], marker, tmp_path / "log", tmp_path
    )
    return pid, marker


def test_a_spawned_process_is_known_by_its_marker_and_its_group(tmp_path: Path) -> None:
    pid, marker = _sleeper(tmp_path)
    try:
        assert process.is_running(pid, marker)
        assert not process.is_running(pid, "another-marker")  # a reused pid shows another command line
        assert (process.command_line(pid) or [])[-1] == marker
        assert os.getpgid(pid) == pid  # its own session, so `stop` can signal the whole group
        assert process.group_members(pid) == [pid]
    finally:
        assert process.stop(pid, marker, timeout_s=10)
    assert not process.is_running(pid, marker)
    # Gone for good: reaped (not left a zombie), its group empty. An exiting process lingers a moment.
    wait_until(
        lambda: process.command_line(pid) is None and not process.exists(pid) and not process.group_members(pid),
        10,
        "the stopped process is reaped and its group is empty",
    )


def test_a_child_that_exited_is_not_running_and_is_reaped(tmp_path: Path) -> None:
    pid, marker = _sleeper(tmp_path)
    os.kill(pid, signal.SIGKILL)
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)  # it has exited: a zombie until its parent reaps it
    assert process.exists(pid)
    assert not process.is_running(pid, marker)
    assert not process.exists(pid)  # is_running reaped it


# A leader that stops on SIGTERM, and a child in its group that ignores SIGTERM (a JVM its driver failed to stop).
STUBBORN_CHILD = """
import signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                          "print('child', flush=True); time.sleep(60)"])
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
time.sleep(60)
"""


def test_end_group_sigterms_then_kills_what_is_left_of_the_group(tmp_path: Path) -> None:
    marker = f"kappa-test-{uuid.uuid4().hex}"
    log = tmp_path / "log"
    pid = process.spawn([sys.executable, "-c", STUBBORN_CHILD, marker], marker, log, tmp_path)
    wait_until(lambda: "child" in log.read_text() and len(process.group_members(pid)) == 2, 10, "the child runs")
    # The leader alone is signalled and stops at once; the child, left over, is killed with the group.
    process.end_group(pid, lambda: process.is_running(pid, marker), 5, marker, term=[pid], whole_group=True)
    assert process.group_members(pid) == []


def test_end_group_kills_a_group_that_ignores_sigterm_after_the_timeout(tmp_path: Path) -> None:
    marker = f"kappa-test-{uuid.uuid4().hex}"
    ignores = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    pid = process.spawn([sys.executable, "-c", ignores, marker], marker, tmp_path / "log", tmp_path)
    process.end_group(pid, lambda: process.is_running(pid, marker), 0.5, marker)
    assert not process.is_running(pid, marker)
