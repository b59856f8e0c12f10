"""`kappa jobs new`: the scaffolded job and its test pass as generated, lint-clean, in a copy of the project."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _run(copy: Path, *command: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAPPA_")}
    env |= {"PYTHONPATH": str(copy), "KAPPA_SCHEMAS_DIR": str(copy / "schemas")}
    return subprocess.run(command, cwd=copy, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_a_scaffolded_job_passes_its_own_test_and_the_linters(tmp_path: Path) -> None:
    copy = tmp_path / "project"
    for folder in ("jobs", "schemas", "tests"):
        shutil.copytree(REPO / folder, copy / folder, ignore=shutil.ignore_patterns("__pycache__", "build"))
    shutil.copy(REPO / "pyproject.toml", copy)
    kappa = (sys.executable, "-m", "kappa.cli")

    made = _run(copy, *kappa, "jobs", "new", "bounced_clicks", "--input", "clicks")
    assert made.returncode == 0, made.stderr
    assert made.stdout.splitlines()[:4] == [
        "wrote jobs/bounced_clicks/__init__.py",
        "wrote jobs/bounced_clicks/transforms.py",
        "wrote jobs/bounced_clicks/declaration.py",
        "wrote tests/unit/test_bounced_clicks.py",
    ]
    listed = _run(copy, *kappa, "jobs", "list")
    assert any(line.split()[:3] == ["bounced_clicks", "1", "clicks"] for line in listed.stdout.splitlines())

    generated = ["jobs/bounced_clicks", "tests/unit/test_bounced_clicks.py"]
    ruff = (sys.executable, "-m", "ruff")
    linted = _run(copy, *ruff, "check", *generated)
    assert linted.returncode == 0, linted.stdout
    formatted = _run(copy, *ruff, "format", "--check", *generated)
    assert formatted.returncode == 0, formatted.stdout
    tested = _run(
        copy, sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/unit/test_bounced_clicks.py"
    )
    assert tested.returncode == 0, tested.stdout[-3000:]
    assert "1 passed" in tested.stdout

    again = _run(copy, *kappa, "jobs", "new", "bounced_clicks", "--input", "clicks")  # nothing is overwritten
    assert again.returncode == 2
    assert "kappa: error: a job 'bounced_clicks' exists already (jobs/bounced_clicks)" in again.stderr
