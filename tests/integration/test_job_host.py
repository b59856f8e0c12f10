"""Shared deployments (KAPPA_DEPLOY_LAUNCHER=shared) on the real stack: `raw_clicks` and `enrich_clicks` run as
queries of one Spark application, the job host, each with its own lifecycle. Stopping one leaves the other
running; a SIGKILL of the pid `kappa jobs status` shows (the host's own process) is a crash of both, seen as such,
with the signal; a SIGKILL of the host's wrapper alone leaves no unsupervised writer (the host stops its jobs after
their batch and says why); restarts resume each from its checkpoint (every click in raw_clicks' table once, every
click's enriched record on the topic), neither refused nor doubled; the host ends by itself after its last job stops.
"""

import importlib
import os
import random
import signal
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from deltalake import DeltaTable

from dagster_project.resources import KappaResource
from kappa.contracts.topic_declarations import Topic
from kappa.core.errors import KappaError
from kappa.core.settings import KappaSettings
from kappa.kafka.reading import whole_topic
from kappa.lifecycle import deployments
from kappa.lifecycle.exits import STARTED_LINE, exit_status
from kappa.lifecycle.host_registry import HOST_IDLE_S, hosts, is_host
from kappa.lifecycle.lag import lag
from kappa.lifecycle.launchers import job_pid
from kappa.lifecycle.state_files import Health
from kappa.runtime import JobSpec
from kappa.runtime.run_record import RunState
from kappa.stack import process
from tests.integration.replay_pipeline import Deployment, deploy_copy, produce_clicks
from tests.waiting import wait_until


def _keys(stack: KappaSettings, topic: str) -> set[str]:
    """Every key on the topic now (read to its end offsets)."""
    return {(m.key() or b"").decode() for m in whole_topic(stack, topic)}


@pytest.fixture
def pipeline(stack: KappaSettings, tmp_path: Path, unique_name: Callable[[str], str]) -> Iterator[Deployment]:
    env = {"KAPPA_DEPLOY_STOP_TIMEOUT_S": "90", "KAPPA_DEPLOY_LAUNCHER": "shared"}
    d = deploy_copy(stack, tmp_path / "pipeline", unique_name("host") + "_", env=env)
    with d.imported():
        yield d


@pytest.fixture
def shared(pipeline: Deployment) -> Iterator[KappaSettings]:
    """The copy's settings; whatever still runs at the end is stopped, and the host's process group killed."""
    settings = KappaResource(overrides={k: v for k, v in pipeline.env.items() if k.startswith("KAPPA_")}).settings()
    yield settings
    for state in deployments.status(settings):
        deployments.stop_if_running(settings, state.deployment.job, state.deployment.version, timeout_s=30)
    for host in hosts(settings):
        if process.group_members(host.pid):
            os.killpg(host.pid, signal.SIGKILL)


