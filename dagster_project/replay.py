"""The replay protocol (docs/architecture.md) as Dagster jobs, generated from the job declarations like the assets.

Per job (every job writes one topic or one Delta table):

- `replay_<job>`: launched from the Launchpad with `{version, from, by, downstream}` (defaults: the declared
  version, the earliest retained record, the launching user, the job alone). With `downstream`, every step acts
  on the job's set (`kappa replay plan`): each member replayed and verified (each one's checks on its own
  asset; one failure stops the set before anything goes live), the set gone live, and cut over in one
  transaction. Its ops are the protocol's steps:
  `catch_up` (`kappa replay start --pipes` in a subprocess: check, prepare, catch-up, verify; progress per batch
  live in the run's logs and as observations of the output asset) -> `verification` (the report as the results
  of the output asset's blocking checks `replay_quality` and `replay_reconciliation`; a failed check fails the
  step, so nothing after it runs) -> `go_live` (`kappa replay golive`) -> `cutover` (`kappa replay cutover`, then
  a materialization of the output asset naming the version readers now follow, from which, by whom).
- `rollback_<job>` (`{by}`) and `retire_<job>` (`{version, by}`): the separate steps.
- Two blocking asset checks on the job's output asset. A replay run reports them; executed on their own (or
  after a materialization), they read the latest verification the audit trail `kappa.audit` holds for the
  declared version.

Every step runs the `kappa` CLI outside Dagster's process (job code and Spark never run in it); the CLI records
who, when, from and to in the audit trail, exactly as when an operator runs the same command by hand.
"""

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from dagster import (
    AssetCheckEvaluation,
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetChecksDefinition,
    AssetKey,
    AssetMaterialization,
    AssetObservation,
    ConfigMapping,
    Failure,
    Field,
    In,
    JobDefinition,
    MetadataValue,
    Noneable,
    Nothing,
    OpExecutionContext,
    Out,
    Output,
    PipesTempFileContextInjector,
    PipesTempFileMessageReader,
    asset_check,
    graph,
    in_process_executor,
    op,
    open_pipes_session,
)

from dagster_project.assets import output_key
from dagster_project.resources import KappaResource
from kappa.cli.replay import INTERRUPTED, NOT_VERIFIED, PROGRESS_MESSAGE, REFUSED, VERIFICATION_MESSAGE, VERIFIED
from kappa.kafka.aliases import Alias, Step
from kappa.runtime.binding import dataset_of
from kappa.runtime.declaration import JobSpec
from kappa.runtime.discovery import discover, get_job

QUALITY_CHECK = "replay_quality"
RECONCILIATION_CHECK = "replay_reconciliation"
REPLAY_CHECKS = (QUALITY_CHECK, RECONCILIATION_CHECK)
CHECK_DOC = {
    QUALITY_CHECK: "The dataset's quality suite on",
    RECONCILIATION_CHECK: "Counts and key-level differences against the live version, of",
}
LOG_RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ ")  # kappa's logging format
OBSERVE_EVERY_S = 5.0  # at most one progress observation of the output asset per interval (and the last one)


def kappa_command(*args: str) -> list[str]:
    """The `kappa` CLI run by this interpreter (the code location's environment)."""
    return [sys.executable, "-m", "kappa.cli", *args]


def _operator(context: OpExecutionContext, by: str) -> list[str]:
    """`--by`: the run config's `by`, else the launching user Dagster tags the run with, else the CLI's
    default (KAPPA_OPERATOR or the login name of the process)."""
    who = by or context.run.tags.get("dagster/user", "")
    return ["--by", who] if who else []


def _echo(path: Path, stream: TextIO) -> None:
    """The subprocess's output into the step's captured stdout/stderr (the run page's stdout and stderr tabs)."""
    stream.write(path.read_text(errors="replace"))
    stream.flush()


