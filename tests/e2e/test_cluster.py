"""Beyond one JVM: a job on the stack's Spark standalone cluster and 3-broker Kafka (`kappa up --brokers 3
--spark-workers 2`), its executors in other processes that die, and a broker that dies, with nothing lost."""

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest
from confluent_kafka.admin import AdminClient

from kappa.contracts.topic_declarations import Cleanup, Topic
from kappa.core.settings import load_settings
from kappa.kafka.topic_admin import describe
from kappa.spark.session import SHORT_RUN_JVM
from kappa.stack import LocalStack
from kappa.stack.process import port_in_use
from tests.e2e.faults import OUTAGE_S, event_ids, produce_clicks
from tests.e2e.stackctl import kappa, stack_processes
from tests.integration.replay_pipeline import deploy_copy
from tests.waiting import wait_until

MASTER_PORT, MASTER_UI = 22077, 22180  # worker i: 22077 + i and 22180 + i
EXECUTOR = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


def executors_of(worker_pid: int) -> list[psutil.Process]:
    """The executor JVMs a worker runs (its children: a worker launches each executor as a process)."""
    try:
        children = psutil.Process(worker_pid).children()
    except psutil.NoSuchProcess:
        return []
    return [c for c in children if EXECUTOR in " ".join(c.cmdline())]


def executors_anywhere() -> list[int]:
    """Every executor JVM on the machine that serves this test's workers (an orphan too: its worker gone)."""
    workers = {f"127.0.0.1:{MASTER_PORT + i}" for i in (1, 2)}
    found = []
    for process in psutil.process_iter():
        try:
            cmdline = " ".join(process.cmdline())
        except psutil.Error:
            continue
        if EXECUTOR in cmdline and any(w in cmdline for w in workers):
            found.append(process.pid)
    return found


def cores_used() -> dict[int, int]:
    """Worker RPC port -> cores its executors hold, for the workers the master holds alive."""
    state = httpx.get(f"http://127.0.0.1:{MASTER_UI}/json/", timeout=5).json()
    return {int(w["port"]): int(w["coresused"]) for w in state["workers"] if w["state"] == "ALIVE"}


