"""`kappa replay ...` and `kappa aliases`: the replay protocol of docs/architecture.md, one command per step.

Exit status: 0 done, 2 refused or failed (one message), 3 verification failed (the report says why), 130
when stopped by a signal (SIGTERM or Ctrl-C; recorded as interrupted; launch again: a catch-up resumes from its
checkpoint). 1 is left to Python itself: an unexpected crash.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from types import FrameType
from typing import Any

import kappa.lifecycle.deployments as deployments
from kappa.cli.parsing import Command
from kappa.cli.table import render
from kappa.contracts.expectations import import_in_background
from kappa.core.errors import KappaError
from kappa.core.settings import KappaSettings
from kappa.kafka.aliases import AliasRegistry, now_ms
from kappa.lifecycle import cascade
from kappa.lifecycle.replay import (
    Replay,
    ReplayRefusedError,
    catch_up,
    check,
    cutover,
    describe_progress,
    exclusive_catch_up,
    load,
    prepare,
    retire,
    rollback,
    running,
    verified,
    verify,
)
from kappa.runtime.binding import dataset_of, describe_inputs
from kappa.runtime.declaration import Starting
from kappa.runtime.discovery import discover, get_job

PROGRESS_MESSAGE = "replay_progress"
VERIFICATION_MESSAGE = "replay_verification"
VERIFIED, REFUSED, NOT_VERIFIED, INTERRUPTED = 0, 2, 3, 130
DOWNSTREAM = "also every dataset below the job (`kappa replay plan`), in pipeline order, on the new versions"


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def horizon_line(topic: str, since: str) -> str:
    """An input's replay horizon as `check` and `plan` record it: "complete" when the topic holds every record
    since its first, else the time from which it is complete."""
    if since == "complete":
        return f"{topic}: complete, every record since the first retained"
    return f"{topic}: complete since {since}, older records deleted (retention or compaction)"


@contextmanager
def _step(
    settings: KappaSettings, replay: Any, step: str, by: str | None, to_version: int | None = None
) -> Iterator[dict[str, Any]]:
    """Run one step and record it in the audit trail: ok with its findings, or refused/failed with the error."""

    registry = AliasRegistry(settings)
    found: dict[str, Any] = {}
    live = replay.live.version if replay.live else None
    to = replay.version if to_version is None else to_version
    details = found
    try:
        yield found
        outcome = str(found.pop("_outcome", "ok"))
    except KeyboardInterrupt as exc:  # Ctrl-C, or a SIGTERM (see _signals_interrupt)
        outcome, details = "interrupted", {"error": f"stopped by {str(exc) or 'SIGINT'}"}
        raise
    except BaseException as exc:
        outcome = "refused" if isinstance(exc, ReplayRefusedError) else "failed"
        details = {"error": str(exc) or type(exc).__name__}
        raise
    finally:
        details.setdefault("dataset", replay.dataset)  # a job name may write datasets on several deployments
        registry.record(
            replay.job.name, step, to_version=to, from_version=live, outcome=outcome, details=details, by=by
        )


def _signals_interrupt(command: Command) -> Command:
    """A SIGTERM (Dagster stopping its run, a `kill`) ends a step as Ctrl-C does, through KeyboardInterrupt:
    the step is recorded as interrupted and the CLI exits 130, instead of Python dying unrecorded. A catch-up
    sets its own handler while it runs: it stops after its current batch."""

    @functools.wraps(command)
    def run(settings: KappaSettings, args: argparse.Namespace) -> int:
        def interrupt(signum: int, _frame: FrameType | None) -> None:
            raise KeyboardInterrupt(signal.Signals(signum).name)

        previous = signal.signal(signal.SIGTERM, interrupt)
        try:
            return command(settings, args)
        finally:
            signal.signal(signal.SIGTERM, previous)

    return run


def _starting(text: str) -> Any:
    try:
        return Starting.parse(text)
    except ValueError as exc:
        raise KappaError(str(exc)) from None


def print_verification(result: Any) -> None:
    rec = result.reconciliation
    print(f"verification: {'PASSED' if result.passed else 'FAILED'}")
    quality = result.quality
    if quality.get("suite"):
        print(f"  quality suite {quality['suite']}: {'ok' if quality.get('success') else 'failed'}")
        for failure in quality.get("failed", []) or []:
            print(f"      {failure}")
    else:
        print(f"  quality: {quality.get('note')}")
    if rec.get("against"):
        print(
            f"  against {rec['against']}: {rec['rows_new']:,} rows new, {rec['rows_live']:,} live, "
            f"{rec['only_in_new']:,} only in new, {rec['only_in_live']:,} only in live, {rec['changed']:,} changed"
        )
        for kind, rows in rec["samples"].items():
            for row in rows:
                print(f"      {kind}: {json.dumps(row, default=str)}")
    else:
        print(f"  reconciliation: {rec.get('note')}")
    for problem in result.problems:
        print(f"  problem: {problem}")


def cmd_check(settings: KappaSettings, args: argparse.Namespace) -> int:
    replay = load(settings, args.job, args.version)
    with _step(settings, replay, "check", args.by) as found:
        found |= check(settings, replay, _starting(args.start_from))
    print(f"{args.job} v{replay.version}: checks passed")
    print(f"  schema: {found['schema']}")
    for topic, horizon in found["horizons"].items():
        print(f"  {horizon_line(topic, horizon)}")
    return 0


def cmd_start(settings: KappaSettings, args: argparse.Namespace) -> int:
    """check -> prepare -> catch-up -> verify, for the job or (--downstream) every dataset below it in pipeline
    order; launched again after a kill, it resumes from the checkpoints."""
    # Lazy: imports pyspark, only where a Spark session runs (this module is imported without one).
    from kappa.runtime.pipes import pipes_reporter
    from kappa.runtime.runner import configure_logging

    configure_logging()
    starting = _starting(args.start_from)
    with contextlib.ExitStack() as stack:  # with --pipes, a failure reaches Dagster as the run's failure
        reporter = stack.enter_context(pipes_reporter()) if args.pipes else None
        replays = _replays(settings, args)
        began = now_ms()  # the set's catch-ups compare with the live set as it was when the first one started
        for number, replay in enumerate(replays, start=1):
            if len(replays) > 1:
                print(f"[{number}/{len(replays)}] {replay.job.name} v{replay.version}: {_reads(replay)}")
                if _verified(settings, replay):
                    print(f"{replay.job.name} v{replay.version}: verified already, not replayed again")
                    continue
            # Below the changed job, a member reads new versions whole; a source it reads starts where asked.
            member_start = starting if number == 1 or _reads_sources(replay) else Starting()
            status = _replay_one(settings, replay, member_start, args, reporter, began if number > 1 else None)
            if status != VERIFIED:
                if len(replays) > 1 and number < len(replays):
                    left = ", ".join(r.job.name for r in replays[number:])
                    print(f"the set stops here: {left} not replayed; nothing goes live")
                return status
        if len(replays) > 1:
            print(f"the set is verified: next `kappa replay golive {args.job} --downstream`, then cutover")
        return VERIFIED


def _replays(settings: KappaSettings, args: argparse.Namespace) -> list[Replay]:
    """The versions to replay: --version's, else the plan's (the job alone, or with --downstream its set)."""
    if args.version is not None:
        return [load(settings, args.job, args.version)]
    found = cascade.plan(settings, args.job, downstream=args.downstream)
    if not found.members:
        if args.downstream:
            raise ReplayRefusedError(f"nothing to replay: {'; '.join(found.unchanged)}")
        return [load(settings, args.job)]  # its check says why there is nothing to replay
    return _members(settings, found)


def _members(settings: KappaSettings, found: cascade.Plan) -> list[Replay]:
    """The plan's members as replays (what each step of the protocol acts on)."""
    jobs, aliases = discover(), AliasRegistry(settings).all()
    return [m.replay(jobs, aliases) for m in found.members]


