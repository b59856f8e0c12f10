"""A deployment on the real stack: `raw_clicks` runs detached and supervised, its lag falls to 0, a SIGKILL of its
driver is noticed by Dagster's health sensor, whose restart run resumes it from its checkpoint (every click in
the table once: none lost, none repeated), and `stop` ends it.

The test runs on its own copy of the pipeline (its `clicks` topic is written by no other test), loaded as the
code location Dagster and the deployments run (`Deployment.imported`).
"""

import importlib
import os
import random
import signal
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from dagster import DagsterInstance, RunRequest, SensorResult, build_sensor_context
from deltalake import DeltaTable

from dagster_project.assets import output_key
from dagster_project.definitions import build_definitions
from dagster_project.operations import REASON_TAG, SENSOR_NAME
from dagster_project.resources import KappaResource
from kappa.contracts.topic_declarations import Topic
from kappa.core.errors import KappaError
from kappa.core.settings import KappaSettings
from kappa.lifecycle import deployments
from kappa.lifecycle.exits import STARTED_LINE, exit_status
from kappa.lifecycle.lag import lag
from kappa.lifecycle.launchers import driver_pids
from kappa.lifecycle.state_files import Health
from kappa.lifecycle.wrapper import is_ours
from kappa.runtime import JobSpec
from kappa.runtime.run_record import RunState
from kappa.stack import process
from tests.integration.replay_pipeline import Deployment, deploy_copy, produce_clicks
from tests.waiting import wait_until


def _wait(what: str, check: Callable[[], bool], timeout_s: float, log: Path) -> None:
    wait_until(check, timeout_s, what, log=log, interval_s=1)


@pytest.fixture
def pipeline(stack: KappaSettings, tmp_path: Path, unique_name: Callable[[str], str]) -> Iterator[Deployment]:
    """This test's copy of the pipeline, as the code location of this process and of what it starts."""
    # A driver process per job: this test kills one (test_job_host.py kills the shared host).
    env = {"KAPPA_DEPLOY_STOP_TIMEOUT_S": "90", "KAPPA_DEPLOY_LAUNCHER": "subprocess"}
    d = deploy_copy(stack, tmp_path / "pipeline", unique_name("dp") + "_", env=env)
    with d.imported():
        yield d


@pytest.fixture
def kappa(pipeline: Deployment) -> Iterator[KappaResource]:
    """The resource Dagster and this test share: the session's stack, the copy's Delta, checkpoints and
    deployments folders. Whatever deployment is still running at the end is killed with its process group."""
    resource = KappaResource(overrides={k: v for k, v in pipeline.env.items() if k.startswith("KAPPA_")})
    groups: set[int] = set()
    yield resource
    settings = resource.settings()
    for state in deployments.status(settings):
        groups.add(state.deployment.pid)
        deployments.stop_if_running(settings, state.deployment.job, state.deployment.version, timeout_s=30)
    for pgid in groups:  # belt and braces: no process of this test outlives it
        if process.group_members(pgid):
            os.killpg(pgid, signal.SIGKILL)