@pytest.mark.slow
def test_a_job_on_the_spark_cluster_outlives_a_killed_worker_and_a_killed_broker(tmp_path: Path) -> None:
    """raw_clicks runs on the cluster (`KAPPA_SPARK_MASTER=spark://...`), an executor on each worker, its code
    shipped to them. SIGKILL one worker: its executor ends with it, the job goes on with the other, and the worker
    started again gets an executor back. Then SIGKILL one broker for two minutes (replication 3,
    min.insync.replicas 2; producers acks=all). Every click is in Delta exactly once, and `kappa down` leaves no
    process and no port behind."""
    stack_dir = tmp_path / "cluster"
    env = {
        "KAPPA_KAFKA_PORT": "22092", "KAPPA_CONTROLLER_PORT": "22192", "KAPPA_REGISTRY_PORT": "22081",
        "KAPPA_SPARK_MASTER_PORT": str(MASTER_PORT), "KAPPA_SPARK_MASTER_UI_PORT": str(MASTER_UI),
        "KAPPA_STACK_DIR": str(stack_dir),
    }  # fmt: skip
    settings = load_settings(
        kafka_port=22092, controller_port=22192, registry_port=22081, brokers=3, stack_dir=stack_dir,
        spark_master_port=MASTER_PORT, spark_master_ui_port=MASTER_UI, spark_workers=2,
        spark_shuffle_partitions=2, spark_driver_java_options=SHORT_RUN_JVM,
    )  # fmt: skip
    on_cluster = {"KAPPA_SPARK_MASTER": f"spark://127.0.0.1:{MASTER_PORT}",
                  "KAPPA_SPARK_EXECUTOR_JAVA_OPTIONS": SHORT_RUN_JVM}  # fmt: skip
    job: subprocess.Popen[str] | None = None
    output: list[str] = []  # read as it comes: a full pipe would block the job
    try:
        up = kappa("up", "--brokers", "3", "--spark-workers", "2", env=env)
        assert up.code == 0, up.err
        for component in ("kafka", "registry", "spark-master", "spark-worker-1", "spark-worker-2"):
            assert f"{component}: healthy after" in up.out, up.out
        status = kappa("status", env=env)
        assert status.code == 0, status.out + status.err
        lines = {line.split()[0]: line for line in status.out.splitlines()[1:]}
        assert f"spark://127.0.0.1:{MASTER_PORT}, UI http://127.0.0.1:{MASTER_UI}" in lines["spark-master"]
        assert f"http://127.0.0.1:{MASTER_UI + 2}" in lines["spark-worker-2"]
        assert all(line.endswith("healthy") for line in lines.values()), status.out
        admin = AdminClient({"bootstrap.servers": settings.bootstrap})
        cluster = admin.describe_cluster().result(timeout=15)
        assert sorted(n.port for n in cluster.nodes) == [22092, 22093, 22094]

        pipeline = deploy_copy(settings, tmp_path / "pipeline", "three_")
        source = Topic("three_clicks", 4, Cleanup.COMPACT, value_schema="clicks.avsc")
        state = describe(admin, [source])[0]
        assert (state.replication_factor, state.configs["min.insync.replicas"]) == (3, "2")
        table = tmp_path / "pipeline" / "delta" / "raw_clicks" / "v1"
        before = produce_clicks(settings, source, 600, first=0)
        job = pipeline.popen("jobs", "run", "raw_clicks", env=on_cluster)
        assert job.stdout is not None
        threading.Thread(target=lambda: output.extend(job.stdout), daemon=True).start()  # type: ignore[union-attr, arg-type]
        wait_until(lambda: len(event_ids(table)) == len(before), 300, "the first clicks in Delta", log=output)

        # Its tasks run in the executors: one on each worker, the driver in the job's own process.
        stack = LocalStack(settings)
        pids = {c.name: c.pid for c in stack.status()}
        assert all(executors_of(pids[f"spark-worker-{i}"]) for i in (1, 2)), "an executor on each worker"
        assert cores_used() == {MASTER_PORT + 1: 1, MASTER_PORT + 2: 1}
        # The job's code shipped with it (kappa.spark.code_archive): each executor fetched it into its folder.
        shipped = {p.parents[3].name for p in stack_dir.glob("spark-worker-*/work/app-*/*/kappa-jobs-*.zip")}
        assert shipped == {"spark-worker-1", "spark-worker-2"}

        [lost] = executors_of(pids["spark-worker-1"])
        os.kill(pids["spark-worker-1"], signal.SIGKILL)
        wait_until(lambda: not lost.is_running(), 60, "the killed worker's executor to end with it")
        during_worker = produce_clicks(settings, source, 300, first=600)
        wait_until(lambda: len(event_ids(table)) >= 900, 180, "clicks in Delta with a worker gone", log=output)
        assert job.poll() is None, "the job exited with a worker gone:\n" + "".join(output[-40:])
        stack.stop_component("spark-worker-1")  # forget the killed process, then start it on its port again
        stack.start_component("spark-worker-1")
        wait_until(lambda: cores_used().get(MASTER_PORT + 1) == 1, 120, "an executor on the worker started again")

        [victim] = [c for c in stack.status() if c.name == "kafka-3"]
        os.kill(victim.pid, signal.SIGKILL)
        back_at = time.monotonic() + OUTAGE_S
        during_broker = produce_clicks(settings, source, 400, first=900)  # acks=all: two in-sync replicas do
        wait_until(lambda: len(event_ids(table)) >= 1300, OUTAGE_S, "clicks in Delta with a broker gone", log=output)
        while time.monotonic() < back_at:  # the rest of the outage itself, not a wait for a condition
            assert job.poll() is None, "the job exited with a broker gone:\n" + "".join(output[-40:])
            time.sleep(5)
        stack.stop_component("kafka-3")
        stack.start_component("kafka-3")

        after = produce_clicks(settings, source, 400, first=1300)
        wait_until(lambda: len(event_ids(table)) >= 1700, 300, "the clicks after the broker's return", log=output)
        job.send_signal(signal.SIGTERM)
        job.wait(timeout=120)
    finally:
        if job is not None and job.poll() is None:
            job.kill()
        down = kappa("down", "--purge", env=env)
    out = "".join(output)
    assert job.returncode == 0, out[-3000:]
    assert sorted(event_ids(table)) == sorted(before | during_worker | during_broker | after)  # once each
    assert "Traceback" not in out
    assert "stopped by signal" in out
    assert down.code == 0, down.err
    assert stack_processes(stack_dir) == []
    wait_until(lambda: executors_anywhere() == [], 30, "no executor left once its workers stopped")
    spark_ports = (MASTER_PORT, MASTER_PORT + 1, MASTER_PORT + 2, MASTER_UI, MASTER_UI + 1, MASTER_UI + 2)
    for port in (22092, 22093, 22094, 22192, 22193, 22194, 22081, 22082, *spark_ports):
        assert not port_in_use(port), f"port {port} still bound after `kappa down`"
