"""`kappa down --purge` also deletes the Spark drivers' log folder, but only of the state folder its stack lives in
(issue 41: `.state/logs/` stayed)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from kappa.cli.stack import cmd_down, driver_logs_to_purge
from kappa.core.settings import KappaSettings, load_settings


def _settings(state: Path, stack: Path | None = None) -> KappaSettings:
    """Every folder --purge deletes under `state` (an environment's KAPPA_* roots must not point it elsewhere)."""
    return load_settings(
        state_dir=state,
        stack_dir=stack,
        checkpoint_root=str(state / "checkpoints"),
        delta_root=str(state / "delta"),
        deployments_dir=state / "deployments",
    )


def test_the_state_folders_logs_go_with_a_stack_that_lives_in_it(tmp_path: Path) -> None:
    assert driver_logs_to_purge(_settings(tmp_path / "state")) == tmp_path / "state" / "logs"


def test_a_stack_kept_elsewhere_leaves_the_state_folders_logs_to_the_drivers_it_did_not_start(tmp_path: Path) -> None:
    assert driver_logs_to_purge(_settings(tmp_path / "state", tmp_path / "elsewhere")) is None


def test_purge_with_nothing_running_deletes_the_logs_last(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state"
    for folder in ("stack", "checkpoints", "delta", "deployments", "logs"):
        (state / folder).mkdir(parents=True)
    (state / "logs" / "spark.log").write_text("a driver's warning\n")

    assert cmd_down(_settings(state), argparse.Namespace(purge=True)) == 0
    assert list(state.iterdir()) == []
    deleted = [line.removeprefix("deleted ") for line in capsys.readouterr().out.splitlines()[1:]]
    assert deleted == [str(state / f) for f in ("stack", "checkpoints", "delta", "deployments", "logs")]
