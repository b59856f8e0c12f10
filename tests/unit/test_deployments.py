"""kappa.lifecycle.deployments without Kafka or Spark: command lines, the state file, lag arithmetic, the exit reason
and last batch from the run and exit records, and the wrapper's supervision of a stand-in process (a Python sleeper
named like a job)."""

import dataclasses
import os
import signal
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from kappa.cli.main import main
from kappa.core.errors import KappaError, SettingsError
from kappa.core.settings import KappaSettings, Launcher, load_settings
from kappa.lifecycle import deployments, launchers
from kappa.lifecycle.catch_up import exclusive_catch_up
from kappa.lifecycle.exits import EXIT_LINE, STARTED_LINE, exit_reason, exit_status, record_exit
from kappa.lifecycle.host_registry import hosts
from kappa.lifecycle.lag import Lag, last_batch, topic_lag
from kappa.lifecycle.launchers import driver_pids, terminate
from kappa.lifecycle.model import Replay, ReplayRefusedError
from kappa.lifecycle.state_files import (
    Deployment,
    DeploymentState,
    Health,
    checkpoint_lock,
    exit_file,
    load,
    marker,
    now_iso,
    save,
)
from kappa.lifecycle.wrapper import is_ours, launch_env, spawn, watch_wrapper, wrapped
from kappa.runtime import run_record
from kappa.runtime.discovery import discover
from kappa.runtime.run_record import RunRecorder
from kappa.stack import process
from tests.waiting import wait_until


@pytest.fixture
def settings(tmp_path: Path) -> KappaSettings:
    return load_settings(state_dir=tmp_path, deployments_dir=tmp_path / "deployments")


def test_subprocess_launcher_runs_the_cli_here(settings: KappaSettings) -> None:
    assert settings.deploy_launcher is Launcher.SHARED  # the local profile's default: one Spark application
    settings = settings.model_copy(update={"deploy_launcher": Launcher.SUBPROCESS})
    assert deployments.job_command(settings, "raw_clicks", 2) == [
        sys.executable,
        *("-m", "kappa.cli", "jobs", "run", "raw_clicks", "--version", "2"),
    ]


def test_spark_submit_launcher_submits_to_the_master_in_client_mode(tmp_path: Path) -> None:
    settings = load_settings(
        state_dir=tmp_path,
        deploy_launcher="spark-submit",
        spark_master="spark://spark-master:7077",
        spark_submit="/opt/spark/bin/spark-submit",
    )
    conf = {
        "spark.master": "spark://spark-master:7077",
        "spark.jars": "/jars/a.jar,/jars/b.jar",
        "spark.driver.memory": "3g",
        "spark.sql.shuffle.partitions": "8",
        "spark.app.name": "kappa-sessionize-v3",
        "spark.submit.pyFiles": "/code/kappa-jobs-1.zip",
        "spark.files": "/code/kappa-jobs-1.zip,/etc/extra.txt",
    }
    command = deployments.job_command(settings, "sessionize", 3, spark_conf=conf, cli_path="/app/kappa/cli.py")
    assert command == [
        "/opt/spark/bin/spark-submit",
        *("--master", "spark://spark-master:7077", "--deploy-mode", "client", "--name", "kappa-sessionize-v3"),
        *("--driver-memory", "3g"),
        *("--conf", f"spark.pyspark.python={sys.executable}"),
        *("--conf", f"spark.pyspark.driver.python={sys.executable}"),
        *("--jars", "/jars/a.jar,/jars/b.jar"),
        *("--py-files", "/code/kappa-jobs-1.zip"),  # spark-submit's option, and shipped once: not in spark.files too
        *("--conf", "spark.app.name=kappa-sessionize-v3", "--conf", "spark.files=/etc/extra.txt"),
        *("--conf", "spark.sql.shuffle.partitions=8"),
        *("/app/kappa/cli.py", "jobs", "run", "sessionize", "--version", "3"),
    ]
    # What marks the process as this deployment is on the command line, whichever the launcher.
    assert marker("sessionize", 3) in " ".join(wrapped(command, Path("sessionize.v3.exit.json")))


def test_spark_submit_needs_a_cluster_master(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"KAPPA_DEPLOY_LAUNCHER=spark-submit .* 'local\[\*\]'"):
        load_settings(state_dir=tmp_path, deploy_launcher="spark-submit")
    with pytest.raises(
        SettingsError, match=r"KAPPA_DEPLOY_LAUNCHER: Input should be 'subprocess', 'spark-submit' or 'shared'"
    ):
        load_settings(state_dir=tmp_path, deploy_launcher="kubectl")
    for master in ("yarn", "k8s://https://10.0.0.1:6443", "spark://a:7077"):
        assert load_settings(state_dir=tmp_path, deploy_launcher="spark-submit", spark_master=master).spark_master


