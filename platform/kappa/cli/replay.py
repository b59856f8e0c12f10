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
from datetime import UTC, datetime
from types import FrameType
from typing import Any

from kappa.cli.parsing import Command
from kappa.cli.table import render
from kappa.core.errors import KappaError
from kappa.core.settings import KappaSettings
from kappa.kafka.aliases import Alias, AliasRegistry
from kappa.lifecycle import cascade, protocol
from kappa.lifecycle.catch_up import describe_progress
from kappa.lifecycle.model import Replay
from kappa.lifecycle.verification import Verification
from kappa.runtime.binding import dataset_of, describe_inputs
from kappa.runtime.declaration import Starting
from kappa.runtime.discovery import get_job

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


def print_verification(result: Verification) -> None:
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
    checked = protocol.check(settings, args.job, version=args.version, starting=_starting(args.start_from), by=args.by)
    print(f"{args.job} v{checked.replay.version}: checks passed")
    print(f"  schema: {checked.schema}")
    for topic, horizon in checked.horizons.items():
        print(f"  {horizon_line(topic, horizon)}")
    return 0


def cmd_start(settings: KappaSettings, args: argparse.Namespace) -> int:
    """check -> prepare -> catch-up -> verify, for the job or (--downstream) every dataset below it in pipeline
    order (kappa.lifecycle.protocol.start); launched again after a kill, it resumes from the checkpoints."""
    # Lazy: imports pyspark, only where a Spark session runs (this module is imported without one).
    from kappa.runtime.pipes import pipes_reporter
    from kappa.runtime.runner import configure_logging

    configure_logging()
    starting = _starting(args.start_from)
    with contextlib.ExitStack() as stack:  # with --pipes, a failure reaches Dagster as the run's failure
        reporter = stack.enter_context(pipes_reporter()) if args.pipes else None

        def on_progress(replay: Replay, report: dict[str, Any]) -> None:
            assert reporter is not None
            line = describe_progress(replay.job.name, replay.version, report)
            reporter.message(protocol.PROGRESS_MESSAGE, report | {"job": replay.job.name}, line)

        events = protocol.start(
            settings,
            args.job,
            version=args.version,
            downstream=args.downstream,
            starting=starting,
            by=args.by,
            max_offsets_per_trigger=args.max_offsets_per_trigger,
            on_progress=on_progress if reporter is not None else None,
        )
        total = 1
        try:
            for event in events:
                if isinstance(event, protocol.MemberStarting):
                    total = event.total
                    print(
                        f"[{event.number}/{event.total}] {event.replay.job.name} v{event.replay.version}: {event.reads}"
                    )
                    if event.already_verified:
                        print(f"{event.replay.job.name} v{event.replay.version}: verified already, not replayed again")
                elif isinstance(event, protocol.CaughtUp):
                    print(
                        f"catch-up {event.replay.job.name} v{event.replay.version}: {event.input_rows:,} rows in "
                        f"{event.seconds} s ({event.events_per_second:,} events/s)"
                    )
                else:
                    print_verification(event.verification)
                    if reporter is not None:
                        # The Dagster op learns the outcome from the audit trail (protocol.start_outcome); this
                        # message shows the report in the run's logs as it comes.
                        replay, result = event.replay, event.verification
                        reporter.message(
                            protocol.VERIFICATION_MESSAGE,
                            result.as_dict() | {"job": replay.job.name, "version": replay.version},
                            f"verification of {replay.job.name} v{replay.version} "
                            f"{'passed' if result.passed else 'FAILED'}",
                        )
        except protocol.CatchUpInterruptedError as exc:
            print("stopped by signal: launch the same command again to resume from the checkpoint")
            _set_stops(exc.left)
            return INTERRUPTED
        except protocol.NotVerifiedError as exc:
            _set_stops(exc.left)
            return NOT_VERIFIED
        if total > 1:
            print(f"the set is verified: next `kappa replay golive {args.job} --downstream`, then cutover")
        return VERIFIED


def _set_stops(left: tuple[Replay, ...]) -> None:
    if left:
        print(f"the set stops here: {', '.join(r.job.name for r in left)} not replayed; nothing goes live")


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
    try:
        result = protocol.verify(settings, args.job, version=args.version, by=args.by)
    except protocol.NotVerifiedError as exc:
        print_verification(exc.verification)
        return NOT_VERIFIED
    print_verification(result)
    return VERIFIED


def cmd_golive(settings: KappaSettings, args: argparse.Namespace) -> int:
    for went in protocol.golive(
        settings, args.job, version=args.version, downstream=args.downstream, by=args.by, wait=args.wait
    ):
        name = f"{went.replay.job.name} v{went.replay.version}"
        if went.already_running:
            print(f"{name} runs already")
        else:
            print(f"{name} runs continuously from its checkpoint (pid {went.pid}, log {went.log})")
    return 0


def cmd_cutover(settings: KappaSettings, args: argparse.Namespace) -> int:
    moved = protocol.cutover(
        settings, args.job, version=args.version, downstream=args.downstream, by=args.by, force=args.force
    )
    if moved.is_set:
        _print_set(moved, f"cutover of the set of {args.job}")
        return 0
    [alias] = moved.aliases
    print(
        f"{alias.dataset}: v{alias.previous_version} -> v{alias.version} ({alias.physical}) by {alias.changed_by} "
        f"at {_when(alias.changed_at)}; cutover took {moved.seconds:.2f} s"
    )
    return 0


def _print_set(moved: protocol.Moved, what: str) -> None:
    for alias in moved.aliases:
        print(f"{alias.dataset}: v{alias.previous_version} -> v{alias.version} ({alias.physical})")
    first: Alias = moved.aliases[0]
    print(
        f"{what}: {len(moved.aliases)} aliases in one transaction ({moved.transaction_s or 0:.2f} s) by "
        f"{first.changed_by} at {_when(first.changed_at)}; the command took {moved.seconds:.2f} s with its checks"
    )


def cmd_rollback(settings: KappaSettings, args: argparse.Namespace) -> int:
    moved = protocol.rollback(settings, args.job, downstream=args.downstream, by=args.by)
    if moved.is_set:
        _print_set(moved, f"rollback of the set of {args.job}")
        return 0
    [alias] = moved.aliases
    print(
        f"{alias.dataset}: v{alias.previous_version} -> v{alias.version} ({alias.physical}) by {alias.changed_by} "
        f"at {_when(alias.changed_at)} (rollback)"
    )
    return 0


def cmd_retire(settings: KappaSettings, args: argparse.Namespace) -> int:
    retired = protocol.retire(settings, args.job, version=args.version, by=args.by)
    print(
        f"{args.job} v{retired.replay.version} retired: stopped {retired.stopped}, deleted {', '.join(retired.deleted)}"
    )
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
