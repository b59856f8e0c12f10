"""What the benchmarks share: a stack of their own, timing, and a result line."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil

from kappa.core.settings import KappaSettings, Security, load_settings
from kappa.stack import LocalStack
from kappa.stack.spark_standalone import WORKER_PREFIX, is_spark, master_url
from tests.environment import stack_env

# Apart from the dev stack's (9092, 7077, 8180) and the tests' (22092, 22077, 22180). Spark worker i listens on the
# master's ports + i: up to 3 workers before 27081, the registry's.
BENCH_PORTS = {
    "kafka_port": 27092,
    "controller_port": 27192,
    "registry_port": 27081,
    "spark_master_port": 27077,
    "spark_master_ui_port": 27180,
}
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


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
    else:
        _stop_spark(stack)
    stack.up()  # starts only what is not running: the settings' Spark workers too
    try:
        yield settings
    finally:
        if not keep:
            _purge(stack, settings)


def purge_bench_stack() -> None:
    """Stop the bench stack (its Spark workers too) and delete it with what refers to its topics."""
    settings = bench_settings()
    _purge(LocalStack(settings), settings)


def _purge(stack: LocalStack, settings: KappaSettings) -> None:
    """The stack and everything that refers to its topics: checkpoints, Delta tables, deployments' state."""
    stack.down(purge=True)
    stack.purge_derived_state()


def _stop_spark(stack: LocalStack) -> None:
    """A kept stack is kept for its topics. Its Spark master and workers stop: `up` would keep workers of another
    run's number and cores, and a local run would have idle daemons beside it; `up` then starts what this run's
    settings ask for. Workers first (a worker whose master went retries it)."""
    for name in sorted((c.name for c in stack.status() if is_spark(c.name)), reverse=True):
        stack.stop_component(name)


# ------------------------------------------------------------------------ Spark: local or the stack's cluster --


def add_spark_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that choose where a benchmark's Spark applications run, and --json-out."""
    parser.add_argument(
        "--spark-master",
        default=None,
        help="the applications' Spark master, e.g. local[2] (default: KAPPA_SPARK_MASTER, local[*])",
    )
    parser.add_argument(
        "--spark-workers",
        type=int,
        default=0,
        help="start this many Spark standalone workers in the bench stack (at most 3 on its ports) "
        f"and run on them, spark://127.0.0.1:{BENCH_PORTS['spark_master_port']} (0: local)",
    )
    parser.add_argument("--spark-worker-cores", type=int, default=None, help="cores each worker offers")
    parser.add_argument(
        "--spark-cores-max",
        type=int,
        default=None,
        help="cores one application takes at most on the workers (KAPPA_SPARK_CORES_MAX)",
    )
    parser.add_argument(
        "--spark-executor-memory",
        default=None,
        help="each executor's heap on the workers (default: the local driver's, KAPPA_SPARK_DRIVER_MEMORY, over N)",
    )
    parser.add_argument(
        "--secure",
        action="store_true",
        help="a secured bench stack (kappa up --secure): TLS, SCRAM logins, each job as its own principal",
    )
    parser.add_argument("--json-out", type=Path, default=None, help="also write the RESULT line's JSON to this file")


def spark_overrides(args: argparse.Namespace, worker_cores: int = 1, cores_max: int = 0) -> dict[str, Any]:
    """The settings `add_spark_arguments`' options ask for (a secured stack with --secure); `worker_cores` and
    `cores_max` are the benchmark's defaults. On workers, each executor gets 1/N of the local driver's heap and of
    its RocksDB budget: the cluster holds as much memory for the work as the local driver that did it all (its
    driver's own heap comes on top)."""
    if args.spark_workers and args.spark_master:
        raise SystemExit("--spark-master or --spark-workers, not both: the workers' master is the bench stack's own")
    secured: dict[str, Any] = {"security": Security.SASL_SSL} if args.secure else {}
    if not args.spark_workers:
        return secured | ({"spark_master": args.spark_master} if args.spark_master else {})
    local = bench_settings()
    workers = args.spark_workers
    executor_mb = _megabytes(args.spark_executor_memory or f"{_megabytes(local.spark_driver_memory) // workers}m")
    return secured | {
        "spark_workers": workers,
        "spark_worker_cores": args.spark_worker_cores or worker_cores,
        "spark_cores_max": cores_max if args.spark_cores_max is None else args.spark_cores_max,
        "spark_master": master_url(local),
        "spark_executor_memory": f"{executor_mb}m",
        # room on each worker for two applications' executors (bench_live's job host and real-time job)
        "spark_worker_memory": f"{max(_megabytes(local.spark_worker_memory), 2 * executor_mb)}m",
        "spark_state_memory_mb": local.spark_state_memory_mb // workers,
    }