def test_a_launcher_is_chosen_from_the_setting_in_one_place(settings: KappaSettings) -> None:
    for name in Launcher:  # every value of the setting has its launcher
        assert launchers.for_start(name, "raw_clicks").name is name
    # The shared launcher hands a real-time job a driver of its own; the others run whatever they are given.
    assert launchers.for_start(Launcher.SHARED, "enrich_clicks_realtime").name is Launcher.SUBPROCESS
    assert launchers.for_start(Launcher.SPARK_SUBMIT, "enrich_clicks_realtime").name is Launcher.SPARK_SUBMIT
    # Whoever stops or restarts a deployment finds the launcher that started it, by its state file.
    assert launchers.of(_deployment(settings, 4242, launcher="shared")).name is Launcher.SHARED
    assert launchers.of(_deployment(settings, 4242)).name is Launcher.SUBPROCESS
    assert [launchers.named(n.value).where for n in Launcher] == [None, None, "in the job host"]
    with pytest.raises(KappaError, match=r"no launcher 'kubectl' here \(known: shared, spark-submit, subprocess\)"):
        launchers.of(_deployment(settings, 4242, launcher="kubectl"))


def test_lag_is_end_minus_committed_per_partition() -> None:
    committed = {"clicks": {0: 10, 1: 50}, "user_profiles": {0: 7}}
    watermarks = {
        "clicks": {0: (0, 25), 1: (0, 50), 2: (5, 9)},  # p2: no batch committed yet -> all of 5..9 unread
        "user_profiles": {0: (20, 30)},  # committed 7 below low 20: retention took 7..19, 10 records left
    }
    assert topic_lag(committed, watermarks) == {"clicks": 15 + 0 + 4, "user_profiles": 10}
    lag = Lag(group="kappa.x.v1", per_topic=topic_lag(committed, watermarks))
    assert lag.total == 29
    assert topic_lag({"t": {0: 9}}, {"t": {0: (0, 9)}}) == {"t": 0}


def _batch(query: str, batch_id: int, rows: int) -> dict[str, object]:
    return {"name": query, "batchId": batch_id, "numInputRows": rows}


def test_last_batch_and_rows_come_from_the_run_record(settings: KappaSettings) -> None:
    path = run_record.record_path(settings, "raw_clicks", 1)
    with RunRecorder.recording(settings, "raw_clicks", 1) as first:
        first.query_started("raw_clicks_v1", "q-1", "run-1")
        first.batch(_batch("raw_clicks_v1", 0, 100))
    with RunRecorder.recording(settings, "raw_clicks", 1) as second:  # a second run of the version
        second.batch(_batch("raw_clicks_v1_dlq", 0, 3))  # another query's (an older release's dead-letter query)
        second.batch(_batch("raw_clicks_v1", 1, 40))
        before = datetime.now(UTC)
        second.batch(_batch("raw_clicks_v1", 2, 0))
    last, rows = last_batch(settings, "raw_clicks", 1)
    assert last is not None
    assert (last.batch_id, last.rows) == (2, 0)
    assert before - timedelta(milliseconds=1) <= last.at <= datetime.now(UTC)  # (recorded to the millisecond)
    assert rows == 140  # 100 + 40 + 0 over both runs; the other query's 3 are not its
    assert last_batch(settings, "raw_clicks", 2) == (None, 0)  # a version that never ran
    assert path.exists()


def test_exit_reason_is_the_exit_record_and_this_runs_error(settings: KappaSettings) -> None:
    deployment = _deployment(settings, 4242)
    deployment.log_path.parent.mkdir(parents=True, exist_ok=True)
    deployment.log_path.write_text("=== kappa-deployment: started fake v1\nkappa: error: an earlier run's error\n")
    assert exit_reason(deployment) == (  # no record at all: the exit is unknown, the log says the rest
        "no exit status recorded (its wrapper was killed too, or the machine restarted); "
        "last log lines: kappa: error: an earlier run's error"
    )
    with pytest.raises(KappaError), RunRecorder.recording(settings, "fake", 1):
        raise KappaError("job fake_v1: query fake_v1 failed: Kafka went away\n(the rest of the stack trace)")
    record_exit(deployment, 2)
    assert exit_status(deployment) == 2
    assert exit_reason(deployment) == ("exit status 2; last error: job fake_v1: query fake_v1 failed: Kafka went away")
    # A new start forgets the last run's error and exit; a kill leaves no record of its own.
    run_record.reset(run_record.record_path(settings, "fake", 1), "fake", 1)
    deployment.exit_path.unlink()
    with deployment.log_path.open("a") as log:
        log.write(f"{STARTED_LINE} fake v1 (restart 1)\n")
    with RunRecorder.recording(settings, "fake", 1):
        pass
    record_exit(deployment, 137)
    reason = exit_reason(deployment)
    assert reason == "killed by SIGKILL (exit status 137)"  # neither the earlier run's recorded error nor its log
    assert deployment.log_path.read_text().splitlines()[-1].startswith(f"{EXIT_LINE} 137 at ")