def _reads(replay: Replay) -> str:
    return f"reads {describe_inputs(replay.input_versions)}"


def _reads_sources(replay: Replay) -> bool:
    return any(t.name not in replay.input_versions for t in replay.job.inputs)


def _verified(settings: KappaSettings, replay: Replay) -> bool:
    return verified(AliasRegistry(settings), replay.job.name, replay.version, replay.dataset)


def _replay_one(
    settings: KappaSettings,
    replay: Replay,
    starting: Starting,
    args: argparse.Namespace,
    reporter: Any,
    began: int | None,
) -> int:
    by = args.by
    with contextlib.ExitStack() as stack:
        with _step(settings, replay, "check", by) as found:
            stack.enter_context(exclusive_catch_up(settings, replay))  # refused (and recorded) while in use
            found |= check(settings, replay, starting)
        with _step(settings, replay, "prepare", by) as found:
            found |= prepare(settings, replay)
        on_progress: Callable[[dict[str, Any]], None] | None = None
        if reporter is not None:

            def on_progress(report: dict[str, Any]) -> None:
                line = describe_progress(replay.job.name, replay.version, report)
                reporter.message(PROGRESS_MESSAGE, report | {"job": replay.job.name}, line)

        import_in_background()  # for the verification after the catch-up
        with _step(settings, replay, "catch-up", by) as found:
            # Before the input ends are fixed: what verify compares the live at (a set's: its first catch-up's).
            found["started_ms"] = began or now_ms()
            run = catch_up(
                settings,
                replay,
                starting,
                max_offsets_per_trigger=args.max_offsets_per_trigger,
                on_progress=on_progress,
            )
            rows = run.input_rows.get(run.output_query, 0)
            found |= {
                "seconds": round(run.seconds, 1),
                "input_rows": rows,
                "batches": run.batches.get(run.output_query, 0),
                "events_per_second": round(rows / run.seconds) if run.seconds else 0,
                "reads": replay.input_versions,
            }
            if run.stopped_by_signal:
                found["_outcome"] = "interrupted"
    print(
        f"catch-up {replay.job.name} v{replay.version}: {found['input_rows']:,} rows in {found['seconds']} s "
        f"({found['events_per_second']:,} events/s)"
    )
    if run.stopped_by_signal:
        print("stopped by signal: launch the same command again to resume from the checkpoint")
        return INTERRUPTED
    with _step(settings, replay, "verify", by) as found:
        result = verify(settings, replay)
        found |= result.as_dict()
        if not result.passed:
            found["_outcome"] = "failed"
    print_verification(result)
    if reporter is not None:
        # The Dagster op yields the output with this report; the process itself materializes nothing
        # (the op targets no asset).
        reporter.message(
            VERIFICATION_MESSAGE,
            result.as_dict() | {"job": replay.job.name, "version": replay.version},
            f"verification of {replay.job.name} v{replay.version} {'passed' if result.passed else 'FAILED'}",
        )
    return VERIFIED if result.passed else NOT_VERIFIED