@pytest.mark.slow
def test_deployment_crash_is_restarted_by_the_sensor_from_its_checkpoint(
    stack: KappaSettings, kappa: KappaResource, pipeline: Deployment
) -> None:
    source: Topic = importlib.import_module("jobs.catalog").CLICKS  # the copy's, as the deployed job reads it
    job: JobSpec = importlib.import_module("jobs.raw_clicks.declaration").JOB
    settings = kappa.settings()
    table = f"{settings.delta_root}/{job.output.name}/v{job.version}"
    seed = random.SystemRandom().randrange(10_000, 1_000_000)
    mine = produce_clicks(stack, source, 800, seed)

    deployment = deployments.start(settings, job.name, job.version, env=kappa.overrides)
    log = deployment.log_path
    assert deployments.state_of(deployment).health is Health.RUNNING
    with pytest.raises(KappaError, match="already running"):
        deployments.start(settings, job.name, job.version, env=kappa.overrides)

    def caught_up() -> bool:
        try:
            behind = lag(settings, job.name, job.version, timeout_s=5)
        except KappaError:  # a fresh broker's group coordinator (__consumer_offsets) may not answer yet
            return False
        return behind.total == 0 and behind.last_batch is not None

    # The job reads the copy's `clicks` from the earliest offset: its lag is every record there, then 0.
    _wait("lag 0 after the first batches", caught_up, 240, log)
    behind = lag(settings, job.name, job.version)
    assert set(behind.per_topic) == {source.name}
    assert behind.rows >= len(mine)  # the output query's input rows, as the run recorded them
    run = deployments.state_of(deployment).run  # what the job writes about itself
    assert run is not None
    assert run.state is RunState.RUNNING
    assert set(run.queries) == {"raw_clicks_v1"}
    assert run.pid in driver_pids(deployment)
    assert run.last_batch == behind.last_batch

    # A crash: the job's driver, the pid `kappa jobs status` shows, dies with SIGKILL, mid-stream, while more
    # clicks arrive.
    [driver] = driver_pids(deployment)
    [row] = [line.split() for line in pipeline.kappa("jobs", "status").stdout.splitlines() if line.startswith(job.name)]
    assert (row[2], row[3]) == ("running", str(driver))  # the job's own process, not its wrapper
    more = produce_clicks(stack, source, 400, seed, first=800)
    os.kill(driver, signal.SIGKILL)
    gone = lambda: not is_ours(deployment.pid, job.name, job.version)  # noqa: E731
    _wait("the wrapper notices the crash", gone, 30, log)
    [crashed] = deployments.status(settings)
    assert crashed.health is Health.CRASHED
    assert crashed.exit_reason is not None
    assert crashed.exit_reason.startswith("killed by SIGKILL (exit status 137)")
    listed = pipeline.kappa("jobs", "status", check=False)  # what an operator's script sees: not success
    assert listed.returncode == 1, listed.stdout + listed.stderr
    assert job.name in listed.stdout
    assert "crashed" in listed.stdout
    _wait("the crashed run's JVM exits with its driver", lambda: not process.group_members(deployment.pid), 60, log)
    # Written while nothing runs: the restart must read them.
    later = produce_clicks(stack, source, 300, seed, first=1200)

    # Dagster's health sensor: one restart run for the crash, tagged with why; lag observed on the asset.
    defs = build_definitions(kappa=kappa)
    instance = DagsterInstance.ephemeral()
    sensor = defs.get_sensor_def(SENSOR_NAME)
    result = sensor(build_sensor_context(instance=instance, resources={"kappa": kappa}, definitions=defs))
    assert isinstance(result, SensorResult)
    [request] = result.run_requests or []
    assert isinstance(request, RunRequest)
    assert request.job_name == f"restart_{job.name}"
    assert request.tags[REASON_TAG] == "killed by SIGKILL (exit status 137)"
    [observation] = result.asset_events or []
    assert observation.asset_key == output_key(job)
    assert observation.metadata["health"].value == "crashed"
    job_def = defs.get_job_def(request.job_name)
    run = job_def.execute_in_process(run_config=request.run_config, tags=request.tags, instance=instance)
    assert run.success
    [recorded] = instance.get_runs()
    assert recorded.tags[REASON_TAG] == "killed by SIGKILL (exit status 137)"
    restart_events = [e for e in run.all_events if e.event_type_value == "ASSET_OBSERVATION"]
    assert len(restart_events) == 1  # the restart run observes the output asset: health running, restarts 1

    [restarted] = deployments.status(settings)
    assert restarted.health is Health.RUNNING
    assert restarted.deployment.restarts == 1
    assert restarted.deployment.pid != deployment.pid
    assert (restarted.deployment.last_exit_reason or "").startswith("crashed: killed by SIGKILL (exit status 137)")
    assert restarted.deployment.env == deployment.env  # the same settings as the first start
    assert kappa.overrides.items() <= deployment.env.items()

    # Resumed from the checkpoint: every click of this test in the table exactly once, nothing else repeated.
    def all_in() -> bool:
        if not Path(table).is_dir():
            return False
        ids = DeltaTable(table).to_pyarrow_table(columns=["event_id"]).column("event_id").to_pylist()
        return mine | more | later <= set(ids) and caught_up()

    _wait("the restarted run reads what arrived meanwhile", all_in, 240, log)
    rows = DeltaTable(table).to_pyarrow_table(columns=["event_id", "kafka_partition", "kafka_offset"]).to_pylist()
    positions = Counter((r["kafka_partition"], r["kafka_offset"]) for r in rows)
    assert max(positions.values()) == 1  # no record of the log twice in the table
    ours = Counter(r["event_id"] for r in rows if r["event_id"].startswith(f"evt-{seed}-"))
    assert set(ours) == mine | more | later
    assert set(ours.values()) == {1}

    # The next tick: the running deployment observed with its lag, rows and last batch; no new run.
    cursor = result.cursor
    tick = sensor(build_sensor_context(instance=instance, resources={"kappa": kappa}, definitions=defs, cursor=cursor))
    assert isinstance(tick, SensorResult)
    assert not tick.run_requests
    [observed] = tick.asset_events or []
    metadata = {k: v.value for k, v in observed.metadata.items()}
    assert metadata["health"] == "running"
    assert metadata["consumer_lag"] == 0
    assert metadata["restarts"] == 1
    assert metadata["rows"] >= len(mine | more | later)
    assert metadata["last_batch_id"] is not None
    # From the run's own metrics: what the restarted process read, at least the clicks written while none ran.
    assert metadata["records_read"] >= len(later)

    # Stop: SIGTERM, the runner finishes its batch and exits 0; the sensor leaves a stopped deployment alone.
    stopped = deployments.stop(settings, job.name, job.version)
    assert stopped.desired == "stopped"
    assert exit_status(stopped) == 0
    assert "raw_clicks v1: stopped by signal" in stopped.log_path.read_text().rsplit(STARTED_LINE, 1)[-1]
    assert not process.group_members(restarted.deployment.pid)
    [state] = deployments.status(settings)
    assert state.health is Health.STOPPED
    final = sensor(
        build_sensor_context(instance=instance, resources={"kappa": kappa}, definitions=defs, cursor=tick.cursor)
    )
    assert isinstance(final, SensorResult)
    assert not final.run_requests
