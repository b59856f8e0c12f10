"""The replay protocol as a library: each step with its preconditions, its record in the audit trail, and the
set operations of a cascade. `kappa replay ...` and Dagster call these and nothing below them.

    check     -> Checked           the version may be replayed from the start point
    start     -> events            check, prepare, catch-up and verify, for one version or a cascade's set in
                                   pipeline order (MemberStarting, CaughtUp, Verified as each happens)
    verify    -> Verification      the quality suite and the reconciliation against the live version
    golive    -> WentLive each     the version (or every member of the set) runs continuously
    cutover   -> Moved             the alias (or the set's aliases, in one transaction) to the new version
    rollback  -> Moved             back to the version(s) live before
    retire    -> Retired           an old version stopped and deleted

Every step appends one record to the audit trail `kappa.audit` (a set step, one per member): who, when, from
and to, and what it found, or why it was refused, failed or was interrupted. A step that must not run raises
ReplayRefusedError; a verification that fails raises NotVerifiedError, a catch-up stopped by a signal
CatchUpInterruptedError (both after their record). `start_outcome` reads how a `start` ended from those
records: what a caller that ran it in another process (Dagster, through `kappa replay start`) learns it from.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

from kappa.contracts.expectations import import_in_background
from kappa.core.errors import KappaError
from kappa.core.settings import KappaSettings
from kappa.kafka.aliases import Alias, AliasRegistry, Step, now_ms
from kappa.lifecycle import cascade, deployments, moves
from kappa.lifecycle.catch_up import catch_up, exclusive_catch_up
from kappa.lifecycle.launchers import job_pid
from kappa.lifecycle.model import Replay, ReplayRefusedError, load
from kappa.lifecycle.replay import check as check_version
from kappa.lifecycle.replay import prepare
from kappa.lifecycle.verification import Verification, verified
from kappa.lifecycle.verification import verify as verify_version
from kappa.runtime.binding import describe_inputs
from kappa.runtime.declaration import Starting
from kappa.runtime.discovery import discover

# The kinds of the Pipes messages `kappa replay start --pipes` sends: a catch-up's progress per batch, and
# each member's verification report (its outcome is in the audit trail: `start_outcome`).
PROGRESS_MESSAGE = "replay_progress"
VERIFICATION_MESSAGE = "replay_verification"


class NotVerifiedError(KappaError):
    """A verification ran and failed: the version neither goes live nor is cut over (nor the rest of its set)."""

    def __init__(self, replay: Replay, verification: Verification, left: Sequence[Replay] = ()) -> None:
        super().__init__(f"{replay.job.name} v{replay.version} failed verification: {'; '.join(verification.problems)}")
        self.replay, self.verification, self.left = replay, verification, tuple(left)


class CatchUpInterruptedError(KappaError):
    """A catch-up stopped by a signal after its current batch: launched again, it resumes from its checkpoint."""

    def __init__(self, replay: Replay, left: Sequence[Replay] = ()) -> None:
        super().__init__(f"the catch-up of {replay.job.name} v{replay.version} was stopped by a signal")
        self.replay, self.left = replay, tuple(left)


# ------------------------------------------------------------------ the audit trail -------------------------


@contextmanager
def recorded(
    settings: KappaSettings, replay: Replay, step: str, by: str | None, to_version: int | None = None
) -> Iterator[dict[str, Any]]:
    """Run one step and record it: ok with its findings (the yielded dict; `_outcome` overrides "ok"), or
    refused (ReplayRefusedError), interrupted (KeyboardInterrupt: Ctrl-C, or a SIGTERM the CLI turns into one)
    or failed, with the error."""
    registry = AliasRegistry(settings)
    found: dict[str, Any] = {}
    live = replay.live.version if replay.live else None
    to = replay.version if to_version is None else to_version
    details = found
    try:
        yield found
        outcome = str(found.pop("_outcome", "ok"))
    except KeyboardInterrupt as exc:
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


@contextmanager
def recorded_set(
    settings: KappaSettings, replays: Sequence[Replay], step: str, by: str | None, *, root: str, back: bool = False
) -> Iterator[list[dict[str, Any]]]:
    """One set step, recorded for each member as `recorded` records one (the same outcome for all: one move)."""
    with ExitStack() as stack:
        facts = []
        for replay in replays:
            to = replay.live.previous_version if back and replay.live else None
            found = stack.enter_context(recorded(settings, replay, step, by, to_version=to))
            found["root"] = root
            facts.append(found)
        yield facts


# ------------------------------------------------------------------ the versions a step acts on -------------


def members(settings: KappaSettings, job: str, *, version: int | None = None, downstream: bool = False) -> list[Replay]:
    """What `start` replays: `version` of the job, else the plan's (the job alone, or with `downstream` its set)."""
    if version is not None:
        return [load(settings, job, version)]
    found = cascade.plan(settings, job, downstream=downstream)
    if not found.members:
        if downstream:
            raise ReplayRefusedError(f"nothing to replay: {'; '.join(found.unchanged)}")
        return [load(settings, job)]  # its check says why there is nothing to replay
    return _replays(settings, found)