def _tail(path: Path, lines: int = 20) -> str:
    text = path.read_text(errors="replace") if path.exists() else ""
    return "\n".join(text.strip().splitlines()[-lines:])


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the CLI's Python process alone (the catch-up stops after its current batch and resumes from its
    checkpoint; a SIGTERM to the whole group would kill Spark's JVM mid-batch), then SIGKILL whatever is left
    of its process group after 60 s."""
    if process.poll() is None:
        try:
            process.send_signal(signal.SIGTERM)
            process.wait(60)
        except subprocess.TimeoutExpired:
            pass
    with contextlib.suppress(ProcessLookupError):  # the group is gone when everything exited on its own
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(10)


def run_cli(context: OpExecutionContext, kappa: KappaResource, args: Sequence[str]) -> str:
    """One light protocol step (`kappa replay golive|cutover|rollback|retire ...`) in a subprocess: its output
    goes to the run's logs; a refusal or failure fails the op with the CLI's message."""
    command = kappa_command(*args)
    context.log.info("running " + " ".join(["kappa", *args]))
    done = subprocess.run(command, env=kappa.subprocess_env(), capture_output=True, text=True, check=False)
    for line in done.stdout.strip().splitlines():
        context.log.info(line)
    if done.returncode != 0:
        message = (done.stderr.strip().splitlines() or [f"exited {done.returncode}"])[-1]
        raise Failure(
            description=f"kappa {' '.join(args)}: {message}",
            metadata={"exit_status": done.returncode, "stderr": MetadataValue.text(done.stderr[-4000:])},
        )
    return done.stdout


# ------------------------------------------------------------------------------ catch-up ---------------


CATCH_UP_CONFIG = {
    "job": Field(str),
    "asset_key": Field([str]),
    "version": Field(int),
    "from": Field(str, default_value="earliest"),
    "by": Field(str, default_value=""),
    "max_offsets_per_trigger": Field(Noneable(int), default_value=None),
    "downstream": Field(bool, default_value=False),
}


def _progress_metadata(report: Mapping[str, Any]) -> dict[str, Any]:
    """Offsets done and total, events per second, and the time left once a rate is known (left out before)."""
    keys = ("offsets_done", "offsets_total", "percent", "events_per_second", "seconds_left")
    return {k: report[k] for k in keys if report.get(k) is not None}


@op(
    config_schema=CATCH_UP_CONFIG,
    required_resource_keys={"kappa"},
    out=Out(dict, description="the verification report of `kappa replay start`"),
    tags={"kind": "spark"},
    description="Check, prepare, catch up with availableNow from the start point and verify: "
    "`kappa replay start --pipes` in a subprocess. Launched again after a kill, it resumes from its checkpoint.",
)
def catch_up(context: OpExecutionContext) -> Iterator[Any]:
    config = context.op_config
    kappa: KappaResource = context.resources.kappa
    kappa.settings()  # a bad setting fails here, with its name, before a JVM starts
    # A cascade replays the plan's versions (`kappa replay plan`): the changed job's declared one, and below it.
    which = ["--downstream"] if config["downstream"] else ["--version", str(config["version"])]
    args = ["replay", "start", config["job"], *which, "--from", config["from"], *_operator(context, config["by"])]
    if config["max_offsets_per_trigger"]:
        args += ["--max-offsets-per-trigger", str(config["max_offsets_per_trigger"])]
    key = AssetKey(config["asset_key"])
    plan: dict[str, Any] = {}
    if config["downstream"]:  # the change's reach, in the run's logs and the step's output metadata
        plan = json.loads(run_cli(context, kappa, ["replay", "plan", config["job"], "--json"]))
        for m in plan["members"]:
            estimate = f"{m['estimate_s']:.0f} s" if m["estimate_s"] is not None else "no estimate"
            context.log.info(
                f"the set: {m['job']} v{m['live']} -> v{m['version']} ({m['why']}; reads {m['reads']}; "
                f"{m['records']:,} records, {estimate})"
            )
    context.log.info("running " + " ".join(["kappa", *args, "--pipes"]))
    with (
        tempfile.TemporaryDirectory(prefix="kappa-replay-") as tmp,
        open_pipes_session(
            context=context,
            context_injector=PipesTempFileContextInjector(),
            message_reader=PipesTempFileMessageReader(),
        ) as session,
    ):
        stdout, stderr = Path(tmp, "stdout"), Path(tmp, "stderr")
        with stdout.open("wb") as out, stderr.open("wb") as err:
            process = subprocess.Popen(
                kappa_command(*args, "--pipes"),
                env={**kappa.subprocess_env(), **session.get_bootstrap_env_vars()},
                stdout=out,
                stderr=err,
                start_new_session=True,  # its own process group: stopping the run stops Spark's workers too
            )
            seen, observed, pending = 0, 0.0, None
            try:
                while True:
                    finished = process.poll() is not None
                    messages = session.get_custom_messages()
                    for message in messages[seen:]:
                        if isinstance(message, dict) and message.get("kind") == PROGRESS_MESSAGE:
                            pending = message
                    seen = len(messages)
                    # Live progress as observations of the output asset (the log lines come through Pipes).
                    if pending and (finished or time.monotonic() - observed >= OBSERVE_EVERY_S):
                        observed = time.monotonic()
                        yield AssetObservation(
                            asset_key=key,
                            description=f"replay v{config['version']} catch-up progress",
                            metadata={"replay_version": config["version"], **_progress_metadata(pending)},
                        )
                        pending = None
                    if finished:
                        break
                    time.sleep(1.0)
            finally:
                _stop(process)  # the run was terminated: the catch-up stops after its batch, resumable
        stdout_text = stdout.read_text(errors="replace")
        error = _tail(stderr)
        _echo(stdout, sys.stdout)
        _echo(stderr, sys.stderr)
    status = process.returncode
    messages = session.get_custom_messages()  # after the session closed: its last messages are read by now
    for line in stdout_text.strip().splitlines():
        if not LOG_RECORD.match(line):  # what the CLI prints for its user; its log records are in stdout
            context.log.info(line)
    reports = [m for m in messages if isinstance(m, dict) and m.get("kind") == VERIFICATION_MESSAGE]
    progress = [m for m in messages if isinstance(m, dict) and m.get("kind") == PROGRESS_MESSAGE]
    if status == REFUSED:  # a refused check or a failed step: the CLI's one message says which
        message = error.splitlines()[-1] if error else f"exited {status}"
        raise Failure(description=f"kappa replay start: {message}", metadata={"stderr": MetadataValue.text(error)})
    if status == INTERRUPTED:
        raise Failure(
            description="the replay was stopped by a signal: launch it again (a catch-up resumes from its checkpoint)"
        )
    if status not in (VERIFIED, NOT_VERIFIED) or not reports:
        raise Failure(
            description=f"kappa replay start exited {status} without a verification report",
            metadata={"stderr": MetadataValue.text(error)},
        )
    members = [{k: v for k, v in r.items() if k != "kind"} for r in reports]
    report = members[0] | {"set": members} if config["downstream"] else members[-1]
    report["passed"] = all(bool(m.get("passed")) for m in members) and status == VERIFIED
    metadata: dict[str, Any] = {
        "version": config["version"],
        "from": config["from"],
        "progress_reports": len(progress),
        "verification_passed": report["passed"],
    }
    if config["downstream"]:
        metadata["set"] = MetadataValue.json([f"{m.get('job')} v{m.get('version')}" for m in members])
        metadata["plan"] = MetadataValue.json(plan)
    if progress:
        metadata |= _progress_metadata(progress[-1])
    yield Output(report | {"version": config["version"]}, metadata=metadata)


# ------------------------------------------------------------------------------ verification -----------


def check_evaluations(report: Mapping[str, Any]) -> dict[str, tuple[bool, str, dict[str, Any]]]:
    """check name -> (passed, description, metadata), from the report of `kappa.lifecycle.replay.verify`.

    The quality check fails when the dataset's suite failed; the reconciliation check fails when keys of the
    live version are missing from the new one, and carries whatever else made the whole report fail, so the
    two checks never pass together on a report that failed."""
    quality: dict[str, Any] = dict(report.get("quality") or {})
    reconciliation: dict[str, Any] = dict(report.get("reconciliation") or {})
    problems = [str(p) for p in report.get("problems") or []]
    quality_ok = quality.get("success", True) is not False
    quality_text = (
        f"suite {quality['suite']}: {'passed' if quality_ok else 'failed'}"
        if quality.get("suite")
        else str(quality.get("note", "no expectation suite"))
    )
    quality_meta: dict[str, Any] = {"suite": str(quality.get("suite") or "none"), "report": MetadataValue.json(quality)}
    if quality.get("failed"):
        quality_meta["failed"] = MetadataValue.json(quality["failed"])
    reconciliation_ok = not reconciliation.get("only_in_live") and not (
        not report.get("passed") and quality_ok
    )  # a failed report with a passing suite: the reconciliation is what failed
    if reconciliation.get("against"):
        reconciliation_text = (
            f"against {reconciliation['against']}: {reconciliation.get('rows_new', 0):,} rows new, "
            f"{reconciliation.get('rows_live', 0):,} live, {reconciliation.get('only_in_new', 0):,} only in new, "
            f"{reconciliation.get('only_in_live', 0):,} only in live, {reconciliation.get('changed', 0):,} changed"
        )
        reconciliation_meta: dict[str, Any] = {
            "against": reconciliation["against"],
            **{
                k: int(reconciliation.get(k, 0))
                for k in ("rows_new", "rows_live", "only_in_new", "only_in_live", "changed")
            },
            "keys": MetadataValue.json(list(reconciliation.get("keys", []))),
            "samples": MetadataValue.json(reconciliation.get("samples", {})),
        }
    else:
        reconciliation_text = str(reconciliation.get("note", "nothing to reconcile against"))
        reconciliation_meta = {"against": "none"}
    if problems:
        reconciliation_meta["problems"] = MetadataValue.json(problems)
    return {
        QUALITY_CHECK: (quality_ok, quality_text, quality_meta),
        RECONCILIATION_CHECK: (reconciliation_ok, reconciliation_text, reconciliation_meta),
    }


@op(
    config_schema={"job": Field(str), "asset_key": Field([str])},
    ins={"report": In(dict)},
    out=Out(Nothing),
    description="The verification report as the results of the output asset's blocking checks "
    f"({', '.join(REPLAY_CHECKS)}); a failed check fails this step, so the version neither goes live nor is "
    "cut over.",
)
def verification(context: OpExecutionContext, report: dict[str, Any]) -> None:
    root = context.op_config["job"]
    failed: list[str] = []
    # A cascade's report holds each member's: each one's checks land on its own output asset.
    for member in report.get("set") or [report | {"job": root}]:
        job, version = str(member.get("job", root)), member.get("version", report.get("version"))
        key = AssetKey(context.op_config["asset_key"]) if job == root else output_key(get_job(job))
        results = check_evaluations(member)
        for name, (passed, description, metadata) in results.items():
            context.log_event(
                AssetCheckEvaluation(
                    asset_key=key,
                    check_name=name,
                    passed=passed,
                    description=f"v{version}: {description}",
                    metadata={"replay_version": version, **metadata},
                    blocking=True,
                )
            )
        names = [name for name, (passed, _, _) in results.items() if not passed]
        if names or not member.get("passed"):
            problems = "; ".join(str(p) for p in member.get("problems") or [])
            failed.append(f"{job} v{version} ({', '.join(names) or 'failed'}){': ' + problems if problems else ''}")
    if failed or not report.get("passed"):
        whole = " and the set with it" if report.get("set") else ""
        raise Failure(
            description=f"failed verification: {'; '.join(failed) or 'the replay did not finish'}: it does not go "
            f"live{whole}, and nothing is cut over.",
        )
    context.log.info(
        f"{root} v{report.get('version')} passed verification" + (" with its set" if report.get("set") else "")
    )


# ------------------------------------------------------------------------------ go-live, cutover -------


BY_STEP = Field(str, default_value="")
STEP_CONFIG = {
    "job": Field(str),
    "asset_key": Field([str]),
    "version": Field(int),
    "by": BY_STEP,
    "downstream": Field(bool, default_value=False),
}


@op(
    config_schema=STEP_CONFIG,
    required_resource_keys={"kappa"},
    ins={"verified": In(Nothing)},
    out=Out(Nothing),
    description="Run the version continuously from the checkpoint where catch-up stopped (`kappa replay golive`, "
    "detached and supervised).",
)
def go_live(context: OpExecutionContext) -> None:
    config = context.op_config
    which = ["--downstream"] if config["downstream"] else ["--version", str(config["version"])]
    args = ["replay", "golive", config["job"], *which, *_operator(context, config["by"])]
    run_cli(context, context.resources.kappa, args)


def _alias_materialization(kappa: KappaResource, key: AssetKey, dataset: str, step: str) -> AssetMaterialization:
    """The output asset after its alias moved: the version readers now follow, from which, by whom, when."""
    from kappa.kafka.aliases import AliasRegistry

    alias = AliasRegistry(kappa.settings()).live(dataset)
    if alias is None:
        raise Failure(description=f"{dataset}: no alias after the {step}")
    return AssetMaterialization(
        asset_key=key,
        description=f"{step}: {dataset} now v{alias.version}",
        metadata={
            "step": step,
            "version": alias.version,
            "physical": alias.physical,
            "previous_version": alias.previous_version if alias.previous_version is not None else "none",
            "changed_by": alias.changed_by,
            "changed_at": MetadataValue.timestamp(alias.changed_at / 1000),
            "reason": alias.reason,
        },
    )


@op(
    config_schema={**STEP_CONFIG, "dataset": Field(str)},
    required_resource_keys={"kappa"},
    ins={"live": In(Nothing)},
    out=Out(Nothing),
    description="Move the dataset's alias to the version, atomically (`kappa replay cutover`; refused unless the "
    "version passed verification).",
)
def cutover(context: OpExecutionContext) -> None:
    config = context.op_config
    which = ["--downstream"] if config["downstream"] else ["--version", str(config["version"])]
    out = run_cli(context, context.resources.kappa, ["replay", "cutover", config["job"], *which,
                                                      *_operator(context, config["by"])])  # fmt: skip
    key = AssetKey(config["asset_key"])
    context.log_event(_alias_materialization(context.resources.kappa, key, config["dataset"], "cutover"))
    if config["downstream"]:  # every member's asset: the version its readers now follow
        for job in discover().values():
            if job.name != config["job"] and f"{dataset_of(job)}: v" in out:
                kappa = context.resources.kappa
                context.log_event(_alias_materialization(kappa, output_key(job), dataset_of(job), "cutover"))


@op(
    config_schema={"job": Field(str), "asset_key": Field([str]), "dataset": Field(str), "by": BY_STEP},
    required_resource_keys={"kappa"},
    out=Out(Nothing),
    description="Move the dataset's alias back to the version live before (`kappa replay rollback`).",
)
def rollback(context: OpExecutionContext) -> None:
    config = context.op_config
    run_cli(context, context.resources.kappa, ["replay", "rollback", config["job"], *_operator(context, config["by"])])
    key = AssetKey(config["asset_key"])
    context.log_event(_alias_materialization(context.resources.kappa, key, config["dataset"], "rollback"))


@op(
    config_schema=STEP_CONFIG,
    required_resource_keys={"kappa"},
    out=Out(Nothing),
    description="Stop a version that is not live and delete its output, checkpoint and consumer group "
    "(`kappa replay retire`; refused for the live version).",
)
def retire(context: OpExecutionContext) -> None:
    config = context.op_config
    args = ["replay", "retire", config["job"], "--version", str(config["version"]), *_operator(context, config["by"])]
    run_cli(context, context.resources.kappa, args)


@graph
def replay_graph() -> None:
    cutover(live=go_live(verified=verification(catch_up())))


@graph
def rollback_graph() -> None:
    rollback()


@graph
def retire_graph() -> None:
    retire()


# ------------------------------------------------------------------------------ per job ----------------


BY = Field(str, default_value="", description="who acts (recorded; default: the run's user, else the login name)")


def replay_job(job: JobSpec) -> JobDefinition:
    """`replay_<job>`: run config `{version, from, by}` (and a batch cap), mapped onto the steps."""
    key = list(output_key(job).path)
    ident = {"job": job.name, "asset_key": key}

    def to_ops(config: dict[str, Any]) -> dict[str, Any]:
        step = ident | {"version": config["version"], "by": config["by"], "downstream": config["downstream"]}
        return {
            "ops": {
                "catch_up": {"config": step | {k: config[k] for k in ("from", "max_offsets_per_trigger")}},
                "verification": {"config": ident},
                "go_live": {"config": step},
                "cutover": {"config": step | {"dataset": dataset_of(job)}},
            }
        }

    return replay_graph.to_job(
        # The steps only launch and watch `kappa` processes: no process per step.
        executor_def=in_process_executor,
        name=f"replay_{job.name}",
        description=f"Replay {job.name} into a new version of {job.output.name}: check, prepare, catch up, verify "
        "(blocking checks), go live, cut over. Config: version, from (earliest | ISO timestamp with zone), by.",
        config=ConfigMapping(
            config_schema={
                "version": Field(int, default_value=job.version, description="the version to replay (declared)"),
                "from": Field(str, default_value="earliest", description="earliest | ISO timestamp with zone"),
                "by": BY,
                "max_offsets_per_trigger": Field(
                    Noneable(int), default_value=None, description="cap each catch-up batch (more progress reports)"
                ),
                "downstream": Field(
                    bool,
                    default_value=False,
                    description="also replay every dataset below the job (`kappa replay plan`), verify the set, "
                    "and cut it over in one transaction",
                ),
            },
            config_fn=to_ops,
        ),
        tags={"kappa/job": job.name, "kappa/step": "replay"},
    )


def rollback_job(job: JobSpec) -> JobDefinition:
    ident = {"job": job.name, "asset_key": list(output_key(job).path), "dataset": dataset_of(job)}
    return rollback_graph.to_job(
        # The steps only launch and watch `kappa` processes: no process per step.
        executor_def=in_process_executor,
        name=f"rollback_{job.name}",
        description=f"Move {job.output.name}'s alias back to the version live before. Config: by.",
        config=ConfigMapping(
            config_schema={"by": BY}, config_fn=lambda c: {"ops": {"rollback": {"config": ident | {"by": c["by"]}}}}
        ),
        tags={"kappa/job": job.name, "kappa/step": "rollback"},
    )


def retire_job(job: JobSpec) -> JobDefinition:
    ident = {"job": job.name, "asset_key": list(output_key(job).path)}
    return retire_graph.to_job(
        # The steps only launch and watch `kappa` processes: no process per step.
        executor_def=in_process_executor,
        name=f"retire_{job.name}",
        description=f"Stop and delete an old version of {job.name} (never the live one). Config: version, by.",
        config=ConfigMapping(
            config_schema={"version": Field(int, description="the version to retire"), "by": BY},
            config_fn=lambda c: {"ops": {"retire": {"config": ident | {"version": c["version"], "by": c["by"]}}}},
        ),
        tags={"kappa/job": job.name, "kappa/step": "retire"},
    )


def replay_checks(job: JobSpec) -> list[AssetChecksDefinition]:
    """The output asset's blocking checks. A replay run reports them; run on their own, they read the latest
    verification recorded in the audit trail for the declared version (no Spark in Dagster's process)."""
    key = output_key(job)

    def make(name: str) -> AssetChecksDefinition:
        @asset_check(
            asset=key,
            name=name,
            blocking=True,
            description=CHECK_DOC[name]
            + " a replayed version (reported by replay runs; on its own: the audit trail's latest verification of "
            "the declared version).",
        )
        def _recorded(context: AssetCheckExecutionContext, kappa: KappaResource) -> AssetCheckResult:
            passed, description, metadata = recorded_verification(kappa, job)[name]
            return AssetCheckResult(passed=passed, description=description, metadata=metadata)

        return _recorded

    return [make(name) for name in REPLAY_CHECKS]


def recorded_verification(kappa: KappaResource, job: JobSpec) -> dict[str, tuple[bool, str, dict[str, Any]]]:
    """The checks' results from the audit trail (no Spark in Dagster's process)."""
    from kappa.kafka.aliases import AliasRegistry

    registry = AliasRegistry(kappa.settings())
    return evaluations_from_audit(job, registry.steps(job.name), registry.live(dataset_of(job)))


def evaluations_from_audit(
    job: JobSpec, steps: Sequence[Step], live: Alias | None
) -> dict[str, tuple[bool, str, dict[str, Any]]]:
    """check name -> (passed, description, metadata) from the latest `verify` step of the declared version. A
    declared version that is live without one went live as the dataset's first deployment (nothing to
    reconcile); a verify step that crashed passes neither check."""
    dataset = dataset_of(job)
    verifies = [
        s for s in steps if s.step == "verify" and s.to_version == job.version and s.facts.get("dataset") == dataset
    ]
    if verifies:
        step = verifies[-1]
        if "error" in step.facts:
            note = f"v{job.version}: the verification by {step.by} did not complete: {step.facts['error']}"
            return {name: (False, note, {"verified_at": step.at}) for name in REPLAY_CHECKS}
        report = step.facts | {"passed": step.outcome == "ok"}
        return {
            name: (passed, f"v{job.version}, verified by {step.by}: {text}", meta | {"verified_at": step.at})
            for name, (passed, text, meta) in check_evaluations(report).items()
        }
    if live is not None and live.version == job.version:
        note = f"v{job.version} is live ({live.reason}); no replay of it was verified: nothing to reconcile"
        return {name: (True, note, {"live_version": live.version}) for name in REPLAY_CHECKS}
    note = f"v{job.version} has not been verified: launch replay_{job.name}"
    return {name: (False, note, {"live_version": live.version if live else "none"}) for name in REPLAY_CHECKS}


def replay_definitions(jobs: Mapping[str, JobSpec]) -> list[JobDefinition]:
    """`replay_<job>`, `rollback_<job>` and `retire_<job>` for every job (each writes a topic or a table)."""
    return [make(job) for job in jobs.values() for make in (replay_job, rollback_job, retire_job)]


def replay_asset_checks(jobs: Mapping[str, JobSpec]) -> list[AssetChecksDefinition]:
    return [check for job in jobs.values() for check in replay_checks(job)]