def test_a_crash_the_run_could_not_record_is_read_from_the_logs_tail(settings: KappaSettings) -> None:
    """A failure before the run knew its settings (so its record): the log's last error lines, read from its end."""
    deployment = _deployment(settings, 4242)
    deployment.log_path.parent.mkdir(parents=True, exist_ok=True)
    batches = "".join(f"batch {i}: 100 rows\n" for i in range(20_000))  # far beyond the tail
    early = "kappa: error: KAPPA_KAFKA_PORT: not a port\n"
    deployment.log_path.write_text(early + "=== kappa-deployment: started fake v1\n" + batches + early)
    record_exit(deployment, 2)
    assert exit_reason(deployment) == ("exit status 2; last log lines: kappa: error: KAPPA_KAFKA_PORT: not a port")


def _deployment(settings: KappaSettings, pid: int, **changes: object) -> Deployment:
    fields: dict[str, object] = {
        "job": "fake",
        "version": 1,
        "pid": pid,
        "command": ["python", "-m", "kappa.cli", "jobs", "run", "fake", "--version", "1"],
        "launcher": "subprocess",
        "started_at": now_iso(),
        "log_file": str(settings.deployments_path / "fake.v1.log"),
        "env": {"KAPPA_KAFKA_PORT": "19092"},
    }
    return Deployment(**(fields | changes))  # type: ignore[arg-type]


def test_state_file_round_trip_and_a_foreign_pid_is_never_ours(settings: KappaSettings) -> None:
    # This test's own pid is alive but is not a deployment: a reused pid reads as crashed, and is never signalled.
    deployment = _deployment(settings, os.getpid(), restarts=2, last_exit_reason="exit status 1")
    save(settings, deployment)
    assert load(settings, "fake", 1) == deployment
    assert load(settings, "fake", 2) is None
    # The records beside the state files are not deployments, nor job hosts.
    (settings.deployments_path / "host-02c444e267ab.exit.json").write_text('{"exit_status": 0}')
    run_record.reset(deployment.run_record_path, "fake", 1)
    assert hosts(settings) == []
    [state] = deployments.status(settings)
    assert state.health is Health.CRASHED
    assert state.exit_reason == "no exit status recorded (its wrapper was killed too, or the machine restarted)"
    assert deployments.stop(settings, "fake", 1, timeout_s=1).desired == "stopped"  # nothing of ours to signal
    [state] = deployments.status(settings)
    assert state.health is Health.STOPPED
    assert deployments.stop_if_running(settings, "fake", 1) is False


# A stand-in for `kappa jobs run`: its command line carries the marker; SIGTERM ends it after a "batch".
SLEEPER = """
import signal, sys, time
def stop(*_):
    print("stopping after the current batch", flush=True); time.sleep(0.3); sys.exit(0)
signal.signal(signal.SIGTERM, stop)
print("running", flush=True)
while True: time.sleep(0.1)
"""


def _spawn_sleeper(settings: KappaSettings, script: str = SLEEPER) -> Deployment:
    log = settings.deployments_path / "fake.v1.log"
    command = [sys.executable, "-c", script, "jobs", "run", "fake", "--version", "1"]
    pid = spawn(command, log, launch_env({}), exit_file(log))
    deployment = _deployment(settings, pid, command=command)
    save(settings, deployment)
    wait_until(lambda: "running" in log.read_text() and driver_pids(deployment), timeout_s=10,
               what="the fake job runs under its wrapper", log=log, interval_s=0.05)  # fmt: skip
    return deployment


