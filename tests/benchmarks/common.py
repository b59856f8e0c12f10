"""What the benchmarks share: a stack of their own, timing, and a result line."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from typing import Any

from kappa.core.settings import KappaSettings, load_settings
from kappa.stack import LocalStack
from tests.environment import stack_env

BENCH_PORTS = {"kafka_port": 27092, "controller_port": 27192, "registry_port": 27081}


def bench_settings(**overrides: Any) -> KappaSettings:
    """The benchmarks' settings: their own ports, stack folder, Delta and checkpoint roots."""
    base = load_settings()
    return load_settings(
        **BENCH_PORTS,
        stack_dir=base.state_dir / "bench-stack",
        delta_root=str(base.state_dir / "bench" / "delta"),
        checkpoint_root=str(base.state_dir / "bench" / "checkpoints"),
        deployments_dir=base.state_dir / "bench" / "deployments",
        kafka_heap="1g",
        **overrides,
    )


@contextmanager
def bench_stack(keep: bool = False, **overrides: Any) -> Iterator[KappaSettings]:
    """A fresh bench stack, purged afterwards; with `keep`, the running one (if any) is used and left running,
    so a benchmark can reuse data it produced before (it must check that data itself)."""
    settings = bench_settings(**overrides)
    stack = LocalStack(settings)
    if not keep:
        _purge(stack, settings)
    stack.up()  # starts only what is not running
    try:
        yield settings
    finally:
        if not keep:
            _purge(stack, settings)


def _purge(stack: LocalStack, settings: KappaSettings) -> None:
    """The stack and everything that refers to its topics: checkpoints, Delta tables, deployments' state."""
    stack.down(purge=True)
    stack.purge_derived_state()


def run_main(main: Callable[[], None]) -> None:
    """A benchmark's entry point. Ctrl-C stops it (its stack is stopped on the way out, by bench_stack) with one
    line and status 130, as a shell expects, instead of a traceback."""
    try:
        main()
    except KeyboardInterrupt:
        print("interrupted: the benchmark stopped before its end; nothing was reported", file=sys.stderr)
        raise SystemExit(130) from None


def best_of(runs: int, measure: Callable[[], float]) -> float:
    """The shortest of several runs (seconds): the least disturbed by the rest of the machine."""
    return min(measure() for _ in range(runs))


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def machine_speed(seconds: float = 1.0) -> dict[str, float]:
    """How fast this machine's cores are now, by two fixed kernels: SHA-256 (a core's own speed) and copying 256 MB
    (its memory bandwidth), on one core and then on every core at once. This shared host's cores ran the same code
    at half their pace on another day, with no steal to show for it: a figure is compared with another only beside
    these."""
    alone = _kernels(seconds)
    cores = os.cpu_count() or 1
    with ProcessPoolExecutor(cores) as pool:
        together = list(pool.map(_kernels, [seconds] * cores))
    return {
        "sha256_MBps_one_core": alone["sha256"],
        "sha256_MBps_per_core_all_busy": round(sum(t["sha256"] for t in together) / cores),
        "copy_MBps_one_core": alone["copy"],
        "copy_MBps_per_core_all_busy": round(sum(t["copy"] for t in together) / cores),
    }


def _kernels(seconds: float) -> dict[str, float]:
    block = os.urandom(1 << 20)
    hashed, started = 0, time.perf_counter()
    while (spent := time.perf_counter() - started) < seconds:
        hashlib.sha256(block).digest()
        hashed += 1
    sha = hashed / spent
    source, target = bytearray(256 << 20), bytearray(256 << 20)
    target[:] = source  # the pages exist before the clock runs: a copy, not page faults
    copied, started = 0, time.perf_counter()
    while (spent := time.perf_counter() - started) < seconds:
        target[:] = source
        copied += 256
    return {"sha256": round(sha), "copy": round(copied / spent)}


def report(name: str, rows: list[dict[str, Any]], **sections: list[dict[str, Any]]) -> None:
    """Print the rows (and each further section) as tables, then one `RESULT {json}` line with all of them."""
    print_table(rows)
    for title, section in sections.items():
        if section:
            print(f"\n{title}:")
            print_table(section)
    print("RESULT " + json.dumps({"benchmark": name, "machine": platform.node(), "rows": rows, **sections}))


def print_table(rows: list[dict[str, Any]]) -> None:
    keys = list(dict.fromkeys(k for row in rows for k in row))
    widths = {k: max(len(k), *(len(_fmt(r.get(k, ""))) for r in rows)) for k in keys}
    print("  ".join(k.ljust(widths[k]) for k in keys))
    for row in rows:
        print("  ".join(_fmt(row.get(k, "")).ljust(widths[k]) for k in keys))


def _fmt(value: Any) -> str:
    return f"{value:,.0f}" if isinstance(value, float) and value > 100 else str(value)


def cli_env(settings: KappaSettings) -> dict[str, str]:
    """The environment that points the `kappa` CLI (and what it deploys) at the bench stack and its folders."""
    return stack_env(
        settings,
        KAPPA_CHECKPOINT_ROOT=str(settings.checkpoint_root),
        KAPPA_DELTA_ROOT=str(settings.delta_root),
        KAPPA_DEPLOYMENTS_DIR=str(settings.deployments_path),
        KAPPA_DEPLOY_LAUNCHER=settings.deploy_launcher.value,
        KAPPA_METRICS_ENABLED=str(settings.metrics_enabled).lower(),  # KAPPA_METRICS_ENABLED=false: an A/B of them
        KAPPA_SPARK_MASTER=settings.spark_master,
        KAPPA_SPARK_POLLING_DELAY_MS=str(settings.spark_polling_delay_ms),
        KAPPA_SPARK_UI=str(settings.spark_ui).lower(),
        # Day two: what the soak shortens so that weeks of growth show in an hour (make soak-live).
        KAPPA_DELTA_FILE_RETENTION_HOURS=str(settings.delta_file_retention_hours),
        KAPPA_DELTA_LOG_RETENTION_HOURS=str(settings.delta_log_retention_hours),
        KAPPA_DELTA_AUTO_COMPACT=str(settings.delta_auto_compact).lower(),  # false: an A/B of its cost per batch
        KAPPA_DELTA_COMPACT_MIN_FILES=str(settings.delta_compact_min_files),
        KAPPA_STREAMING_BATCHES_RETAINED=str(settings.streaming_batches_retained),
        KAPPA_SPARK_STATE_MEMORY_MB=str(settings.spark_state_memory_mb),
        KAPPA_SPARK_DRIVER_JAVA_OPTIONS=settings.spark_driver_java_options,  # the soak's GC log
    )
