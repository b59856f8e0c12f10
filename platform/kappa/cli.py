"""`kappa`: the platform's command line. Settings are built once here and passed down.

Every failure a user can act on is a KappaError: printed as one message, exit status 2, no stack trace.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from kappa.errors import KappaError
from kappa.settings import KappaSettings, load_settings
from kappa.topics import Topic


def load_catalog(module: str = "jobs.catalog") -> tuple[Topic, ...]:
    """The declared topics (the catalog module's TOPICS)."""
    try:
        topics: tuple[Topic, ...] = importlib.import_module(module).TOPICS
    except (ImportError, AttributeError) as exc:
        raise KappaError(f"cannot load the topic catalog {module}.TOPICS: {exc}") from None
    return topics


# ------------------------------------------------------------------------ commands -------------------


def cmd_setup(settings: KappaSettings, _args: argparse.Namespace) -> int:
    from kappa.stack.artifacts import ensure_jvm_artifacts

    report = ensure_jvm_artifacts(settings)
    if report.fetched:
        print(f"fetched the JVM artifacts into {report.jars_dir} in {report.seconds:.1f} s")
    else:
        print(f"JVM artifacts already in {report.jars_dir}: nothing fetched")
    if settings.spark_class_archive:
        from kappa.spark import driver_classpath
        from kappa.spark_classes import ensure_archive
        from kappa.stack.java import spark_java

        archive = ensure_archive(settings, Path(spark_java()), driver_classpath(settings))
        if archive.built:
            print(f"built the Spark driver's class archive {archive.path.name} in {archive.seconds:.1f} s")
    return 0


def cmd_up(settings: KappaSettings, args: argparse.Namespace) -> int:
    from kappa.stack import LocalStack

    started = time.monotonic()
    timings = LocalStack(settings).up(brokers=args.brokers, with_registry=not args.no_registry)
    for component, seconds in timings.items():
        print(f"{component}: healthy after {seconds:.1f} s")
    print(f"stack up in {time.monotonic() - started:.1f} s")
    return cmd_status(settings, args)


def cmd_down(settings: KappaSettings, args: argparse.Namespace) -> int:
    from kappa.stack import LocalStack

    stopped = LocalStack(settings).down(purge=args.purge)
    print(f"stopped: {', '.join(stopped) if stopped else 'nothing was running'}")
    if args.purge:
        print(f"deleted {settings.stack_path}")
    return 0


def cmd_status(settings: KappaSettings, _args: argparse.Namespace) -> int:
    from kappa.stack import LocalStack

    rows = LocalStack(settings).status()
    if not rows:
        print(f"no stack in {settings.stack_path} (start one with `kappa up`)")
        return 1
    print(f"{'component':<10} {'address':<45} {'pid':>8}  health")
    for row in rows:
        health = "healthy" if row.healthy else ("running, not healthy" if row.running else "stopped")
        print(f"{row.name:<10} {row.address:<45} {row.pid or '-':>8}  {health}")
    return 0 if all(r.healthy for r in rows) else 1


def cmd_topics_apply(settings: KappaSettings, args: argparse.Namespace) -> int:
    from kappa import topics
    from kappa.deployment import topics_to_apply
    from kappa.kafka_client import require_kafka

    admin = require_kafka(settings)
    changes = topics.apply(admin, topics_to_apply(settings, load_catalog(args.catalog)), args.force)
    for change in changes:
        print(f"{change.topic:<30} {change.kind}")
        for detail in change.details:
            print(f"{'':<32}{detail}")
    return 1 if any(c.kind is topics.ChangeKind.DRIFT for c in changes) else 0


def cmd_topics_list(settings: KappaSettings, args: argparse.Namespace) -> int:
    from kappa import topics
    from kappa.kafka_client import require_kafka

    admin = require_kafka(settings)
    brokers = topics.broker_count(admin)
    drifted = 0
    print(f"{'topic':<28} {'partitions':>14} {'replicas':>10}  {'cleanup':<16} state")
    from kappa.deployment import topics_to_apply

    for state in topics.describe(admin, topics_to_apply(settings, load_catalog(args.catalog))):
        t = state.topic
        if state.partitions is None:
            print(f"{t.name:<28} {'-/' + str(t.partitions):>14} {'-':>10}  {t.cleanup.value:<16} missing")
            drifted += 1
            continue
        drift = state.config_drift(brokers)
        issues = [f"{k}={a} (declared {w})" for k, (a, w) in drift.items()]
        if state.partitions != t.partitions:
            issues.append(f"partitions {state.partitions} (declared {t.partitions})")
        drifted += bool(issues)
        parts = f"{state.partitions}/{t.partitions}"
        cleanup = state.configs.get("cleanup.policy", "?")
        print(f"{t.name:<28} {parts:>14} {state.replication_factor:>10}  {cleanup:<16} {'; '.join(issues) or 'ok'}")
    return 1 if drifted else 0


def cmd_schemas_check(settings: KappaSettings, args: argparse.Namespace) -> int:
    from kappa.avro.contracts import check_schemas

    registry = None if args.offline else settings.registry
    reports = check_schemas(settings.schemas_path, load_catalog(args.catalog), registry)
    failed = 0
    for report in reports:
        subjects = f" ({', '.join(report.subjects)})" if report.subjects else " (no topic)"
        print(f"{'FAIL' if report.problems else 'ok  '} {report.file}{subjects}")
        for problem in report.problems:
            print(f"       {problem}")
        for note in report.notes:
            print(f"       · {note}")
        failed += bool(report.problems)
    print(f"{len(reports) - failed} schema(s) ok, {failed} with problems")
    return 1 if failed else 0


def cmd_schemas_apply(settings: KappaSettings, args: argparse.Namespace) -> int:
    from kappa.avro.contracts import apply_schemas

    for applied in apply_schemas(settings.schemas_path, load_catalog(args.catalog), settings.registry):
        state = "registered" if applied.new else "unchanged"
        print(f"{applied.subject:<32} {state:<10} id {applied.schema_id}, version {applied.version}")
    return 0


def cmd_dlq_inspect(settings: KappaSettings, args: argparse.Namespace) -> int:
    from kappa import dlq

    report = dlq.inspect(settings, args.topic, samples=args.samples)
    jobs = ", ".join(f"{job} {n}" for job, n in sorted(report.by_job.items()))
    print(f"{report.topic}: {report.records} bad record(s), {report.total} dead letter(s), reported by {jobs or '-'}")
    for kind, count in report.by_kind.most_common():
        print(f"  {kind:<24} {count}")
        for letter in report.samples.get(kind, []):
            print(f"      {dlq.describe(letter)}")
    return 0


def cmd_dlq_replay(settings: KappaSettings, args: argparse.Namespace) -> int:
    from kappa import dlq

    replayed, skipped = dlq.replay(settings, args.topic, kind=args.kind)
    print(
        f"re-injected {replayed} dead letter(s) of {args.topic}"
        + (f", {skipped} of other kinds left" if skipped else "")
    )
    return 0


def cmd_jobs_list(settings: KappaSettings, args: argparse.Namespace) -> int:
    from kappa.runtime.declaration import DeltaTable
    from kappa.runtime.discovery import discover

    print(f"{'job':<20} {'version':>7}  {'inputs':<28} output")
    for spec in discover().values():
        output = f"delta:{spec.output.name}" if isinstance(spec.output, DeltaTable) else f"topic:{spec.output.name}"
        print(f"{spec.name:<20} {spec.version:>7}  {','.join(t.name for t in spec.inputs):<28} {output}")
    return 0


def cmd_jobs_run(settings: KappaSettings, args: argparse.Namespace) -> int:
    from kappa.deployment import deployed_job, ensure_live
    from kappa.deployments import checkpoint_lock
    from kappa.runtime.declaration import Starting
    from kappa.runtime.pipes import pipes_reporter, require_pipes
    from kappa.runtime.runner import configure_logging, run_job

    configure_logging()
    try:
        starting = Starting.parse(args.start_from) if args.start_from else None  # None: earliest, or resume
    except ValueError as exc:
        raise KappaError(str(exc)) from None
    if args.pipes:
        require_pipes()  # before anything is read or bound
    spec = deployed_job(settings, args.job, args.version)
    version = args.version or spec.version
    with contextlib.ExitStack() as stack:
        # Launched by Dagster: each batch, the run's report and any refusal go back through Pipes.
        pipes = stack.enter_context(pipes_reporter()) if args.pipes else None
        # Held until the run ends: a replay's catch-up, a deployment start or a second run of the version is refused.
        stack.enter_context(
            checkpoint_lock(settings, spec.name, version, f"`kappa jobs run {spec.name} --version {version}`")
        )
        ensure_live(settings, spec, version)
        report = run_job(
            spec,
            settings,
            version=args.version,
            available_now=args.available_now,
            starting=starting,
            max_offsets_per_trigger=args.max_offsets_per_trigger,
            on_batch=pipes.batch if pipes else None,
        )
        if pipes:
            pipes.finish(report)
    how = "stopped by signal" if report.stopped_by_signal else "done"
    rows = sum(report.input_rows.values())
    print(f"{report.job} v{report.version}: {how} after {report.seconds:.1f} s, {rows} input rows")
    return 0


def _job_version(args: argparse.Namespace) -> tuple[str, int]:
    """The job (it must exist) and the version to act on (default: the declared one)."""
    from kappa.runtime.discovery import get_job

    spec = get_job(args.job)
    return spec.name, args.version or spec.version


def cmd_jobs_start(settings: KappaSettings, args: argparse.Namespace) -> int:
    from kappa import deployments

    job, version = _job_version(args)
    deployment = deployments.start(settings, job, version)
    deployments.confirm_running(deployment, args.wait)
    where = "in the job host (pid" if deployment.launcher == "shared" else "(pid"
    print(f"{job} v{version}: started {where} {deployment.pid}), log {deployment.log_file}")
    return 0


def cmd_jobs_host(settings: KappaSettings, args: argparse.Namespace) -> int:
    from kappa import job_host

    return job_host.serve(settings, args.code)


def cmd_jobs_stop(settings: KappaSettings, args: argparse.Namespace) -> int:
    from kappa import deployments

    job, version = _job_version(args)
    started = time.monotonic()
    deployments.stop(settings, job, version, timeout_s=args.timeout)
    print(f"{job} v{version}: stopped in {time.monotonic() - started:.1f} s")
    return 0


def cmd_jobs_restart(settings: KappaSettings, args: argparse.Namespace) -> int:
    from kappa import deployments

    job, version = _job_version(args)
    deployment = deployments.restart(settings, job, version, reason=args.reason, timeout_s=args.timeout)
    deployments.confirm_running(deployment, args.wait)
    print(f"{job} v{version}: restarted (restart {deployment.restarts}), pid {deployment.pid}")
    return 0


def cmd_jobs_status(settings: KappaSettings, args: argparse.Namespace) -> int:
    from kappa import deployments

    states = deployments.status(settings)
    if not states:
        print(f"no deployments recorded in {settings.deployments_path} (start one with `kappa jobs start <job>`)")
        return 0
    print(f"{'job':<16} {'version':>7}  {'state':<8} {'pid':>8} {'uptime':>7} {'lag':>9}  {'last batch':<28} restarts")
    reachable = True
    for state in states:
        d = state.deployment
        lag, batch = "?", "-"
        try:
            if not reachable:
                raise KappaError("Kafka did not answer for an earlier row")
            measured = deployments.lag(settings, d.job, d.version, timeout_s=5)
            lag = str(measured.total)
            if measured.last_batch:
                at = measured.last_batch.at.strftime("%H:%M:%S")
                batch = f"#{measured.last_batch.batch_id} {at}Z {measured.last_batch.rows} rows"
        except KappaError:
            reachable = False  # Kafka not reachable: the table still shows the processes, lag "?"
        pid = str(d.pid) if state.health is deployments.Health.RUNNING else "-"
        print(
            f"{d.job:<16} {d.version:>7}  {state.health.value:<8} {pid:>8} {deployments.describe(state.uptime_s):>7} "
            f"{lag:>9}  {batch:<28} {d.restarts}"
        )
        if state.exit_reason:
            print(f"{'':<18}why: {state.exit_reason}")
        elif d.last_exit_reason and args.verbose:
            print(f"{'':<18}last restart: {d.last_exit_reason}")
    return 1 if any(s.health is deployments.Health.CRASHED for s in states) else 0


def cmd_generate(settings: KappaSettings, args: argparse.Namespace) -> int:
    from jobs.catalog import CLICKS, USER_PROFILES
    from kappa.generate import StreamConfig
    from kappa.produce_stream import generate

    config = StreamConfig(
        events=args.events,
        users=args.users,
        pages=args.pages,
        seed=args.seed,
        late_share=args.late_share,
        late_by_ms=int(args.late_by_minutes * 60_000),
        malformed_share=args.malformed_share,
    )
    report = generate(settings, config, CLICKS, USER_PROFILES, rate=args.rate)
    print(
        f"produced {report.clicks} clicks ({report.malformed} malformed) and {report.profiles} profile versions "
        f"in {report.seconds:.1f} s ({report.clicks / max(report.seconds, 1e-9):,.0f} clicks/s)"
    )
    return 0


def cmd_demo(settings: KappaSettings, args: argparse.Namespace) -> int:
    from kappa.demo import run_demo

    run_demo(settings, events=args.events, keep=args.keep, malformed_share=args.malformed_share)
    return 0


# ------------------------------------------------------------------------ parser ---------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kappa", description="Kappa-architecture platform")
    sub = parser.add_subparsers(dest="command", required=True, metavar="command")

    def add(name: str, func: Callable[[KappaSettings, argparse.Namespace], int], help_: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_, description=help_)
        p.set_defaults(func=func)
        return p

    add("setup", cmd_setup, "fetch the JVM artifacts (Kafka, registry, Spark connectors) once")
    up = add("up", cmd_up, "start the local stack (Kafka KRaft + schema registry) and wait until healthy")
    up.add_argument("--brokers", type=int, default=None, help="KRaft nodes (default: KAPPA_BROKERS, 1)")
    up.add_argument("--no-registry", action="store_true", help="start only Kafka")
    down = add("down", cmd_down, "stop what `kappa up` started")
    down.add_argument("--purge", action="store_true", help="also delete the stack's data and logs")
    add("status", cmd_status, "show each component, its address, pid and health")

    topics = sub.add_parser("topics", help="declared topics versus the cluster")
    topics_sub = topics.add_subparsers(dest="topics_command", required=True, metavar="action")
    for name, func, help_ in (
        ("apply", cmd_topics_apply, "create missing topics and repair drifted configs"),
        ("list", cmd_topics_list, "show declared versus actual"),
    ):
        p = topics_sub.add_parser(name, help=help_, description=help_)
        p.set_defaults(func=func)
        p.add_argument("--catalog", default="jobs.catalog", help="module with the TOPICS declarations")
        if name == "apply":
            p.add_argument(
                "--force", action="store_true", help="add partitions to keyed topics too (moves keys; prints a warning)"
            )

    schemas = sub.add_parser("schemas", help="Avro contracts: check and register the schemas in schemas/")
    schemas_sub = schemas.add_subparsers(dest="schemas_command", required=True, metavar="action")
    check = schemas_sub.add_parser("check", help="house rules, compatibility with git history and the registry")
    check.set_defaults(func=cmd_schemas_check)
    check.add_argument("--offline", action="store_true", help="do not ask the registry (CI without a stack)")
    apply_ = schemas_sub.add_parser("apply", help="set each subject's compatibility level and register its schema")
    apply_.set_defaults(func=cmd_schemas_apply)
    for p in (check, apply_):
        p.add_argument("--catalog", default="jobs.catalog", help="module with the TOPICS declarations")

    dlq = sub.add_parser("dlq", help="dead-letter topics")
    dlq_sub = dlq.add_subparsers(dest="dlq_command", required=True, metavar="action")
    inspect = dlq_sub.add_parser("inspect", help="counts by error kind, with samples")
    inspect.set_defaults(func=cmd_dlq_inspect)
    inspect.add_argument("--samples", type=int, default=3)
    replay = dlq_sub.add_parser("replay", help="re-inject dead letters into their source topic, each once")
    replay.set_defaults(func=cmd_dlq_replay)
    replay.add_argument("--kind", default=None, help="only this error kind (e.g. unknown-schema-id)")
    for p in (inspect, replay):
        p.add_argument("topic", help="the dataset topic (its dead letters are in <topic>.dlq)")

    jobs = sub.add_parser("jobs", help="the streaming jobs in jobs/")
    jobs_sub = jobs.add_subparsers(dest="jobs_command", required=True, metavar="action")
    jobs_sub.add_parser("list", help="every job: version, inputs, output").set_defaults(func=cmd_jobs_list)
    run = jobs_sub.add_parser("run", help="run a job until stopped (SIGTERM stops it after its current batch)")
    run.set_defaults(func=cmd_jobs_run)
    run.add_argument("job")
    run.add_argument("--version", type=int, default=None, help="physical version label (default: the declared)")
    run.add_argument("--available-now", action="store_true", help="process what is there, then stop")
    run.add_argument(
        "--from",
        dest="start_from",
        default=None,
        help="earliest (default) | latest | ISO timestamp; a version keeps the start point its first run had",
    )
    run.add_argument("--max-offsets-per-trigger", type=int, default=None, help="cap each micro-batch")
    run.add_argument(
        "--pipes", action="store_true", help="report progress and the run to Dagster (set by Dagster's launcher)"
    )

    for name, func, help_ in (
        ("start", cmd_jobs_start, "deploy a job version: run it continuously, detached, supervised"),
        ("stop", cmd_jobs_stop, "stop a deployment (SIGTERM: after its current batch; SIGKILL after --timeout)"),
        ("restart", cmd_jobs_restart, "stop and start a deployment again; it resumes from its checkpoint"),
    ):
        p = jobs_sub.add_parser(name, help=help_, description=help_)
        p.set_defaults(func=func)
        p.add_argument("job")
        p.add_argument("--version", type=int, default=None, help="the version (default: the declared one)")
        if name != "start":
            p.add_argument("--timeout", type=float, default=None, help="seconds (default KAPPA_DEPLOY_STOP_TIMEOUT_S)")
        if name == "restart":
            p.add_argument("--reason", default=None, help="recorded as the deployment's last exit reason")
        if name != "stop":
            p.add_argument("--wait", type=float, default=5.0, help="seconds to watch it for an early exit")
    host = jobs_sub.add_parser(
        "host", help="run the shared deployments in one Spark application (started by `kappa jobs start`)"
    )
    host.set_defaults(func=cmd_jobs_host)
    host.add_argument("code", help="the fingerprint of the code it runs (its state file's name)")
    status = jobs_sub.add_parser("status", help="every deployment: state, pid, uptime, lag, last batch")
    status.set_defaults(func=cmd_jobs_status)
    status.add_argument("-v", "--verbose", action="store_true", help="also why each was last restarted")

    gen = add("generate", cmd_generate, "produce a seeded clickstream (clicks + user_profiles) into the topics")
    gen.add_argument("--events", type=int, default=10_000, help="number of clicks")
    gen.add_argument("--users", type=int, default=500)
    gen.add_argument("--pages", type=int, default=200)
    gen.add_argument("--seed", type=int, default=7, help="same seed, same stream")
    gen.add_argument("--rate", type=float, default=None, help="records per second (default: as fast as possible)")
    gen.add_argument("--late-share", type=float, default=0.01, help="share of clicks that arrive very late")
    gen.add_argument("--late-by-minutes", type=float, default=45.0, help="how late the late clicks are")
    gen.add_argument("--malformed-share", type=float, default=0.0, help="share of clicks broken on purpose")

    from kappa.cli_replay import add_replay_commands

    add_replay_commands(sub)

    demo = add("demo", cmd_demo, "run the demo on a fresh embedded stack and print what landed in Delta")
    demo.add_argument("--events", type=int, default=5000)
    demo.add_argument("--keep", action="store_true", help="leave the demo stack running")
    demo.add_argument("--malformed-share", type=float, default=0.01, help="share of broken records (dead letters)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = load_settings()
        return int(args.func(settings, args))
    except KappaError as exc:
        print(f"kappa: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("kappa: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