def test_the_wrapper_records_how_the_job_ended(settings: KappaSettings) -> None:
    deployment = _spawn_sleeper(settings)
    try:
        assert is_ours(deployment.pid, "fake", 1)
        assert not is_ours(deployment.pid, "fake", 2)
        [driver] = driver_pids(deployment)
        assert deployments.state_of(deployment).health is Health.RUNNING
        os.kill(driver, signal.SIGKILL)  # a crash: the driver dies, the wrapper records it
        wait_until(lambda: not is_ours(deployment.pid, "fake", 1), timeout_s=10,
                   what="the wrapper exits after its driver", interval_s=0.05)  # fmt: skip
        state = deployments.state_of(deployment)
        assert state.health is Health.CRASHED
        assert state.exit_reason is not None
        assert state.exit_reason.startswith("killed by SIGKILL (exit status 137)")
        assert exit_status(deployment) == 137  # the exit record, written by the wrapper
    finally:
        terminate(deployment, timeout_s=1)
    assert process.group_members(deployment.pid) == []


# A stand-in job that watches its wrapper as `kappa jobs run` does: once the wrapper is gone, it stops after a
# 1-second "batch".
WATCHER = """
import os, signal, sys, threading, time
from kappa.lifecycle.wrapper import watch_wrapper
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
watch = watch_wrapper(lambda: os.kill(os.getpid(), signal.SIGTERM), interval_s=0.05)
print("running " + ("watching" if watch else "unwatched"), flush=True)  # one write: the test reads it whole
stop.wait()
time.sleep(1.0)
print("stopped:", "wrapper gone" if watch and watch.gone.is_set() else "signal", flush=True)
"""


def test_a_job_whose_wrapper_is_killed_stops_after_its_batch_and_shows_running_till_then(
    settings: KappaSettings,
) -> None:
    assert watch_wrapper(lambda: None) is None  # this process runs under no deployment's wrapper
    deployment = _spawn_sleeper(settings, WATCHER)
    try:
        [driver] = driver_pids(deployment)
        state = deployments.state_of(deployment)
        assert (state.health, state.pid, state.supervised) == (Health.RUNNING, driver, True)  # the job's pid
        assert "running watching" in deployment.log_path.read_text()
        os.kill(deployment.pid, signal.SIGKILL)  # the wrapper alone
        wait_until(lambda: not is_ours(deployment.pid, "fake", 1), timeout_s=10,
                   what="the wrapper is gone", interval_s=0.02)  # fmt: skip
        finishing = deployments.state_of(deployment)  # its batch still runs: running, its own pid, unsupervised
        assert (finishing.health, finishing.pid, finishing.supervised) == (Health.RUNNING, driver, False)
        wait_until(lambda: not process.group_members(deployment.pid), timeout_s=10,
                   what="the job stops after its batch", interval_s=0.05)  # fmt: skip
        assert "stopped: wrapper gone" in deployment.log_path.read_text()
        assert deployments.state_of(deployment).health is Health.CRASHED  # should run; nothing runs it now
    finally:
        terminate(deployment, timeout_s=1)


