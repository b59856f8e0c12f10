"""The asset graph, generated from the job declarations and the topic catalog: nothing is wired by hand.

- One asset per job output: `["kafka", <topic>]` or `["delta", <table>]`, its `code_version` the job's logic
  version, its deps the job's inputs. Materializing it deploys that version: a catch-up run
  (`kappa jobs run <job> --available-now --pipes`), launched outside Dagster's process through Pipes, then the
  version runs on continuously from where catch-up stopped (`kappa.lifecycle.deployments.start`, detached, supervised by
  the `deployment_health` sensor; see operations.py). A version already running is not caught up again (two
  runs on one checkpoint would corrupt it): the materialization reports the running deployment instead.
- One external asset (an AssetSpec, never materialized by Dagster) per source topic: read by a job or declared
  in the catalog, written by no job (`clicks`, `user_profiles`).
- Side topics (`<topic>.dlq`, `<topic>.late`) are not assets: no declaration says which job writes them (a
  job declares one output), so they would appear as disconnected sources with made-up lineage. Their counts
  are written by the job's one query beside its output, and `kappa dlq inspect` counts and shows them.
"""

import sys
from collections.abc import Iterable, Mapping
from typing import Any

from dagster import (
    AssetExecutionContext,
    AssetKey,
    AssetsDefinition,
    AssetSpec,
    Config,
    Failure,
    MaterializeResult,
    MetadataValue,
    PipesSubprocessClient,
    asset,
)

from dagster_project.resources import KappaResource
from kappa.contracts.dead_letter_format import dlq_topic, late_topic
from kappa.contracts.registry import registry_of, value_subject
from kappa.contracts.topic_declarations import FOREVER, Cleanup, Topic
from kappa.core.errors import KappaError
from kappa.kafka.aliases import CONTROL_TOPICS
from kappa.lifecycle import deployments
from kappa.lifecycle.lag import as_metadata, lag
from kappa.lifecycle.launchers import is_running
from kappa.lifecycle.state_files import DeploymentState, Health, load
from kappa.runtime.declaration import JobSpec
from kappa.runtime.outputs import TopicOutput, output_of
from kappa.runtime.pipes import BATCH_MESSAGE

CONTROL_NAMES = {t.name for t in CONTROL_TOPICS}
JOBS_GROUP = "jobs"  # outputs of the streaming jobs
SOURCES_GROUP = "sources"  # topics written outside the platform
DAY_MS = 24 * 60 * 60 * 1000


def topic_key(name: str) -> AssetKey:
    return AssetKey([TopicOutput.storage, name])


def output_key(job: JobSpec) -> AssetKey:
    return AssetKey(list(output_of(job.output).asset_path))


def is_side_topic(name: str) -> bool:
    """A dead-letter or late-events topic: written beside a job's output, never declared as one."""
    return name.endswith((dlq_topic(""), late_topic("")))


def _duration(ms: int) -> str:
    if ms == FOREVER:
        return "forever"
    return f"{ms / DAY_MS:g} days" if ms % DAY_MS == 0 else f"{ms} ms"


def replay_window(topic: Topic) -> str:
    """How far back a replay of this topic sees every record: once the cleaner has run, a compacted topic keeps
    only the latest value per key, so only versions younger than min.compaction.lag.ms are all there
    (docs/architecture.md, "Topics and keys"; kappa.lifecycle.horizon measures it on the cluster)."""
    if topic.cleanup is Cleanup.DELETE:
        return f"every record for {_duration(topic.retention_ms)}"
    if topic.min_compaction_lag_ms:
        return (
            f"every version for {_duration(topic.min_compaction_lag_ms)} (min.compaction.lag.ms), "
            "then the latest per key"
            + ("" if topic.retention_ms == FOREVER else f"; nothing older than {_duration(topic.retention_ms)}")
        )
    latest = "the latest value per key"
    return latest + ("" if topic.retention_ms == FOREVER else f", for {_duration(topic.retention_ms)}")


