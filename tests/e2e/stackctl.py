"""Helpers for tests that run the `kappa` CLI against a stack of their own (own ports, own folder)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import psutil


@dataclass(frozen=True)
class Run:
    code: int
    out: str
    err: str


def kappa(*args: str, env: dict[str, str], timeout: float = 300) -> Run:
    """Run the CLI as a user would: a separate process, settings only from the environment."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("KAPPA_")}
    full_env.update(env)
    result = subprocess.run(
        [sys.executable, "-m", "kappa.cli", *args],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return Run(result.returncode, result.stdout, result.stderr)


def stack_processes(stack_dir: Path) -> list[int]:
    """Pids of every process that belongs to the stack in `stack_dir` (its JVMs carry that folder)."""
    marker = f"@{stack_dir}"
    pids = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            cmdline = " ".join(process.cmdline())
            if "-Dkappa.component=" in cmdline and marker in cmdline:
                pids.append(process.pid)
    return pids
