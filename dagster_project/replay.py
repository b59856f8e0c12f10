"""The replay protocol (docs/architecture.md) as Dagster jobs, generated from the job declarations like the assets.

Per job (every job writes one topic or one Delta table):

- `replay_<job>`: launched from the Launchpad with `{version, from, by, downstream}` (defaults: the declared
  version, the earliest retained record, the launching user, the job alone). With `downstream`, every step acts
  on the job's set (`kappa replay plan`): each member replayed and verified (each one's checks on its own
  asset; one failure stops the set before anything goes live), the set gone live, and cut over in one
  transaction. Its ops are the protocol's steps:
  `catch_up` (`kappa replay start --pipes` in a subprocess: check, prepare, catch-up, verify; progress per batch
  live in the run's logs and as observations of the output asset; the outcome read from the audit trail) ->
  `verification` (the report as the results of the output asset's blocking checks `replay_quality` and
  `replay_reconciliation`, replay_checks.py; a failed check fails the step, so nothing after it runs) ->
  `go_live` -> `cutover` (then a materialization of the output asset naming the version readers now follow,
  from which, by whom).
- `rollback_<job>` (`{by}`) and `retire_<job>` (`{version, by}`): the separate steps.

Each step is a call of the protocol's library, `kappa.lifecycle.protocol`, which checks its preconditions and
records who, when, from and to in the audit trail exactly as when an operator runs the `kappa` command. The
light steps run in Dagster's process and read the typed results; the catch-up runs Spark, so it runs as the
`kappa` CLI in its own process (job code and Spark never run in Dagster's), and the op learns how it ended
from the audit trail (`protocol.start_outcome`), not from its output or exit status.
"""

import contextlib
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from dagster import (
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
    graph,
    in_process_executor,
    op,
    open_pipes_session,
)

from dagster_project.assets import kappa_command, output_key
from dagster_project.replay_checks import verification
from dagster_project.resources import KappaResource
from kappa.core.errors import KappaError
from kappa.core.security import known_secrets, redact
from kappa.core.settings import KappaSettings
from kappa.kafka.aliases import AliasRegistry, now_ms
from kappa.lifecycle import cascade, protocol
from kappa.lifecycle.model import Replay
from kappa.runtime.binding import dataset_of
from kappa.runtime.declaration import JobSpec
from kappa.runtime.discovery import discover
from kappa.stack.process import end_group

OBSERVE_EVERY_S = 5.0  # at most one progress observation of the output asset per interval (and the last one)
LOG_RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ ")  # kappa's logging format


def _operator(context: OpExecutionContext, by: str) -> str | None:
    """Who acts: the run config's `by`, else the launching user Dagster tags the run with, else None (the
    protocol's default: KAPPA_OPERATOR or the login name of the process)."""
    return by or context.run.tags.get("dagster/user") or None


@contextlib.contextmanager
def _step(what: str) -> Iterator[None]:
    """A refused or failed protocol step fails the op with the protocol's one message."""
    try:
        yield
    except KappaError as exc:
        raise Failure(description=f"{what}: {exc}") from None