def test_status_shows_what_the_run_recorded(
    settings: KappaSettings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KAPPA_STATE_DIR", str(settings.state_dir))
    monkeypatch.setenv("KAPPA_DEPLOYMENTS_DIR", str(settings.deployments_path))
    deployment = _spawn_sleeper(settings)
    try:
        with RunRecorder.recording(settings, "fake", 1) as recorder:  # as the job would, from its own process
            recorder.query_started("fake_v1", "9d1e", "41a7")
            recorder.batch(_batch("fake_v1", 4, 12))
            recorder.retrying("Kafka is unavailable (DisconnectException)")
            assert main(["jobs", "status", "-v"]) == 0
            out = capsys.readouterr().out
            [row] = [line for line in out.splitlines() if line.startswith("fake ")]
            assert "running" in row
            assert f"#4 {_read_run(settings).last_batch.at:%H:%M:%S}Z 12 rows" in row  # type: ignore[union-attr]
            assert "waiting: Kafka is unavailable (DisconnectException)" in out
            assert "queries: fake_v1 9d1e (run 41a7)" in out
    finally:
        terminate(deployment, timeout_s=1)


def _read_run(settings: KappaSettings) -> run_record.RunRecord:
    record = run_record.read(run_record.record_path(settings, "fake", 1))
    assert record is not None
    return record


def test_stop_terminates_the_driver_gracefully(settings: KappaSettings) -> None:
    deployment = _spawn_sleeper(settings)
    try:
        started = time.monotonic()
        stopped = deployments.stop(settings, "fake", 1, timeout_s=20)
        assert time.monotonic() - started < 10  # SIGTERM did it, not the SIGKILL after the timeout
        assert stopped.desired == "stopped"
        log = Path(deployment.log_file).read_text()
        assert "stopping after the current batch" in log
        assert exit_status(deployment) == 0
        assert deployments.state_of(stopped).health is Health.STOPPED
        assert process.group_members(deployment.pid) == []
    finally:
        terminate(deployment, timeout_s=1)


def test_stop_all_stops_every_running_deployment_for_a_purge(settings: KappaSettings) -> None:
    deployment = _spawn_sleeper(settings)
    try:
        assert deployments.stop_all(settings, timeout_s=20) == ["fake.v1"]
        assert process.group_members(deployment.pid) == []
        assert deployments.stop_all(settings) == []  # nothing runs any more
    finally:
        terminate(deployment, timeout_s=1)


def test_the_code_location_has_stop_and_restart_jobs_and_a_running_health_sensor() -> None:
    from dagster import DefaultSensorStatus

    from dagster_project.definitions import defs
    from dagster_project.operations import SENSOR_INTERVAL_S, SENSOR_NAME
    from kappa.runtime.discovery import discover

    names = {j.name for j in defs.get_repository_def().get_all_jobs()}
    for job in discover():
        assert {f"stop_{job}", f"restart_{job}"} <= names
    sensor = defs.get_sensor_def(SENSOR_NAME)
    assert sensor.default_status is DefaultSensorStatus.RUNNING
    assert sensor.minimum_interval_seconds == SENSOR_INTERVAL_S
    assert {t.job_name for t in sensor.targets} == {f"restart_{job}" for job in discover()}


def test_a_crash_becomes_one_restart_run_tagged_with_why(settings: KappaSettings) -> None:
    from dagster_project.operations import REASON_TAG, restart_request

    crashed = DeploymentState(
        _deployment(settings, 4242, started_at="2026-11-22T08:00:00+00:00", restarts=1),
        Health.CRASHED,
        exit_reason="killed by SIGKILL (exit status 137); last log lines: x",
    )
    request = restart_request(crashed)
    assert request.job_name == "restart_fake"
    assert request.run_key == "fake.v1:4242:2026-11-22T08:00:00+00:00"  # the same crash never restarts twice
    assert request.tags[REASON_TAG] == "killed by SIGKILL (exit status 137)"
    assert request.tags["kappa/restarts"] == "2"
    config = request.run_config["ops"]["restart_fake_deployment"]["config"]
    assert config == {
        "version": 1,
        "reason": "crashed: killed by SIGKILL (exit status 137); last log lines: x",
        "crashed_pid": 4242,
    }


def test_one_writer_per_checkpoint(settings: KappaSettings) -> None:
    replay = Replay(job=dataclasses.replace(discover()["raw_clicks"], name="fake"), version=1, jobs={}, aliases={})

    def another_launch() -> None:
        with exclusive_catch_up(settings, replay):
            pass

    first = rf"checkpoint of fake v1 is in use by the catch-up of `kappa replay start` \(pid {os.getpid()},"
    # A second launch of the same replay is refused, naming the first; so is a deployment of the version.
    with exclusive_catch_up(settings, replay):
        with pytest.raises(ReplayRefusedError, match=first):
            another_launch()
        with pytest.raises(KappaError, match=first):  # (past the check that "fake" is a declared job)
            deployments._start(
                settings, "fake", 1, launcher=Launcher.SUBPROCESS, env=None, restarts=0, last_exit_reason=None
            )
    another_launch()  # released with its holder
    running_job = r"in use by `kappa jobs run fake --version 1` \(pid"  # a run of the version holds it
    with (
        checkpoint_lock(settings, "fake", 1, "`kappa jobs run fake --version 1`"),
        pytest.raises(ReplayRefusedError, match=running_job),
    ):
        another_launch()
    deployment = _spawn_sleeper(settings)  # fake v1 deployed: its checkpoint belongs to the continuous run
    try:
        with pytest.raises(ReplayRefusedError, match=r"fake v1 is deployed to run continuously \(running,"):
            another_launch()
    finally:
        terminate(deployment, timeout_s=1)
    # Crashed but still meant to run: the sensor would restart it beside the catch-up.
    save(settings, dataclasses.replace(deployment, desired="running"))
    with pytest.raises(ReplayRefusedError, match=r"fake v1 is deployed to run continuously \(crashed,"):
        another_launch()
    deployments.stop(settings, "fake", 1, timeout_s=1)
    another_launch()