def set_or_one(settings: KappaSettings, job: str, *, version: int | None, downstream: bool) -> list[Replay]:
    """With `downstream`, the set's versions (the plan); else the one version."""
    if not downstream:
        return [load(settings, job, version)]
    found = cascade.plan(settings, job)
    if not found.members:
        raise ReplayRefusedError(f"nothing below {job} to act on: {'; '.join(found.unchanged)}")
    return _replays(settings, found)


def _replays(settings: KappaSettings, found: cascade.Plan) -> list[Replay]:
    jobs, aliases = discover(), AliasRegistry(settings).all()
    return [m.replay(jobs, aliases) for m in found.members]


# ------------------------------------------------------------------ check, start, verify ------------------


@dataclass(frozen=True)
class Checked:
    replay: Replay
    schema: str  # the output schema's verdict
    horizons: dict[str, str]  # input topic -> "complete" or the time from which it is complete
    facts: dict[str, Any]  # everything the check found (as recorded)


def check(
    settings: KappaSettings, job: str, *, version: int | None = None, starting: Starting, by: str | None = None
) -> Checked:
    replay = load(settings, job, version)
    with recorded(settings, replay, "check", by) as found:
        found |= check_version(settings, replay, starting)
    return Checked(replay, found["schema"], dict(found["horizons"]), dict(found))


@dataclass(frozen=True)
class MemberStarting:
    """A set's member is next (only for a set of more than one)."""

    number: int
    total: int
    replay: Replay
    already_verified: bool  # then it is not replayed again

    @property
    def reads(self) -> str:
        return f"reads {describe_inputs(self.replay.input_versions)}"


@dataclass(frozen=True)
class CaughtUp:
    replay: Replay
    seconds: float
    input_rows: int
    batches: int
    events_per_second: int
    interrupted: bool  # stopped by a signal after its current batch: CatchUpInterruptedError follows


@dataclass(frozen=True)
class Verified:
    replay: Replay
    verification: Verification  # a failed one: NotVerifiedError follows


StartEvent = MemberStarting | CaughtUp | Verified


def start(
    settings: KappaSettings,
    job: str,
    *,
    version: int | None = None,
    downstream: bool = False,
    starting: Starting | None = None,
    by: str | None = None,
    max_offsets_per_trigger: int | None = None,
    on_progress: Callable[[Replay, dict[str, Any]], None] | None = None,
) -> Iterator[StartEvent]:
    """check -> prepare -> catch-up -> verify, for the job or (`downstream`) every member of its set in
    pipeline order, each event as it happens; launched again after a kill, it resumes from the checkpoints.
    A failure stops the set: ReplayRefusedError, CatchUpInterruptedError or NotVerifiedError (with the
    members left)."""
    starting = starting or Starting()
    replays = members(settings, job, version=version, downstream=downstream)
    began = now_ms()  # the set's catch-ups compare with the live set as it was when the first one started
    for number, replay in enumerate(replays, start=1):
        left = replays[number:]
        if len(replays) > 1:
            done = verified(AliasRegistry(settings), replay.job.name, replay.version, replay.dataset)
            yield MemberStarting(number, len(replays), replay, done)
            if done:
                continue
        # Below the changed job, a member reads new versions whole; a source it reads starts where asked.
        sources = any(t.name not in replay.input_versions for t in replay.job.inputs)
        member_start = starting if number == 1 or sources else Starting()
        caught_up = _catch_up(
            settings, replay, member_start, by, max_offsets_per_trigger, on_progress, began if number > 1 else None
        )
        yield caught_up
        if caught_up.interrupted:
            raise CatchUpInterruptedError(replay, left)
        with recorded(settings, replay, "verify", by) as found:
            result = verify_version(settings, replay)
            found |= result.as_dict()
            if not result.passed:
                found["_outcome"] = "failed"
        yield Verified(replay, result)
        if not result.passed:
            raise NotVerifiedError(replay, result, left)