@pytest.mark.slow
def test_jobs_share_one_application_and_keep_their_own_lifecycles(
    stack: KappaSettings, shared: KappaSettings, pipeline: Deployment
) -> None:
    settings = shared
    catalog = importlib.import_module("jobs.catalog")  # the copy's, as the deployed jobs read it
    source: Topic = catalog.CLICKS
    raw: JobSpec = importlib.import_module("jobs.raw_clicks.declaration").JOB
    enrich: JobSpec = importlib.import_module("jobs.enrich_clicks.declaration").JOB
    env = {k: v for k, v in pipeline.env.items() if k.startswith("KAPPA_")}
    table = f"{settings.delta_root}/{raw.output.name}/v{raw.version}"
    seed = random.SystemRandom().randrange(10_000, 1_000_000)
    mine = produce_clicks(stack, source, 600, seed)

    first = {job.name: deployments.start(settings, job.name, job.version, env=env) for job in (raw, enrich)}
    [host] = hosts(settings)
    assert is_host(host.pid)
    assert {d.pid for d in first.values()} == {host.pid}  # one process: the host
    assert all(d.launcher == "shared" for d in first.values())
    with pytest.raises(KappaError, match="already running"):
        deployments.start(settings, raw.name, raw.version, env=env)

    def caught_up(job: JobSpec) -> Callable[[], bool]:
        def check() -> bool:
            try:
                behind = lag(settings, job.name, job.version, timeout_s=5)
            except KappaError:
                return False
            return behind.total == 0 and behind.last_batch is not None

        return check

    log = first[raw.name].log_path
    for job in (raw, enrich):
        wait_until(caught_up(job), 300, f"{job.name} reads every click", log=first[job.name].log_path, interval_s=1)
        assert lag(settings, job.name, job.version).rows >= len(mine)  # its own progress lines

    # Stopping one job leaves the other running in the same host.
    stopped = deployments.stop(settings, enrich.name, enrich.version)
    assert exit_status(stopped) == 0
    assert "stopped after" in stopped.log_path.read_text().rsplit(STARTED_LINE, 1)[-1]
    run = deployments.state_of(stopped).run  # what the job's thread in the host recorded about its run
    assert run is not None
    assert (run.state, set(run.queries)) == (RunState.STOPPED, {"enrich_clicks_v1"})
    assert run.pid in process.group_members(host.pid)  # the host's process, under its wrapper
    states = {s.deployment.job: s.health for s in deployments.status(settings)}
    assert states == {raw.name: Health.RUNNING, enrich.name: Health.STOPPED}
    with pytest.raises(KappaError, match="other settings"):  # one application, one set of settings
        deployments.start(settings, enrich.name, enrich.version, env={**env, "KAPPA_SPARK_SHUFFLE_PARTITIONS": "3"})
    # A host keeps the code it started with: a job started after its code changed gets a host of its own (a
    # replay's new version beside the live one), and that host ends after its last job.
    transforms = pipeline.code / "jobs" / "enrich_clicks" / "transforms.py"
    transforms.write_text(transforms.read_text() + "\n# edited after the host started\n")
    elsewhere = deployments.start(settings, enrich.name, enrich.version, env=env)
    assert elsewhere.pid != host.pid
    assert len(hosts(settings)) == 2
    deployments.stop(settings, enrich.name, enrich.version)
    more = produce_clicks(stack, source, 300, seed, first=600)
    wait_until(caught_up(raw), 120, "raw_clicks goes on alone", log=log, interval_s=1)
    assert lag(settings, enrich.name, enrich.version).total == len(more)

    # A SIGKILL of the pid that `kappa jobs status` shows: the host's own process, not its wrapper. Every job it ran
    # has crashed, killed by the signal, as its wrapper recorded it.
    shown = _status_pids(pipeline)
    assert shown == {raw.name: job_pid(first[raw.name])}
    assert shown[raw.name] != host.pid  # not the wrapper
    assert shown[raw.name] in process.group_members(host.pid)
    os.kill(shown[raw.name], signal.SIGKILL)
    wait_until(lambda: not process.group_members(host.pid), 30, "the host's processes are gone", log=log)
    crashed = {s.deployment.job: s for s in deployments.status(settings)}
    assert crashed[raw.name].health is Health.CRASHED
    assert (crashed[raw.name].exit_reason or "").startswith("its job host was killed by SIGKILL (exit status 137)")
    assert crashed[enrich.name].health is Health.STOPPED  # stopped before: still stopped
    later = produce_clicks(stack, source, 200, seed, first=900)

    # Restarts start a new host; each job resumes from its own checkpoint.
    again = {job.name: deployments.restart(settings, job.name, job.version) for job in (raw, enrich)}
    [new_host] = hosts(settings)  # the dead hosts' state files are gone
    assert new_host.pid != host.pid
    assert {d.pid for d in again.values()} == {new_host.pid}
    assert (again[raw.name].last_exit_reason or "").startswith("its job host was killed by SIGKILL")
    for job in (raw, enrich):
        wait_until(caught_up(job), 300, f"{job.name} resumes", log=again[job.name].log_path, interval_s=1)

    # A SIGKILL of the host's wrapper alone: the host sees it gone and stops every job after its batch, so nothing
    # writes unsupervised. Until a job's batch ends, status shows it running, by the host's own pid.
    host_process = job_pid(again[raw.name])
    assert host_process is not None
    os.kill(new_host.pid, signal.SIGKILL)
    batch_when_crashed: dict[str, object] = {}  # a job shown crashed commits nothing after

    def host_gone() -> bool:
        for state in deployments.status(settings):
            if state.health is Health.RUNNING:
                assert state.pid == host_process  # its own process, while the host finishes its batch
            elif state.run is not None:
                batch_when_crashed.setdefault(state.deployment.job, state.run.last_batch)
        return not process.group_members(new_host.pid)

    wait_until(host_gone, 120, "the orphaned host stops its jobs and ends", log=log, interval_s=0.1)
    host_log = Path(new_host.log_file).read_text()
    assert f"the deployment's wrapper (pid {new_host.pid}) is gone" in host_log
    for job in (raw, enrich):
        [state] = [s for s in deployments.status(settings) if s.deployment.job == job.name]
        assert state.health is Health.CRASHED
        assert f"the deployment's wrapper (pid {new_host.pid}) was killed" in (state.exit_reason or "")
        assert state.run is not None
        assert batch_when_crashed[job.name] == state.run.last_batch
    last = produce_clicks(stack, source, 150, seed, first=1100)
    final = {job.name: deployments.restart(settings, job.name, job.version) for job in (raw, enrich)}
    for job in (raw, enrich):
        wait_until(caught_up(job), 300, f"{job.name} resumes again", log=final[job.name].log_path, interval_s=1)
    everything = mine | more | later | last
    rows = DeltaTable(table).to_pyarrow_table(columns=["event_id", "kafka_partition", "kafka_offset"]).to_pylist()
    assert max(Counter((r["kafka_partition"], r["kafka_offset"]) for r in rows).values()) == 1
    ours = Counter(r["event_id"] for r in rows if r["event_id"].startswith(f"evt-{seed}-"))
    assert set(ours) == everything
    assert set(ours.values()) == {1}
    output = importlib.import_module("kappa.runtime.binding").deployed_job(settings, enrich.name).output
    assert everything <= _keys(stack, output.name)

    # The host ends by itself after its last job.
    [last_host] = hosts(settings)
    for job in (raw, enrich):
        deployments.stop(settings, job.name, job.version)
    wait_until(lambda: not is_host(last_host.pid), HOST_IDLE_S + 60, "the host ends", log=log)
    assert hosts(settings) == []


def _status_pids(pipeline: Deployment) -> dict[str, int]:
    """The pid `kappa jobs status` shows for each running job: what an operator signals."""
    listed = pipeline.kappa("jobs", "status", check=False).stdout.splitlines()
    rows = [line.split() for line in listed[1:] if line and not line.startswith(" ")]
    return {row[0]: int(row[3]) for row in rows if row[2] == "running"}
