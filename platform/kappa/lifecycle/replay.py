"""The replay protocol of docs/architecture.md ("Versions, replay and cutover"), one function per step.

    check      the version is the declared one and not live yet, its output schema is compatible with the
               dataset's, and every input's replay horizon covers the start point (kappa.lifecycle.horizon)
    prepare    the version's own output topic (`<dataset>.v<N>`) or table, checkpoint and consumer group
    catch_up   the version with availableNow from the start point (kappa.lifecycle.catch_up)
    verify     the quality suite and a reconciliation against the live version (kappa.lifecycle.verification)
    go_live    the version runs continuously from the checkpoint where catch-up stopped (kappa.lifecycle.deployments)
    cutover    the alias moves atomically (kappa.lifecycle.moves); refused unless the version passed verify
    rollback   the alias moves back to the version live before
    retire     an old version is stopped and its output, checkpoint and group deleted (never the live one)

These functions do each step's work and refuse what must not run; they record nothing. The protocol itself,
each step with its preconditions and its record in the audit trail `kappa.audit` (who, when, from, to and what
it found), one version or a cascade's set, is kappa.lifecycle.protocol: call that, not these, to replay.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kappa.contracts import compatibility
from kappa.contracts.registry import registry_of
from kappa.contracts.schema_rollout import apply_schemas
from kappa.core.security import registry_login
from kappa.core.settings import KappaSettings
from kappa.kafka.clients import require_kafka
from kappa.kafka.topic_admin import apply
from kappa.lifecycle.horizon import iso, replay_horizon
from kappa.lifecycle.model import Replay, ReplayRefusedError
from kappa.runtime import start_point
from kappa.runtime.access import grant_version
from kappa.runtime.binding import (
    REPLAY,
    VersionBinding,
    deployment_topics,
    describe_inputs,
    next_version,
    physical_output,
    record_binding,
)
from kappa.runtime.declaration import JobSpec, Starting, version_checkpoints
from kappa.runtime.outputs import output_of


def check(settings: KappaSettings, replay: Replay, starting: Starting) -> dict[str, Any]:
    """Refuse (ReplayRefusedError) a replay that must not run; return what was checked."""
    job, version, live = replay.job, replay.version, replay.live
    if replay.code_version is None:
        raise ReplayRefusedError(
            f"{job.name} v{version} is not declared: jobs/{job.name}/declaration.py declares v{job.version}. "
            "A logic change bumps `version` there, and the replay deploys the declared version."
        )
    if replay.code_version != job.version:
        raise ReplayRefusedError(
            f"{job.name} v{version} exists already and runs the code of v{replay.code_version} (made by a cascade "
            f"replay): declare v{next_version(settings, job)} in jobs/{job.name}/declaration.py for the new logic"
        )
    if live is not None and live.version == version:
        raise ReplayRefusedError(f"{job.name} v{version} is already live for {replay.dataset}: nothing to replay")
    if live is not None and live.version > version:
        raise ReplayRefusedError(
            f"{replay.dataset} is live at v{live.version}, newer than v{version}: "
            f"go back with `kappa replay rollback {job.name}`, not a replay"
        )
    try:  # a relaunch resumes from the checkpoint, so it must ask for the start point the checkpoint began with
        start_point.refuse_another(version_checkpoints(settings, job.name, version), job.name, version, starting)
    except start_point.StartPointError as exc:
        raise ReplayRefusedError(str(exc)) from None
    found: dict[str, Any] = {"start": starting.offsets, "start_ms": starting.timestamp_ms}
    found["schema"] = _check_schema(settings, replay.bound)
    horizons = {}
    for topic in replay.bound.inputs:
        horizon = replay_horizon(settings, topic)
        horizons[topic.name] = horizon.since_ms
        if horizon.since_ms is None:
            continue
        if starting.offsets == "earliest":
            raise ReplayRefusedError(
                f"{job.name}: the replay would start at the earliest record of {topic.name}, but that topic is "
                f"complete only since {iso(horizon.since_ms)} ({horizon.why}). Replaying from there would "
                f"compute on partial data. Start at --from {iso(horizon.since_ms)} or later."
            )
        if starting.offsets == "timestamp" and (starting.timestamp_ms or 0) < horizon.since_ms:
            raise ReplayRefusedError(
                f"{job.name}: --from {iso(starting.timestamp_ms or 0)} is older than the replay horizon of "
                f"{topic.name}, {iso(horizon.since_ms)} ({horizon.why}). Start at --from "
                f"{iso(horizon.since_ms)} or later."
            )
    found["horizons"] = {t: (iso(h) if h is not None else "complete") for t, h in horizons.items()}
    return found


def _check_schema(settings: KappaSettings, bound: JobSpec) -> str:
    """The output's value schema must be compatible with what the dataset's readers decode (its subject)."""
    declared = output_of(bound.output)
    output = declared.topic
    if output is None:
        return f"a {declared.kind}: each version has its own table"
    if not output.value_schema:
        return f"{output.name}: no value schema declared"
    # Lazy: imports pyspark, only where a Spark session runs (this module is imported without one).
    from kappa.spark.topic_io import value_schema

    schema = value_schema(settings, output)
    with registry_of(settings) as registry:
        registered = registry.versions(output.value_subject)
        if not registered:
            return f"{output.value_subject}: first schema"
        if registry.lookup(output.value_subject, schema) is not None:
            return f"{output.value_subject}: already registered"
        compatible = registry.test_compatibility(output.value_subject, schema)
    if not compatible:
        # The registry's verdict, with the field and the rule it breaks (the offline check's reasons).
        reasons = [str(r) for r in compatibility.check(schema, [r.schema for r in registered], output.compatibility)]
        raise ReplayRefusedError(
            f"schemas/{output.value_schema} is not compatible with {output.value_subject} "
            f"({output.compatibility.value}): {'; '.join(reasons) or 'the registry says no'}. Readers of "
            f"{bound.output.name} follow the alias across versions, so a breaking change needs a new dataset."
        )
    return f"{output.value_subject}: compatible, registered at prepare"


# ------------------------------------------------------------------ 2. prepare --------------------------


def prepare(settings: KappaSettings, replay: Replay) -> dict[str, Any]:
    """The version's topics exist and its output schema is registered; checkpoint and group are its own."""

    bound = replay.bound
    binding = VersionBinding.of(bound, replay.job.version, REPLAY)
    recorded = record_binding(settings, replay.job.name, replay.version, binding)  # what the version is, for good
    if recorded != binding:
        raise ReplayRefusedError(
            f"{replay.job.name} v{replay.version} was prepared reading {describe_inputs(recorded.inputs)}, not "
            f"{describe_inputs(binding.inputs)}: a version reads what it was made on. Replay the new inputs as a new "
            f"version, or retire v{replay.version} first"
        )
    created = [
        c.topic for c in apply(require_kafka(settings), deployment_topics(bound, replay.version)) if c.kind == "created"
    ]
    if settings.secured:  # the version's own principal, allowed what its declaration reads and writes
        grant_version(settings, bound, replay.version)
    topic = output_of(bound.output).topic
    if topic is not None and topic.value_schema:
        apply_schemas(settings.schemas_path, [topic], settings.registry, registry_login(settings))
    ctx = replay.context(settings)
    return {
        "output": physical_output(replay.job, settings, replay.version)[1],
        "created_topics": created,
        "checkpoint": ctx.checkpoint(),
        "consumer_group": ctx.consumer_group,
        "resuming": Path(ctx.checkpoint(), "commits").is_dir(),
    }


def as_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)