def _catch_up(
    settings: KappaSettings,
    replay: Replay,
    starting: Starting,
    by: str | None,
    max_offsets_per_trigger: int | None,
    on_progress: Callable[[Replay, dict[str, Any]], None] | None,
    began: int | None,
) -> CaughtUp:
    """check, prepare and catch-up of one version, each recorded; the checkpoint held from check to the end."""
    with ExitStack() as stack:
        with recorded(settings, replay, "check", by) as found:
            stack.enter_context(exclusive_catch_up(settings, replay))  # refused (and recorded) while in use
            found |= check_version(settings, replay, starting)
        with recorded(settings, replay, "prepare", by) as found:
            found |= prepare(settings, replay)
        import_in_background()  # for the verification after the catch-up
        with recorded(settings, replay, "catch-up", by) as found:
            # Before the input ends are fixed: what verify compares the live at (a set's: its first catch-up's).
            found["started_ms"] = began or now_ms()
            run = catch_up(
                settings,
                replay,
                starting,
                max_offsets_per_trigger=max_offsets_per_trigger,
                on_progress=None if on_progress is None else (lambda report: on_progress(replay, report)),
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
    return CaughtUp(
        replay,
        found["seconds"],
        found["input_rows"],
        found["batches"],
        found["events_per_second"],
        run.stopped_by_signal,
    )


def verify(settings: KappaSettings, job: str, *, version: int | None = None, by: str | None = None) -> Verification:
    """The verification of one version, recorded; NotVerifiedError (after its record) when it fails."""
    replay = load(settings, job, version)
    with recorded(settings, replay, "verify", by) as found:
        result = verify_version(settings, replay)
        found |= result.as_dict()
        if not result.passed:
            found["_outcome"] = "failed"
    if not result.passed:
        raise NotVerifiedError(replay, result)
    return result


# ------------------------------------------------------------------ go live, cut over, roll back, retire --


@dataclass(frozen=True)
class WentLive:
    replay: Replay
    already_running: bool  # a member of a set that ran already
    pid: int | None = None
    log: str | None = None


def golive(
    settings: KappaSettings,
    job: str,
    *,
    version: int | None = None,
    downstream: bool = False,
    by: str | None = None,
    wait: float = 5.0,
    env: dict[str, str] | None = None,
) -> Iterator[WentLive]:
    """The version, or every member of the set, runs continuously from its checkpoint (started detached,
    with `env` over this process's environment), each recorded as it goes live."""
    replays = set_or_one(settings, job, version=version, downstream=downstream)
    for replay in replays:
        with recorded(settings, replay, "go-live", by) as found:
            if len(replays) > 1 and moves.running(settings, replay.job.name, replay.version):
                went = WentLive(replay, already_running=True)
            else:
                deployment = deployments.start(settings, replay.job.name, replay.version, env=env)
                deployments.confirm_running(deployment, wait)
                found |= {"pid": job_pid(deployment), "log": str(deployment.log_path)}
                went = WentLive(replay, False, found["pid"], found["log"])
        yield went


@dataclass(frozen=True)
class Moved:
    """Aliases moved by a cutover or a rollback: one, or a set's in one transaction."""

    aliases: tuple[Alias, ...]
    is_set: bool
    seconds: float  # the whole step, with its checks
    transaction_s: float | None = None  # a set's: the transaction alone
    facts: dict[str, Any] = field(default_factory=dict)


def cutover(
    settings: KappaSettings,
    job: str,
    *,
    version: int | None = None,
    downstream: bool = False,
    by: str | None = None,
    force: bool = False,
) -> Moved:
    """The dataset's alias (or the set's aliases, in one transaction) to the new version; refused unless
    verified (`force`: one job's only, recorded), running and caught up."""
    started = time.monotonic()
    if downstream:
        if force:
            raise ReplayRefusedError("a set is cut over only verified: --force applies to one job's cutover")
        the_plan = cascade.plan(settings, job)
        with recorded_set(settings, _replays(settings, the_plan), "cutover", by, root=job) as facts:
            moved, transaction_s = cascade.cutover_set(settings, the_plan, by=by)
            for alias, fact in zip(moved, facts, strict=True):
                fact |= {"physical": alias.physical, "set": [a.dataset for a in moved], "transaction_s": transaction_s}
        return Moved(tuple(moved), True, time.monotonic() - started, transaction_s)
    replay = load(settings, job, version)
    with recorded(settings, replay, "cutover", by) as found:
        alias = moves.cutover(settings, replay, by=by, force=force)
        found |= {"dataset": alias.dataset, "physical": alias.physical, "forced": force}
    return Moved((alias,), False, time.monotonic() - started, facts=dict(found))


def rollback(settings: KappaSettings, job: str, *, downstream: bool = False, by: str | None = None) -> Moved:
    """The alias (or the last set cutover's aliases, in one transaction) back to the version live before."""
    started = time.monotonic()
    if downstream:
        replays = [load(settings, a.job, a.version) for a in cascade.last_set(settings, job)]
        with recorded_set(settings, replays, "rollback", by, root=job, back=True) as facts:
            back, transaction_s = cascade.rollback_set(settings, job, by=by)
            for alias, fact in zip(back, facts, strict=True):
                fact |= {"dataset": alias.dataset, "from": alias.previous_version, "to": alias.version}
        return Moved(tuple(back), True, time.monotonic() - started, transaction_s)
    replay = load(settings, job)
    live = replay.live
    back_to = live.previous_version if live and live.previous_version is not None else replay.version
    with recorded(settings, replay, "rollback", by, to_version=back_to) as found:
        alias = moves.rollback(settings, replay, by=by)
        found |= {"dataset": alias.dataset, "from": live.version if live else None, "to": alias.version}
    return Moved((alias,), False, time.monotonic() - started, facts=dict(found))


@dataclass(frozen=True)
class Retired:
    replay: Replay
    stopped: bool
    deleted: tuple[str, ...]
    checkpoint: str


def retire(settings: KappaSettings, job: str, *, version: int | None = None, by: str | None = None) -> Retired:
    """Stop a version that is not live and delete its output, side topic, checkpoint and consumer group."""
    replay = load(settings, job, version)
    with recorded(settings, replay, "retire", by) as found:
        found |= moves.retire(settings, replay)
    return Retired(replay, bool(found["stopped"]), tuple(found["deleted"]), str(found["checkpoint"]))


# ------------------------------------------------------------------ how a start ended, from the audit -----


@dataclass(frozen=True)
class MemberOutcome:
    """One member of a `start`, as its records since the start tell it."""

    job: str
    version: int
    dataset: str
    step: str | None  # the last step recorded for it (None: the start never reached it)
    outcome: str | None  # ok, refused, failed, interrupted
    error: str | None  # why a step was refused, failed or was interrupted
    report: dict[str, Any] | None  # its verification report (with `passed`), when one ran

    @property
    def passed(self) -> bool:
        return self.report is not None and bool(self.report.get("passed"))


@dataclass(frozen=True)
class StartOutcome:
    members: tuple[MemberOutcome, ...]

    @property
    def passed(self) -> bool:
        return bool(self.members) and all(m.passed for m in self.members)

    @property
    def stopped(self) -> MemberOutcome | None:
        """The member whose step was refused, failed without a report, or was interrupted: what stopped it."""
        return next((m for m in self.members if m.error is not None), None)

    @property
    def reports(self) -> list[dict[str, Any]]:
        """Each verified member's report, with its job and version, in pipeline order."""
        return [m.report | {"job": m.job, "version": m.version} for m in self.members if m.report is not None]


def start_outcome(settings: KappaSettings, replays: Sequence[Replay], since_ms: int) -> StartOutcome:
    """How a `start` of these versions, begun at `since_ms`, ended: each one's last recorded step since then
    (a member verified before, which the start does not replay again, by its latest verification)."""
    registry = AliasRegistry(settings)
    found = []
    for replay in replays:
        steps = [
            s
            for s in registry.steps(replay.job.name)
            if s.to_version == replay.version and s.facts.get("dataset") == replay.dataset
        ]
        since = [s for s in steps if s.at >= since_ms]
        verifies = [s for s in steps if s.step == "verify" and s.outcome == "ok"]
        # A member of a set verified before: the start does not replay it again (it records nothing for it).
        before = verifies[-1] if verifies and len(replays) > 1 else None
        last: Step | None = since[-1] if since else before
        found.append(_member_outcome(replay, last))
    return StartOutcome(tuple(found))


def _member_outcome(replay: Replay, last: Step | None) -> MemberOutcome:
    name, version, dataset = replay.job.name, replay.version, replay.dataset
    if last is None:
        return MemberOutcome(name, version, dataset, None, None, None, None)
    facts = last.facts
    error = facts.get("error")
    report: dict[str, Any] | None = None
    if last.step == "verify" and error is None:
        kept = {k: facts[k] for k in ("quality", "reconciliation", "problems") if k in facts}
        report = kept | {"passed": last.outcome == "ok"}
    elif last.outcome == "interrupted" and error is None:
        error = "stopped by a signal"  # a catch-up that stopped after its batch
    elif error is None and last.outcome != "ok":
        error = f"{last.step} {last.outcome}"
    elif error is None:
        error = f"stopped after its {last.step}"  # the start ended before its verification
    return MemberOutcome(name, version, dataset, last.step, last.outcome, error, report)