def cmd_plan(settings: KappaSettings, args: argparse.Namespace) -> int:
    found = cascade.plan(settings, args.job, downstream=True, measure=True)
    if args.json:
        print(json.dumps(found.as_dict(), indent=2, default=str))
        return 0
    print(f"a change of {args.job} reaches {len(found.members)} dataset(s):")
    print(f"{'job':<16} {'dataset':<20} {'live':>5} {'new':>4}  {'records':>11} {'estimate':>9}  reads")
    for m in found.members:
        live = f"v{m.live}" if m.live is not None else "-"
        estimate = f"{m.estimate_s:.0f} s" if m.estimate_s is not None else "-"
        print(
            f"{m.job.name:<16} {m.dataset:<20} {live:>5} {'v' + str(m.version):>4}  {m.records:>11,} {estimate:>9}  "
            f"{describe_inputs(m.inputs)}"
        )
        print(f"{'':<16} why: {m.why}; rate: {m.rate_source}")
        for topic, since in m.horizon.items():
            print(f"{'':<16} {horizon_line(topic, since)}")
    for line in found.unchanged:
        print(f"unchanged: {line}")
    total = found.estimate_s
    print(f"estimate: {'-' if total is None else f'{total:.0f} s'} of catch-up, one job after the other")
    return 0


def cmd_verify(settings: KappaSettings, args: argparse.Namespace) -> int:
    replay = load(settings, args.job, args.version)
    with _step(settings, replay, "verify", args.by) as found:
        result = verify(settings, replay)
        found |= result.as_dict()
        if not result.passed:
            found["_outcome"] = "failed"
    print_verification(result)
    return VERIFIED if result.passed else NOT_VERIFIED


def cmd_golive(settings: KappaSettings, args: argparse.Namespace) -> int:
    replays = _set_or_one(settings, args)
    for replay in replays:
        with _step(settings, replay, "go-live", args.by) as found:
            if len(replays) > 1 and running(settings, replay.job.name, replay.version):
                print(f"{replay.job.name} v{replay.version} runs already")
                found["_outcome"] = "ok"
                continue
            deployment = deployments.start(settings, replay.job.name, replay.version)
            deployments.confirm_running(deployment, args.wait)
            found |= {"pid": deployments.job_pid(deployment), "log": str(deployment.log_path)}
        print(
            f"{replay.job.name} v{replay.version} runs continuously from its checkpoint (pid {found['pid']}, "
            f"log {found['log']})"
        )
    return 0


