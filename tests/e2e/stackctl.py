"""Helpers for tests that run the `kappa` CLI against a stack of their own (own ports, own folder)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


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
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "-Dkappa.component=" in cmdline and marker in cmdline:
            pids.append(int(proc.name))
    return pids
