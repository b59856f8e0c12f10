"""`kappa setup | up | down | status`: the JVM artifacts and the embedded local stack."""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path
from typing import Any

from kappa.cli.parsing import add_command
from kappa.core.settings import KappaSettings, Security
from kappa.lifecycle import deployments
from kappa.spark.class_archive import ensure_archive
from kappa.spark.driver_files import log_file
from kappa.spark.session import driver_classpath
from kappa.stack import LocalStack
from kappa.stack.artifacts import ensure_jvm_artifacts
from kappa.stack.java import spark_java


def cmd_setup(settings: KappaSettings, _args: argparse.Namespace) -> int:
    report = ensure_jvm_artifacts(settings)
    if report.fetched:
        print(f"fetched the JVM artifacts into {report.jars_dir} in {report.seconds:.1f} s")
    else:
        print(f"JVM artifacts already in {report.jars_dir}: nothing fetched")
    if settings.spark_class_archive:
        archive = ensure_archive(settings, Path(spark_java()), driver_classpath(settings))
        if archive.built:
            print(f"built the Spark driver's class archive {archive.path.name} in {archive.seconds:.1f} s")
    return 0


def cmd_up(settings: KappaSettings, args: argparse.Namespace) -> int:
    started = time.monotonic()
    if args.secure:
        settings = settings.model_copy(update={"security": Security.SASL_SSL})
    timings = LocalStack(settings).up(
        brokers=args.brokers,
        with_registry=not args.no_registry,
        monitoring=args.monitoring,
        spark_workers=args.spark_workers,
    )
    for component, seconds in timings.items():
        print(f"{component}: healthy after {seconds:.1f} s")
    print(f"stack up in {time.monotonic() - started:.1f} s")
    if settings.secured:
        print(f"secured: SASL_SSL (SCRAM-SHA-512), ACLs enforced; CA {settings.kafka_ca_file}, secrets in "
              f"{settings.secrets_path}")  # fmt: skip
    return cmd_status(settings, args)


def cmd_down(settings: KappaSettings, args: argparse.Namespace) -> int:
    stack = LocalStack(settings)
    jobs = deployments.stop_all(settings) if args.purge else []  # nothing may run against what --purge deletes
    stopped = [*jobs, *stack.down(purge=args.purge)]
    print(f"stopped: {', '.join(stopped) if stopped else 'nothing was running'}")
    if args.purge:
        deleted = [str(settings.stack_path), *stack.purge_derived_state()]
        logs = driver_logs_to_purge(settings)
        if logs is not None and logs.exists():  # last: every driver that writes there has stopped above
            shutil.rmtree(logs)
            deleted.append(str(logs))
        for folder in deleted:
            print(f"deleted {folder}")
    return 0


def driver_logs_to_purge(settings: KappaSettings) -> Path | None:
    """The Spark drivers' log folder (`<state_dir>/logs`), when the stack lives in that state folder. A stack kept
    elsewhere (KAPPA_STACK_DIR, as the tests' stacks are) shares the folder with drivers it did not start."""
    logs = log_file(settings).parent
    return logs if settings.stack_path.resolve().is_relative_to(settings.state_dir.resolve()) else None


def cmd_status(settings: KappaSettings, _args: argparse.Namespace) -> int:
    rows = LocalStack(settings).status()
    if not rows:
        print(f"no stack in {settings.stack_path} (start one with `kappa up`)")
        return 1
    print(f"{'component':<14} {'address':<56} {'pid':>8}  health")
    for row in rows:
        health = "healthy" if row.healthy else ("running, not healthy" if row.running else "stopped")
        print(f"{row.name:<14} {row.address:<56} {row.pid or '-':>8}  {health}")
    return 0 if all(r.healthy for r in rows) else 1


def add_stack_commands(sub: Any) -> None:
    add_command(sub, "setup", cmd_setup, "fetch the JVM artifacts (Kafka, registry, Spark connectors) once")
    up = add_command(sub, "up", cmd_up, "start the local stack (Kafka KRaft + schema registry) and wait until healthy")
    up.add_argument("--brokers", type=int, default=None, help="KRaft nodes (default: KAPPA_BROKERS, 1)")
    up.add_argument("--no-registry", action="store_true", help="start only Kafka")
    up.add_argument(
        "--secure",
        action="store_true",
        help="TLS with the stack's own CA, SCRAM-SHA-512 logins and ACLs (KAPPA_SECURITY=sasl_ssl); the commands "
        "after it follow the stack (README, Security)",
    )
    up.add_argument(
        "--spark-workers",
        type=int,
        default=None,
        help="also a Spark standalone master and this many workers (default: KAPPA_SPARK_WORKERS, 0); jobs run on "
        "it with KAPPA_SPARK_MASTER=spark://127.0.0.1:<KAPPA_SPARK_MASTER_PORT>",
    )
    up.add_argument(
        "--monitoring",
        action="store_true",
        help="also Prometheus (KAPPA_PROMETHEUS_PORT), scraping every running job version, with the alert rules "
        "of infra/prometheus/alerts.yml (docs/metrics.md)",
    )
    down = add_command(sub, "down", cmd_down, "stop what `kappa up` started")
    down.add_argument(
        "--purge",
        action="store_true",
        help="also stop the deployments and delete the stack's data and logs, the checkpoints, the Delta tables, "
        "the deployments' state (everything that refers to the stack's topics) and the Spark drivers' log folder "
        "(<state dir>/logs, when the stack lives in that state folder): start afresh",
    )
    add_command(sub, "status", cmd_status, "show each component, its address, pid and health")
