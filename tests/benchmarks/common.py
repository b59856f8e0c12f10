"""What the benchmarks share: a stack of their own, timing, and a result line."""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from kappa.settings import KappaSettings, load_settings
from kappa.stack import LocalStack

BENCH_PORTS = {"kafka_port": 27092, "controller_port": 27192, "registry_port": 27081}


@contextmanager
def bench_stack(**overrides: Any) -> Iterator[KappaSettings]:
    base = load_settings()
    settings = load_settings(
        **BENCH_PORTS,
        stack_dir=base.state_dir / "bench-stack",
        delta_root=str(base.state_dir / "bench" / "delta"),
        checkpoint_root=str(base.state_dir / "bench" / "checkpoints"),
        kafka_heap="1g",
        **overrides,
    )
    stack = LocalStack(settings)
    stack.down(purge=True)
    stack.up()
    try:
        yield settings
    finally:
        stack.down(purge=True)


def best_of(runs: int, measure: Callable[[], float]) -> float:
    """The shortest of several runs (seconds): the least disturbed by the rest of the machine."""
    return min(measure() for _ in range(runs))


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def report(name: str, rows: list[dict[str, Any]]) -> None:
    keys = list(rows[0])
    widths = {k: max(len(k), *(len(_fmt(r[k])) for r in rows)) for k in keys}
    print("  ".join(k.ljust(widths[k]) for k in keys))
    for row in rows:
        print("  ".join(_fmt(row[k]).ljust(widths[k]) for k in keys))
    print("RESULT " + json.dumps({"benchmark": name, "machine": platform.node(), "rows": rows}))


def _fmt(value: Any) -> str:
    return f"{value:,.0f}" if isinstance(value, float) and value > 100 else str(value)