def _set_or_one(settings: KappaSettings, args: argparse.Namespace) -> list[Replay]:
    """--downstream: the set's versions (the plan); else the one version."""
    if not getattr(args, "downstream", False):
        return [load(settings, args.job, args.version)]
    found = cascade.plan(settings, args.job)
    if not found.members:
        raise ReplayRefusedError(f"nothing below {args.job} to act on: {'; '.join(found.unchanged)}")
    return _members(settings, found)


def cmd_cutover(settings: KappaSettings, args: argparse.Namespace) -> int:
    started = _now()
    if args.downstream:
        return _cutover_set(settings, args, started)
    replay = load(settings, args.job, args.version)
    with _step(settings, replay, "cutover", args.by) as found:
        alias = cutover(settings, replay, by=args.by, force=args.force)
        found |= {"dataset": alias.dataset, "physical": alias.physical, "forced": args.force}
    took = _now() - started
    print(
        f"{alias.dataset}: v{alias.previous_version} -> v{alias.version} ({alias.physical}) by {alias.changed_by} "
        f"at {_when(alias.changed_at)}; cutover took {took:.2f} s"
    )
    return 0


def _cutover_set(settings: KappaSettings, args: argparse.Namespace, started: float) -> int:
    if args.force:
        raise ReplayRefusedError("a set is cut over only verified: --force applies to one job's cutover")
    found = cascade.plan(settings, args.job)
    with _steps(settings, _members(settings, found), "cutover", args.by, root=args.job) as facts:
        moved, transaction_s = cascade.cutover_set(settings, found, by=args.by)
        for alias, fact in zip(moved, facts, strict=True):
            fact |= {"physical": alias.physical, "set": [a.dataset for a in moved], "transaction_s": transaction_s}
    _print_set(moved, f"cutover of the set of {args.job}", _now() - started, transaction_s)
    return 0


def _print_set(moved: list[Any], what: str, took: float, transaction_s: float) -> None:
    for alias in moved:
        print(f"{alias.dataset}: v{alias.previous_version} -> v{alias.version} ({alias.physical})")
    first = moved[0]
    print(
        f"{what}: {len(moved)} aliases in one transaction ({transaction_s:.2f} s) by {first.changed_by} at "
        f"{_when(first.changed_at)}; the command took {took:.2f} s with its checks"
    )


@contextmanager
def _steps(
    settings: KappaSettings, replays: list[Replay], step: str, by: str | None, *, root: str, back: bool = False
) -> Iterator[list[dict[str, Any]]]:
    """One set step, recorded for each member as `_step` records one (the same outcome for all: it is one move)."""
    with contextlib.ExitStack() as stack:
        facts = []
        for replay in replays:
            to = replay.live.previous_version if back and replay.live else None
            found = stack.enter_context(_step(settings, replay, step, by, to_version=to))
            found["root"] = root
            facts.append(found)
        yield facts


def cmd_rollback(settings: KappaSettings, args: argparse.Namespace) -> int:
    if args.downstream:
        started = _now()
        moved = cascade.last_set(settings, args.job)
        replays = [load(settings, a.job, a.version) for a in moved]
        with _steps(settings, replays, "rollback", args.by, root=args.job, back=True) as facts:
            back, transaction_s = cascade.rollback_set(settings, args.job, by=args.by)
            for alias, fact in zip(back, facts, strict=True):
                fact |= {"dataset": alias.dataset, "from": alias.previous_version, "to": alias.version}
        _print_set(back, f"rollback of the set of {args.job}", _now() - started, transaction_s)
        return 0
    replay = load(settings, args.job)
    live = replay.live
    back_to = live.previous_version if live and live.previous_version is not None else replay.version
    with _step(settings, replay, "rollback", args.by, to_version=back_to) as found:
        alias = rollback(settings, replay, by=args.by)
        found |= {"dataset": alias.dataset, "from": live.version if live else None, "to": alias.version}
    print(
        f"{alias.dataset}: v{alias.previous_version} -> v{alias.version} ({alias.physical}) by {alias.changed_by} "
        f"at {_when(alias.changed_at)} (rollback)"
    )
    return 0


def cmd_retire(settings: KappaSettings, args: argparse.Namespace) -> int:
    replay = load(settings, args.job, args.version)
    with _step(settings, replay, "retire", args.by) as found:
        found |= retire(settings, replay)
    print(f"{args.job} v{replay.version} retired: stopped {found['stopped']}, deleted {', '.join(found['deleted'])}")
    return 0