def _tail(path: Path, lines: int = 20) -> str:
    text = path.read_text(errors="replace") if path.exists() else ""
    return "\n".join(text.strip().splitlines()[-lines:])


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the CLI's Python process alone (the catch-up stops after its current batch and resumes from its
    checkpoint; a SIGTERM to the whole group would kill Spark's JVM mid-batch), then SIGKILL whatever is left
    of its process group, after 60 s at most."""
    end_group(process.pid, lambda: process.poll() is None, 60, "the catch-up", term=[process.pid], whole_group=True)


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


def _members(context: OpExecutionContext, settings: KappaSettings) -> tuple[list[Replay], dict[str, Any]]:
    """The versions the catch-up replays (what its outcome is read for), and with `downstream` the plan."""
    config = context.op_config
    job, downstream = config["job"], config["downstream"]
    with _step("kappa replay start"):
        replays = protocol.members(settings, job, version=None if downstream else config["version"],
                                   downstream=downstream)  # fmt: skip
        if not downstream:
            return replays, {}
        plan = cascade.plan(settings, job, downstream=True, measure=True).as_dict()
    for m in plan["members"]:  # the change's reach, in the run's logs and the step's output metadata
        estimate = f"{m['estimate_s']:.0f} s" if m["estimate_s"] is not None else "no estimate"
        context.log.info(
            f"the set: {m['job']} v{m['live']} -> v{m['version']} ({m['why']}; reads {m['reads']}; "
            f"{m['records']:,} records, {estimate})"
        )
    return replays, plan


@op(
    config_schema=CATCH_UP_CONFIG,
    required_resource_keys={"kappa"},
    out=Out(dict, description="the verification report of the replay, from the audit trail"),
    tags={"kind": "spark"},
    description="Check, prepare, catch up with availableNow from the start point and verify: "
    "`kappa replay start --pipes` in a subprocess. Launched again after a kill, it resumes from its checkpoint.",
)
def catch_up(context: OpExecutionContext) -> Iterator[Any]:
    config = context.op_config
    kappa: KappaResource = context.resources.kappa
    settings = kappa.settings()  # a bad setting fails here, with its name, before a JVM starts
    replays, plan = _members(context, settings)
    # A cascade replays the plan's versions (`kappa replay plan`): the changed job's declared one, and below it.
    which = ["--downstream"] if config["downstream"] else ["--version", str(config["version"])]
    by = _operator(context, config["by"])
    args = ["replay", "start", config["job"], *which, "--from", config["from"], *(["--by", by] if by else [])]
    if config["max_offsets_per_trigger"]:
        args += ["--max-offsets-per-trigger", str(config["max_offsets_per_trigger"])]
    key = AssetKey(config["asset_key"])
    context.log.info("running " + " ".join(["kappa", *args, "--pipes"]))
    since = now_ms()  # the steps this run records: its outcome
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
                        if isinstance(message, dict) and message.get("kind") == protocol.PROGRESS_MESSAGE:
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
        # Dagster keeps what a step prints and its metadata in its run storage: no secret may reach them.
        secrets_ = known_secrets(settings)
        stdout_text = redact(stdout.read_text(errors="replace"), secrets_)
        error = redact(_tail(stderr), secrets_)
        sys.stdout.write(stdout_text)
        sys.stderr.write(redact(stderr.read_text(errors="replace"), secrets_))
    messages = session.get_custom_messages()  # after the session closed: its last messages are read by now
    for line in stdout_text.strip().splitlines():
        if not LOG_RECORD.match(line):  # what the CLI prints for its user; its log records are in stdout
            context.log.info(line)
    progress = [m for m in messages if isinstance(m, dict) and m.get("kind") == protocol.PROGRESS_MESSAGE]
    report = _report(settings, replays, since, config["downstream"], (process.returncode, error))
    metadata: dict[str, Any] = {"version": config["version"], "from": config["from"],
                                "progress_reports": len(progress), "verification_passed": report["passed"]}  # fmt: skip
    if config["downstream"]:
        metadata["set"] = MetadataValue.json([f"{m.get('job')} v{m.get('version')}" for m in report["set"]])
        metadata["plan"] = MetadataValue.json(plan)
    if progress:
        metadata |= _progress_metadata(progress[-1])
    yield Output(report | {"version": config["version"]}, metadata=metadata)


def _report(
    settings: KappaSettings, replays: list[Replay], since: int, downstream: bool, exited: tuple[int, str]
) -> dict[str, Any]:
    """The replay's verification report from what its steps recorded in the audit trail since `since`; a
    Failure when a step was refused, failed or was interrupted, or nothing was verified."""
    status, error = exited
    outcome = protocol.start_outcome(settings, replays, since)
    stopped = outcome.stopped  # a verification that ran and failed is a report, not a stop
    if stopped is not None and stopped.outcome == "interrupted":
        raise Failure(
            description="the replay was stopped by a signal: launch it again (a catch-up resumes from its checkpoint)"
        )
    if stopped is not None:
        raise Failure(
            description=f"kappa replay start: {stopped.job} v{stopped.version}: {stopped.error}",
            metadata={"step": str(stopped.step), "outcome": str(stopped.outcome), "stderr": MetadataValue.text(error)},
        )
    members = outcome.reports
    if not members or (status != 0 and outcome.passed):  # a crash the trail cannot tell
        raise Failure(
            description=f"kappa replay start exited {status} without a verification report",
            metadata={"stderr": MetadataValue.text(error)},
        )
    report = members[0] | {"set": members} if downstream else members[-1]
    return report | {"passed": outcome.passed}


# ------------------------------------------------------------------------------ go-live, cutover -------


BY_STEP = Field(str, default_value="")
STEP_CONFIG = {
    "job": Field(str),
    "asset_key": Field([str]),
    "version": Field(int),
    "by": BY_STEP,
    "downstream": Field(bool, default_value=False),
}


def _version(config: Mapping[str, Any]) -> int | None:
    """A set's versions are the plan's; one job's is the config's."""
    return None if config["downstream"] else int(config["version"])


@op(
    config_schema=STEP_CONFIG,
    required_resource_keys={"kappa"},
    ins={"verified": In(Nothing)},
    out=Out(Nothing),
    description="Run the version continuously from the checkpoint where catch-up stopped (detached and "
    "supervised; `kappa.lifecycle.protocol.golive`).",
)
def go_live(context: OpExecutionContext) -> None:
    config = context.op_config
    kappa: KappaResource = context.resources.kappa
    with _step(f"go-live of {config['job']}"):
        for went in protocol.golive(
            kappa.settings(),
            config["job"],
            version=_version(config),
            downstream=config["downstream"],
            by=_operator(context, config["by"]),
            env=kappa.overrides,  # the deployment's settings: this run's
        ):
            name = f"{went.replay.job.name} v{went.replay.version}"
            context.log.info(
                f"{name} runs already"
                if went.already_running
                else f"{name} runs continuously from its checkpoint (pid {went.pid}, log {went.log})"
            )


def _alias_materialization(settings: KappaSettings, key: AssetKey, dataset: str, step: str) -> AssetMaterialization:
    """The output asset after its alias moved: the version readers now follow, from which, by whom, when."""
    alias = AliasRegistry(settings).live(dataset)
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


def _log_moved(context: OpExecutionContext, moved: protocol.Moved) -> None:
    for alias in moved.aliases:
        context.log.info(
            f"{alias.dataset}: v{alias.previous_version} -> v{alias.version} ({alias.physical}) by {alias.changed_by}"
        )


@op(
    config_schema={**STEP_CONFIG, "dataset": Field(str)},
    required_resource_keys={"kappa"},
    ins={"live": In(Nothing)},
    out=Out(Nothing),
    description="Move the dataset's alias to the version, atomically (`kappa.lifecycle.protocol.cutover`; "
    "refused unless the version passed verification).",
)
def cutover(context: OpExecutionContext) -> None:
    config = context.op_config
    settings = context.resources.kappa.settings()
    with _step(f"cutover of {config['job']}"):
        moved = protocol.cutover(settings, config["job"], version=_version(config), downstream=config["downstream"],
                                 by=_operator(context, config["by"]))  # fmt: skip
    _log_moved(context, moved)
    context.log_event(_alias_materialization(settings, AssetKey(config["asset_key"]), config["dataset"], "cutover"))
    jobs = discover()
    for alias in moved.aliases:  # a set's: every member's asset, the version its readers now follow
        if alias.job != config["job"] and alias.job in jobs:
            context.log_event(_alias_materialization(settings, output_key(jobs[alias.job]), alias.dataset, "cutover"))


@op(
    config_schema={"job": Field(str), "asset_key": Field([str]), "dataset": Field(str), "by": BY_STEP},
    required_resource_keys={"kappa"},
    out=Out(Nothing),
    description="Move the dataset's alias back to the version live before (`kappa.lifecycle.protocol.rollback`).",
)
def rollback(context: OpExecutionContext) -> None:
    config = context.op_config
    settings = context.resources.kappa.settings()
    with _step(f"rollback of {config['job']}"):
        moved = protocol.rollback(settings, config["job"], by=_operator(context, config["by"]))
    _log_moved(context, moved)
    context.log_event(_alias_materialization(settings, AssetKey(config["asset_key"]), config["dataset"], "rollback"))


@op(
    config_schema=STEP_CONFIG,
    required_resource_keys={"kappa"},
    out=Out(Nothing),
    description="Stop a version that is not live and delete its output, checkpoint and consumer group "
    "(`kappa.lifecycle.protocol.retire`; refused for the live version).",
)
def retire(context: OpExecutionContext) -> None:
    config = context.op_config
    with _step(f"retire of {config['job']} v{config['version']}"):
        retired = protocol.retire(context.resources.kappa.settings(), config["job"], version=config["version"],
                                  by=_operator(context, config["by"]))  # fmt: skip
    deleted = ", ".join(retired.deleted)
    context.log.info(f"{config['job']} v{config['version']} retired: stopped {retired.stopped}, deleted {deleted}")


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
        # Light steps in this process; the catch-up in a `kappa` process it watches: no process per step.
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
        # Light steps in this process; the catch-up in a `kappa` process it watches: no process per step.
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
        # Light steps in this process; the catch-up in a `kappa` process it watches: no process per step.
        executor_def=in_process_executor,
        name=f"retire_{job.name}",
        description=f"Stop and delete an old version of {job.name} (never the live one). Config: version, by.",
        config=ConfigMapping(
            config_schema={"version": Field(int, description="the version to retire"), "by": BY},
            config_fn=lambda c: {"ops": {"retire": {"config": ident | {"version": c["version"], "by": c["by"]}}}},
        ),
        tags={"kappa/job": job.name, "kappa/step": "retire"},
    )


def replay_definitions(jobs: Mapping[str, JobSpec]) -> list[JobDefinition]:
    """`replay_<job>`, `rollback_<job>` and `retire_<job>` for every job (each writes a topic or a table)."""
    return [make(job) for job in jobs.values() for make in (replay_job, rollback_job, retire_job)]