def topic_metadata(topic: Topic) -> dict[str, Any]:
    """Static metadata of a topic asset, from its declaration."""
    metadata: dict[str, Any] = {
        "topic": topic.name,
        "partitions": topic.partitions,
        "cleanup_policy": topic.cleanup.value,
        "retention_ms": topic.retention_ms,
        "min_compaction_lag_ms": topic.min_compaction_lag_ms,
        "replay_window": replay_window(topic),
        "compatibility": topic.compatibility.value,
    }
    if topic.value_schema:
        metadata["value_schema"] = MetadataValue.path(f"schemas/{topic.value_schema}")
        metadata["value_subject"] = value_subject(topic.name)
    if topic.key_schema:
        metadata["key_schema"] = MetadataValue.path(f"schemas/{topic.key_schema}")
    return metadata


def kappa_command(*args: str) -> list[str]:
    """The `kappa` CLI in a process of its own, on this interpreter (the code location's environment): a Spark run
    never runs in Dagster's process."""
    return [sys.executable, "-m", "kappa.cli", *args]


def catch_up_args(job: JobSpec) -> list[str]:
    """The `kappa` arguments of the catch-up run that deploys the declared version: drain the inputs, stop,
    report through Pipes."""
    return ["jobs", "run", job.name, "--version", str(job.version), "--available-now", "--pipes"]


def job_command(job: JobSpec) -> list[str]:
    """The catch-up run's command (`catch_up_args`)."""
    return kappa_command(*catch_up_args(job))


def output_spec(job: JobSpec, topics_by_name: Mapping[str, Topic]) -> AssetSpec:
    """The job's output as an asset: lineage, code version and static metadata from the declaration."""
    output = output_of(job.output)
    metadata: dict[str, Any] = {"job": job.name, "job_version": job.version} | output.metadata(job.version)
    if output.topic is not None:  # what a topic's readers rely on: partitions, retention, schemas
        metadata |= topic_metadata(topics_by_name.get(output.topic.name, output.topic))
    metadata |= {
        "freshness": job.freshness,
        "max_batch_records": job.max_batch_records,
        "settings": MetadataValue.json(dict(job.settings)),
        "catch_up_command": " ".join(["kappa", *catch_up_args(job)]),
    }
    if job.real_time:  # live in Spark's real-time mode: batches of this length, records in milliseconds
        metadata["real_time_batch"] = job.real_time
    return AssetSpec(
        key=output_key(job),
        deps=[topic_key(t.name) for t in (*job.inputs, *job.lookups)],
        description=f"{job.description}\n\n{output.doc}".strip(),
        code_version=str(job.version),
        group_name=JOBS_GROUP,
        metadata=metadata,
        kinds={output.storage, "spark"},
    )


def _registered_schema(kappa: KappaResource, topic: Topic) -> dict[str, Any]:
    """The registry's latest id and version of the output's value schema (what consumers decode with)."""
    if not topic.value_schema:
        return {}
    with registry_of(kappa.settings()) as registry:
        versions = registry.versions(value_subject(topic.name))
    if not versions:
        return {}
    return {"value_schema_id": versions[-1].schema_id, "value_schema_version": versions[-1].version}


class DeployConfig(Config):
    continuous: bool = True  # after the catch-up, keep the version running (False: catch up only)


