"""Operating the deployments from Dagster: stop and restart jobs per job, and a health sensor.

- `stop_<job>` / `restart_<job>` (op jobs, one pair per discovered job; config `version`, default the declared
  one): `kappa.lifecycle.deployments.stop` / `restart`. Each run logs an AssetObservation on the job's output asset.
- `deployment_health` (sensor, every 30 s, running by default) looks at every deployment recorded on this
  machine. A crashed one (should run, process gone) gets a `restart_<job>` run: one run per crash (its run key
  is the crashed process), tagged with why (`kappa/exit`), the full exit reason in its config and logs, so each
  restart is visible and auditable in the Runs page. The restart resumes from the version's checkpoint. A
  running one is observed: its consumer lag, rows and last batch go on its output asset as an
  AssetObservation whenever they change (the asset's metadata in the UI), with `lag_alert` set and a
  warning in the tick's log when the lag reaches KAPPA_DEPLOY_LAG_ALERT.

The sensor restarts through a run rather than in its own evaluation: a tick's work is not listed in the run
history, a run is (with its tags, logs, duration and outcome), and a restart that fails shows as a failed run.
"""

import json
from collections.abc import Mapping, Sequence
from typing import Any

from dagster import (
    AssetObservation,
    Config,
    DefaultSensorStatus,
    JobDefinition,
    OpExecutionContext,
    RunRequest,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    job,
    op,
    sensor,
)

from dagster_project.assets import output_key
from dagster_project.resources import KappaResource
from kappa.core.errors import KappaError
from kappa.core.settings import KappaSettings
from kappa.lifecycle import deployments
from kappa.lifecycle.lag import as_metadata, lag
from kappa.lifecycle.launchers import is_running
from kappa.lifecycle.state_files import DeploymentState, Health, load
from kappa.runtime.declaration import JobSpec

SENSOR_NAME = "deployment_health"
SENSOR_INTERVAL_S = 30
REASON_TAG = "kappa/exit"  # why the restarted process ended (short); the whole reason is in the run's config


class DeploymentConfig(Config):
    version: int | None = None  # default: the job's declared version
    reason: str | None = None  # recorded as the deployment's last exit reason (the sensor gives the crash's)
    crashed_pid: int | None = None  # the sensor's: restart only if that process is still the deployment's


def stop_job_name(job: str) -> str:
    return f"stop_{job}"


def restart_job_name(job: str) -> str:
    return f"restart_{job}"


def deployment_metadata(state: DeploymentState) -> dict[str, Any]:
    d = state.deployment
    metadata: dict[str, Any] = {
        "job": d.job,
        "version": d.version,
        "health": state.health.value,
        "pid": state.pid,  # the process that runs the job (the one to signal); None unless running
        "started_at": d.started_at,
        "restarts": d.restarts,
        "launcher": d.launcher,
        "log": d.log_file,
    }
    if d.last_exit_reason:
        metadata["last_exit_reason"] = d.last_exit_reason
    if state.exit_reason:
        metadata["exit_reason"] = state.exit_reason
    if state.run is not None:  # what the job last recorded about its run
        metadata["run_state"] = state.run.state.value
        metadata["query_ids"] = {name: ids["id"] for name, ids in state.run.queries.items()}
        if state.run.last_error:
            metadata["last_error"] = state.run.last_error
    return metadata


def _stop_job(spec: JobSpec) -> JobDefinition:
    @op(name=f"stop_{spec.name}_deployment", description=f"Stop the {spec.name} deployment (SIGTERM, then SIGKILL)")
    def _stop(context: OpExecutionContext, config: DeploymentConfig, kappa: KappaResource) -> None:
        settings = kappa.settings()
        version = config.version or spec.version
        stopped = deployments.stop(settings, spec.name, version)
        context.log.info(f"{spec.name} v{version} stopped (pid {stopped.pid})")
        state = deployments.state_of(stopped)
        context.log_event(AssetObservation(asset_key=output_key(spec), metadata=deployment_metadata(state)))

    @job(name=stop_job_name(spec.name), description=f"Stop a running deployment of {spec.name}.")
    def _job() -> None:
        _stop()

    return _job