def _megabytes(size: str) -> int:
    """A JVM size of the settings (`2g`, `512m`) in MiB."""
    return int(size[:-1]) * (1024 if size.endswith("g") else 1)


def spark_setup(settings: KappaSettings, slots: int) -> dict[str, Any]:
    """Where the applications ran, for the report: the master, the workers and their cores, memory, `slots` (the
    task slots the benchmark's application had)."""
    cluster = settings.spark_master.startswith("spark://")
    return {
        "master": settings.spark_master,
        "workers": settings.spark_workers if cluster else 0,
        "cores_per_worker": settings.spark_worker_cores if cluster else "",
        "cores_max": (settings.spark_cores_max or "all") if cluster else "",
        "task_slots": slots,
        "driver_memory": settings.spark_driver_memory,
        "executor_memory": settings.spark_executor_memory if cluster else "(in the driver)",
        "worker_memory": settings.spark_worker_memory if cluster else "",
        "state_memory_mb": settings.spark_state_memory_mb,
        "shuffle_partitions": settings.spark_shuffle_partitions,
        "machine_cores": os.cpu_count() or 1,
    }


def local_slots(master: str, star: int) -> int:
    """The task slots of a local master (`local[N]`: N; `local[*]`: `star`); 0 for any other master."""
    if not master.startswith("local"):
        return 0
    if master == "local":
        return 1
    inside = master.partition("[")[2].rstrip("]").split(",")[0]  # local[N] or local[N,retries]
    return star if inside == "*" else int(inside)


def cluster_slots(settings: KappaSettings) -> int:
    """The task slots one application gets on the stack's workers: their cores, or its cap."""
    cores = settings.spark_workers * settings.spark_worker_cores
    return min(cores, settings.spark_cores_max) if settings.spark_cores_max else cores


def executors_of(worker_pid: int | None) -> list[int]:
    """The executor JVMs a Spark worker runs (it starts each as its child process)."""
    try:
        children = psutil.Process(worker_pid).children() if worker_pid else []
    except psutil.Error:
        return []
    found = []
    for child in children:
        with contextlib.suppress(psutil.Error):
            if EXECUTOR_CLASS in " ".join(child.cmdline()):
                found.append(child.pid)
    return found


def executor_pids(settings: KappaSettings) -> list[int]:
    """Every executor JVM of the bench stack's Spark workers."""
    return [
        pid for c in LocalStack(settings).status() if c.name.startswith(WORKER_PREFIX) for pid in executors_of(c.pid)
    ]


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


def report(
    name: str, rows: list[dict[str, Any]], json_out: Path | None = None, **sections: list[dict[str, Any]]
) -> None:
    """Print the rows (and each further section) as tables, then one `RESULT {json}` line with all of them; with
    `json_out`, the same JSON in that file too (what bench_cluster.py reads of its runs)."""
    print_table(rows)
    for title, section in sections.items():
        if section:
            print(f"\n{title}:")
            print_table(section)
    result = json.dumps({"benchmark": name, "machine": platform.node(), "rows": rows, **sections})
    print("RESULT " + result, flush=True)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(result)


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
        # on the stack's workers (--spark-workers): what one application takes, and its executors
        KAPPA_SPARK_MASTER_PORT=str(settings.spark_master_port),
        KAPPA_SPARK_MASTER_UI_PORT=str(settings.spark_master_ui_port),
        KAPPA_SPARK_CORES_MAX=str(settings.spark_cores_max),
        KAPPA_SPARK_EXECUTOR_MEMORY=settings.spark_executor_memory,
        KAPPA_SPARK_EXECUTOR_JAVA_OPTIONS=settings.spark_executor_java_options,
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