def cmd_status(settings: KappaSettings, args: argparse.Namespace) -> int:
    job = get_job(args.job)
    registry = AliasRegistry(settings)

    live = registry.live(dataset_of(job))
    print(
        f"{job.name}: declared v{job.version}; {dataset_of(job)} live: "
        + (f"v{live.version} ({live.physical}) since {_when(live.changed_at)} by {live.changed_by}" if live else "none")
    )
    print(f"{'when':<24} {'step':<10} {'from':>5} {'to':>4}  {'outcome':<12} by")
    for step in registry.steps(job.name)[-args.last :]:
        print(
            f"{_when(step.at):<24} {step.step:<10} {step.from_version if step.from_version is not None else '-':>5} "
            f"{step.to_version:>4}  {step.outcome:<12} {step.by}"
        )
    return 0


def cmd_aliases(settings: KappaSettings, _args: argparse.Namespace) -> int:
    aliases = AliasRegistry(settings).all()
    if not aliases:
        print("no aliases yet: a dataset's first deployed version becomes live when it first runs")
        return 0
    rows = [
        (
            alias.dataset,
            f"v{alias.version}",
            f"v{alias.previous_version}" if alias.previous_version is not None else "-",
            alias.physical,  # a topic, or a Delta table's path: what a reader outside Python opens
            f"{_when(alias.changed_at)} by {alias.changed_by} ({alias.reason})",
        )
        for alias in sorted(aliases.values(), key=lambda a: a.dataset)
    ]
    for line in render(("dataset", "live", "previous", "physical", "changed"), rows, "<>><<"):
        print(line)
    return 0


def _now() -> float:
    return time.monotonic()


def add_replay_commands(sub: Any) -> None:
    """Register `replay` and `aliases` on the top-level subparsers."""
    parser = sub.add_parser(
        "replay",
        help="replay a job's new version, cut over, roll back, retire",
        description="The replay protocol (docs/architecture.md): check, prepare, catch up, verify, go live, "
        "cut over; rollback and retire are separate steps. Every step is recorded in kappa.audit.",
    )
    steps = parser.add_subparsers(dest="replay_command", required=True, metavar="step")

    def add(name: str, func: Command, help_: str, version: bool = True) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = steps.add_parser(name, help=help_, description=help_)
        p.set_defaults(func=_signals_interrupt(func))
        p.add_argument("job")
        if version:
            p.add_argument("--version", type=int, default=None, help="the job version (default: the declared one)")
        p.add_argument("--by", default=None, help="who acts (default: KAPPA_OPERATOR or the login name)")
        return p

    for name, func, help_ in (
        ("check", cmd_check, "check the declared version, its schema and the inputs' replay horizons"),
        ("start", cmd_start, "check, prepare, catch up (availableNow; resumes after a kill) and verify"),
    ):
        p = add(name, func, help_)
        p.add_argument("--from", dest="start_from", default="earliest", help="earliest | ISO timestamp with zone")
        if name == "start":
            p.add_argument("--max-offsets-per-trigger", type=int, default=None, help="cap each catch-up batch")
            p.add_argument("--pipes", action="store_true", help="report progress to Dagster (set by Dagster)")
            p.add_argument("--downstream", action="store_true", help=DOWNSTREAM)
    plan = add("plan", cmd_plan, "what a change of the job reaches: every dataset below it, versions, data, time")
    plan.add_argument("--json", action="store_true", help="the plan as JSON")
    add("verify", cmd_verify, "the quality suite and the reconciliation against the live version")
    golive = add("golive", cmd_golive, "run the version continuously from its catch-up checkpoint")
    golive.add_argument("--wait", type=float, default=5.0, help="seconds to watch it for an early exit")
    golive.add_argument("--downstream", action="store_true", help="every version of the job's set (the plan)")
    cut = add(
        "cutover", cmd_cutover, "move the dataset's alias to the version, atomically (it must have passed verify)"
    )
    cut.add_argument("--force", action="store_true", help="cut over without a passed verification (recorded)")
    cut.add_argument("--downstream", action="store_true", help="every alias of the job's set, in one transaction")
    back = add("rollback", cmd_rollback, "move the alias back to the version live before", version=False)
    back.add_argument("--downstream", action="store_true", help="the last set cutover of the job, in one transaction")
    add("retire", cmd_retire, "stop a version that is not live and delete its output, checkpoint and group")
    status = add("status", cmd_status, "the live version and the recorded steps", version=False)
    status.add_argument("--last", type=int, default=20, help="how many steps to show")
    aliases = sub.add_parser("aliases", help="every dataset's live version", description="every dataset's live version")
    aliases.set_defaults(func=cmd_aliases)