def _restart_job(spec: JobSpec) -> JobDefinition:
    @op(
        name=f"restart_{spec.name}_deployment",
        description=f"Restart the {spec.name} deployment; it resumes from its checkpoint",
    )
    def _restart(context: OpExecutionContext, config: DeploymentConfig, kappa: KappaResource) -> None:
        settings = kappa.settings()
        version = config.version or spec.version
        if config.reason:
            context.log.warning(f"restarting {spec.name} v{version}: {config.reason}")
        current = load(settings, spec.name, version)
        if (
            current is not None and config.crashed_pid and current.pid != config.crashed_pid and is_running(current)
        ):  # restarted by someone else since the sensor asked
            context.log.info(f"{spec.name} v{version} already runs again (pid {current.pid}): nothing to do")
            return
        if current is None:  # never started here: start it with the resource's settings
            started = deployments.start(
                settings, spec.name, version, env=kappa.overrides, last_exit_reason=config.reason
            )
        else:
            started = deployments.restart(settings, spec.name, version, reason=config.reason)
        state = deployments.state_of(started)
        if state.health is not Health.RUNNING:
            raise KappaError(f"{spec.name} v{version} exited at once: {state.exit_reason}")
        context.log.info(f"{spec.name} v{version} running again: pid {started.pid}, restart {started.restarts}")
        context.log_event(AssetObservation(asset_key=output_key(spec), metadata=deployment_metadata(state)))

    @job(name=restart_job_name(spec.name), description=f"Restart (or start) a deployment of {spec.name}.")
    def _job() -> None:
        _restart()

    return _job


def restart_request(state: DeploymentState) -> RunRequest:
    """The run that restarts a crashed deployment: one per crash (the run key names the dead process)."""
    d = state.deployment
    reason = state.exit_reason or "crashed"
    return RunRequest(
        run_key=f"{d.name}:{d.pid}:{d.started_at}",
        job_name=restart_job_name(d.job),
        run_config={
            "ops": {
                f"restart_{d.job}_deployment": {
                    "config": {"version": d.version, "reason": f"crashed: {reason}", "crashed_pid": d.pid}
                }
            }
        },
        tags={
            "kappa/job": d.job,
            "kappa/version": str(d.version),
            REASON_TAG: reason.split(";", 1)[0][:200],
            "kappa/restarts": str(d.restarts + 1),
        },
    )


def _observe(
    settings: KappaSettings, state: DeploymentState, context: SensorEvaluationContext
) -> tuple[dict[str, Any], tuple[Any, ...]]:
    """(metadata of the observation, what must change for the next one to be emitted)."""
    d = state.deployment
    metadata = deployment_metadata(state)
    try:
        behind = lag(settings, d.job, d.version, timeout_s=5)
    except KappaError as exc:
        context.log.warning(f"{d.name}: lag unknown: {exc}")
        return metadata | {"lag_error": str(exc)}, (state.health.value, d.pid, "lag unknown")
    metadata |= as_metadata(behind)
    alert = settings.deploy_lag_alert
    metadata["lag_alert"] = behind.total >= alert > 0
    if metadata["lag_alert"]:
        context.log.warning(
            f"{d.name}: {behind.total} records behind its inputs (alert at {alert}): {behind.per_topic}"
        )
    return metadata, (state.health.value, d.pid, behind.total, metadata["last_batch_id"])


def health_sensor(jobs: Mapping[str, JobSpec], restart_jobs: Sequence[JobDefinition]) -> SensorDefinition:
    @sensor(
        name=SENSOR_NAME,
        jobs=list(restart_jobs),
        minimum_interval_seconds=SENSOR_INTERVAL_S,
        default_status=DefaultSensorStatus.RUNNING,
        description="Restarts crashed deployments from their checkpoints (a run per restart, tagged with why); "
        "observes each running one's consumer lag, rows and last batch on its output asset.",
    )
    def _health(context: SensorEvaluationContext, kappa: KappaResource) -> SensorResult:
        settings = kappa.settings()
        seen: dict[str, Any] = json.loads(context.cursor) if context.cursor else {}
        requests: list[RunRequest] = []
        events: list[AssetObservation] = []
        for state in deployments.status(settings):
            d = state.deployment
            spec = jobs.get(d.job)
            if spec is None:
                continue  # a deployment of a job this code location does not know
            if state.health is Health.CRASHED:
                context.log.warning(f"{d.name} crashed: {state.exit_reason}; requesting a restart")
                requests.append(restart_request(state))
                metadata, fingerprint = deployment_metadata(state), ("crashed", d.pid)
            elif state.health is Health.RUNNING:
                metadata, fingerprint = _observe(settings, state, context)
            else:
                metadata, fingerprint = deployment_metadata(state), ("stopped", d.stopped_at)
            key = json.dumps(fingerprint, default=str)
            if seen.get(d.name) != key:
                events.append(AssetObservation(asset_key=output_key(spec), metadata=metadata))
                seen[d.name] = key
        if not requests and not events:
            return SensorResult(skip_reason="every deployment as before", cursor=json.dumps(seen))
        return SensorResult(run_requests=requests, asset_events=events, cursor=json.dumps(seen))

    return _health


def operations_definitions(jobs: Mapping[str, JobSpec]) -> tuple[list[JobDefinition], list[SensorDefinition]]:
    """(stop_<job> and restart_<job> for every job, [the deployment_health sensor])."""
    stops = [_stop_job(spec) for spec in jobs.values()]
    restarts = [_restart_job(spec) for spec in jobs.values()]
    return [*stops, *restarts], [health_sensor(jobs, restarts)]