def job_asset(job: JobSpec, topics_by_name: Mapping[str, Topic]) -> AssetsDefinition:
    """The job's output asset; materializing it runs the declared version's catch-up outside this process."""
    spec = output_spec(job, topics_by_name)

    @asset(
        key=spec.key,
        deps=spec.deps,
        description=spec.description,
        code_version=spec.code_version,
        group_name=spec.group_name,
        metadata=spec.metadata,
        kinds=spec.kinds,
    )
    def _deploy(
        context: AssetExecutionContext,
        config: DeployConfig,
        kappa: KappaResource,
        pipes_subprocess_client: PipesSubprocessClient,
    ) -> MaterializeResult[None]:
        settings = kappa.settings()  # a bad setting fails here, with its name, before a JVM starts
        running = load(settings, job.name, job.version)
        if running is not None and is_running(running):
            context.log.info(f"{job.name} v{job.version} already runs (pid {running.pid}): no catch-up")
            state = deployments.state_of(running)
            return MaterializeResult(metadata={"version": job.version, **_deployment_metadata(settings, state)})
        completed = pipes_subprocess_client.run(command=job_command(job), context=context, env=kappa.subprocess_env())
        reported = completed.get_materialize_result(implicit_materialization=False)
        metadata: dict[str, Any] = dict(reported.metadata or {})
        ran = getattr(metadata.get("version"), "value", None)
        if ran != job.version:  # the declaration changed between loading the definitions and the run
            raise Failure(f"{job.name}: the run reported version {ran}, the asset's code version is {job.version}")
        batches = [m for m in completed.get_custom_messages() if isinstance(m, dict) and m.get("kind") == BATCH_MESSAGE]
        metadata["batches_reported"] = len(batches)  # per-batch messages that came through Pipes
        output = output_of(job.output)
        if output.topic is not None:  # the schema its readers decode with
            metadata |= _registered_schema(kappa, topics_by_name.get(output.topic.name, output.topic))
        else:
            metadata["path"] = MetadataValue.path(output.location(settings, job.version))
        if config.continuous:  # go live: from the checkpoint where the catch-up stopped
            started = deployments.start(settings, job.name, job.version, env=kappa.overrides)
            state = deployments.state_of(started)
            if state.health is not Health.RUNNING:
                raise Failure(f"{job.name} v{job.version} exited at once: {state.exit_reason}")
            context.log.info(f"{job.name} v{job.version} runs continuously: pid {state.pid}, log {started.log_file}")
            metadata |= {"deployment": "started", "deployment_pid": state.pid, "deployment_log": started.log_file}
        return MaterializeResult(metadata=metadata)

    return _deploy


def _deployment_metadata(settings: Any, state: DeploymentState) -> dict[str, Any]:
    d = state.deployment
    metadata: dict[str, Any] = {
        "deployment": state.health.value,
        "deployment_pid": state.pid,  # the process that runs the job
        "deployment_started_at": d.started_at,
        "deployment_log": d.log_file,
    }
    try:
        metadata |= as_metadata(lag(settings, d.job, d.version))
    except KappaError as exc:
        metadata["lag_error"] = str(exc)
    return metadata


def build_assets(
    jobs: Mapping[str, JobSpec], topics: Iterable[Topic]
) -> tuple[list[AssetsDefinition], list[AssetSpec]]:
    """(job output assets, external source topic assets). Refuses a graph the declarations make ambiguous."""
    catalog = list(topics)
    topics_by_name = {t.name: t for t in catalog}
    writers: dict[AssetKey, str] = {}
    for job in jobs.values():
        key = output_key(job)
        if key in writers:
            raise ValueError(f"jobs {writers[key]} and {job.name} both declare the output {key.to_user_string()}")
        writers[key] = job.name
    read = {t.name: t for job in jobs.values() for t in (*job.inputs, *job.lookups)}
    sources: dict[str, Topic] = {}
    for topic in [*catalog, *read.values()]:
        if topic_key(topic.name) in writers or is_side_topic(topic.name) or topic.name in sources:
            continue
        if topic.name in CONTROL_NAMES:  # the alias registry and the audit trail: the platform's, not data
            continue
        sources[topic.name] = topics_by_name.get(topic.name, topic)
    external = [
        AssetSpec(
            key=topic_key(t.name),
            description=t.doc or None,
            group_name=SOURCES_GROUP,
            metadata=topic_metadata(t),
            kinds={"kafka"},
        )
        for t in sources.values()
    ]
    return [job_asset(job, topics_by_name) for job in jobs.values()], external
