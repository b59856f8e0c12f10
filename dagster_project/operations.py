"""Operating the deployments from Dagster: stop and restart jobs per job, and a health sensor.

- `stop_<job>` / `restart_<job>` (op jobs, one pair per discovered job; config `version`, default the declared
  one): `kappa.lifecycle.deployments.stop` / `restart`. Each run logs an AssetObservation on the job's output asset.
- `deployment_health` (sensor, every 30 s, running by default) looks at every deployment recorded on this
  machine. A crashed one (should run, process gone) gets a `restart_<job>` run: one run per crash (its run key
  is the crashed process), tagged with why (`kappa/exit`), the full exit reason in its config and logs, so each
  restart is visible and auditable in the Runs page. The restart resumes from the version's checkpoint. A
  running one is observed: its consumer lag, rows and last batch, and from its metrics (kappa.runtime.metrics)
  the records it read, its records/s and p99 batch time since the previous tick, go on its output asset as an
  AssetObservation whenever they change (the asset's metadata in the UI, plotted over time on its overview page),
  with `lag_alert` set and a warning in the tick's log when the lag reaches KAPPA_DEPLOY_LAG_ALERT.

The sensor restarts through a run rather than in its own evaluation: a tick's work is not listed in the run
history, a run is (with its tags, logs, duration and outcome), and a restart that fails shows as a failed run.
"""

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
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
from kappa.ops.top import Sample, quantile, rate, sample_of
from kappa.runtime.declaration import JobSpec
from kappa.runtime.run_record import RunRecord

SENSOR_NAME = "deployment_health"
SENSOR_INTERVAL_S = 30
SAMPLES = "_metrics_samples"  # the cursor's key for the running deployments' last metrics samples
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


def throughput(run: RunRecord | None, previous: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(records read, records/s and the p99 batch time since the previous tick's sample, as metadata Dagster
    plots; this tick's sample, for the next) from the run's own metrics (kappa.runtime.metrics)."""
    if run is None or run.metrics_url is None:
        return {}, {}
    try:
        text = httpx.get(run.metrics_url, timeout=5).text
    except httpx.HTTPError:
        return {}, {}
    now = sample_of(text, run.job, run.version, at=time.time())
    if now is None:
        return {}, {}
    saved = {
        "url": run.metrics_url,
        "at": now.at,
        "records": now.records,
        "buckets": [[str(le), n] for le, n in now.buckets.items()],
    }
    metadata: dict[str, Any] = {"records_read": int(now.records)}
    if previous and previous.get("url") == run.metrics_url:  # the same process: its counters go on
        before = Sample(previous["at"], previous["records"], None, {float(le): n for le, n in previous["buckets"]},
                        None, 0, True)  # fmt: skip
        metadata["input_records_per_s"] = round(rate(before, now), 1)
        p99 = quantile(before, now)
        if p99 is not None and p99 != float("inf"):
            metadata["batch_p99_s"] = p99
    return metadata, saved


def _observe(
    settings: KappaSettings, state: DeploymentState, context: SensorEvaluationContext, previous: dict[str, Any] | None
) -> tuple[dict[str, Any], tuple[Any, ...], dict[str, Any]]:
    """(metadata of the observation, what must change for the next one to be emitted, this tick's metrics sample)."""
    d = state.deployment
    metadata = deployment_metadata(state)
    measured, sample = throughput(state.run, previous)
    metadata |= measured
    try:
        behind = lag(settings, d.job, d.version, timeout_s=5)
    except KappaError as exc:
        context.log.warning(f"{d.name}: lag unknown: {exc}")
        return metadata | {"lag_error": str(exc)}, (state.health.value, d.pid, "lag unknown"), sample
    metadata |= as_metadata(behind)
    alert = settings.deploy_lag_alert
    metadata["lag_alert"] = behind.total >= alert > 0
    if metadata["lag_alert"]:
        context.log.warning(
            f"{d.name}: {behind.total} records behind its inputs (alert at {alert}): {behind.per_topic}"
        )
    return metadata, (state.health.value, d.pid, behind.total, metadata["last_batch_id"]), sample


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
        samples: dict[str, Any] = seen.pop(SAMPLES, {})  # each running deployment's last metrics sample
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
                metadata, fingerprint, samples[d.name] = _observe(settings, state, context, samples.get(d.name))
            else:
                metadata, fingerprint = deployment_metadata(state), ("stopped", d.stopped_at)
            key = json.dumps(fingerprint, default=str)
            if seen.get(d.name) != key:
                events.append(AssetObservation(asset_key=output_key(spec), metadata=metadata))
                seen[d.name] = key
        cursor = json.dumps(seen | {SAMPLES: samples})
        if not requests and not events:
            return SensorResult(skip_reason="every deployment as before", cursor=cursor)
        return SensorResult(run_requests=requests, asset_events=events, cursor=cursor)

    return _health


def operations_definitions(jobs: Mapping[str, JobSpec]) -> tuple[list[JobDefinition], list[SensorDefinition]]:
    """(stop_<job> and restart_<job> for every job, [the deployment_health sensor])."""
    stops = [_stop_job(spec) for spec in jobs.values()]
    restarts = [_restart_job(spec) for spec in jobs.values()]
    return [*stops, *restarts], [health_sensor(jobs, restarts)]
