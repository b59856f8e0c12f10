"""`kappa up | status | down` on a stack of the test's own, and schemas surviving a registry restart."""

import json
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import psutil
import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

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

PORTS = {"KAPPA_KAFKA_PORT": "21092", "KAPPA_CONTROLLER_PORT": "21192", "KAPPA_REGISTRY_PORT": "21081"}


def lingering(port: int) -> bool:
    """Whether a closed connection still holds the local `port` (TIME_WAIT, FIN_WAIT2), as the kernel lists it."""
    closing = {psutil.CONN_TIME_WAIT, psutil.CONN_FIN_WAIT2}
    return any(c.laddr and c.laddr.port == port and c.status in closing for c in psutil.net_connections("tcp"))


def test_up_status_restart_down_leaves_nothing_behind(tmp_path: Path) -> None:
    stack_dir = tmp_path / "stack"
    derived = {name: tmp_path / name for name in ("checkpoints", "delta", "deployments")}  # what --purge deletes too
    env = {
        **PORTS, "KAPPA_STACK_DIR": str(stack_dir), "KAPPA_CHECKPOINT_ROOT": str(derived["checkpoints"]),
        "KAPPA_DELTA_ROOT": str(derived["delta"]), "KAPPA_DEPLOYMENTS_DIR": str(derived["deployments"]),
    }  # fmt: skip
    try:
        up = kappa("up", env=env)
        assert up.code == 0, up.err
        assert "kafka: healthy after" in up.out
        assert "registry: healthy after" in up.out

        status = kappa("status", env=env)
        assert status.code == 0, status.err
        lines = {line.split()[0]: line for line in status.out.splitlines()[1:]}
        assert set(lines) == {"kafka-1", "registry"}
        assert "127.0.0.1:21092" in lines["kafka-1"]
        assert all(line.endswith("healthy") for line in lines.values())
        state = json.loads((stack_dir / "stack.json").read_text())
        assert {c["pid"] for c in state["components"].values()} <= set(stack_processes(stack_dir))

        # A second `up` starts nothing new.
        again = kappa("up", env=env)
        assert again.code == 0
        assert "healthy after" not in again.out

        # Schemas are stored in Kafka (kafkasql): a registry restart keeps them, ids included.
        settings = load_settings(kafka_port=21092, controller_port=21192, registry_port=21081, stack_dir=stack_dir)
        schema = json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "long"}]})
        schema_id = SchemaRegistryClient({"url": settings.registry}).register_schema(
            "survivor-value", Schema(schema, "AVRO")
        )
        # A stopped server's connections linger on its port for up to a minute (TIME_WAIT, FIN_WAIT2): the
        # restart binds over them at once, as the server itself would, instead of waiting them out.
        stack = LocalStack(settings)
        with socket.create_connection(("127.0.0.1", 21081)):  # open while the registry stops: it closes first
            stack.stop_component("registry")
            assert lingering(21081)
            stack.start_component("registry")
            assert lingering(21081), "the restart waited out the stopped registry's connections"
        fresh = SchemaRegistryClient({"url": settings.registry})
        assert json.loads(fresh.get_schema(schema_id).schema_str) == json.loads(schema)
        assert fresh.get_latest_version("survivor-value").schema_id == schema_id
    finally:
        down = kappa("down", env=env)
    assert down.code == 0, down.err
    assert set(down.out.removeprefix("stopped: ").strip().split(", ")) == {"kafka-1", "registry"}
    assert stack_processes(stack_dir) == []
    for port in (21092, 21192, 21081, 21082):
        assert not port_in_use(port), f"port {port} still bound after `kappa down`"
    assert (stack_dir / "kafka-1" / "data").is_dir()  # down keeps data; --purge deletes it

    for folder in derived.values():  # state a job left behind, which refers to the stack's topics and offsets
        (folder / "raw_clicks" / "v1").mkdir(parents=True)
    purge = kappa("down", "--purge", env=env)
    assert purge.code == 0, purge.err
    assert not stack_dir.exists()
    assert [folder for folder in derived.values() if folder.exists()] == []
    assert purge.out.splitlines()[1:] == [f"deleted {folder}" for folder in (stack_dir, *derived.values())]


@pytest.mark.slow
def test_three_broker_cluster_outlives_a_sigkilled_broker_and_loses_nothing(tmp_path: Path) -> None:
    """`kappa up --brokers 3`: replication 3, min.insync.replicas 2. A continuous job and producers (acks=all) go on
    while one broker is gone (SIGKILL) for two minutes; when it is back, every click is in Delta exactly once."""
    stack_dir = tmp_path / "cluster"
    env = {
        "KAPPA_KAFKA_PORT": "22092", "KAPPA_CONTROLLER_PORT": "22192", "KAPPA_REGISTRY_PORT": "22081",
        "KAPPA_STACK_DIR": str(stack_dir),
    }  # fmt: skip
    settings = load_settings(
        kafka_port=22092, controller_port=22192, registry_port=22081, brokers=3, stack_dir=stack_dir,
        spark_shuffle_partitions=2, spark_driver_java_options=SHORT_RUN_JVM,
    )  # fmt: skip
    job: subprocess.Popen[str] | None = None
    output: list[str] = []  # read as it comes: a full pipe would block the job
    try:
        up = kappa("up", "--brokers", "3", env=env)
        assert up.code == 0, up.err
        admin = AdminClient({"bootstrap.servers": settings.bootstrap})
        cluster = admin.describe_cluster().result(timeout=15)
        assert sorted(n.port for n in cluster.nodes) == [22092, 22093, 22094]

        pipeline = deploy_copy(settings, tmp_path / "pipeline", "three_")
        source = Topic("three_clicks", 4, Cleanup.COMPACT, value_schema="clicks.avsc")
        state = describe(admin, [source])[0]
        assert (state.replication_factor, state.configs["min.insync.replicas"]) == (3, "2")
        table = tmp_path / "pipeline" / "delta" / "raw_clicks" / "v1"
        before = produce_clicks(settings, source, 600, first=0)
        job = pipeline.popen("jobs", "run", "raw_clicks")
        assert job.stdout is not None
        threading.Thread(target=lambda: output.extend(job.stdout), daemon=True).start()  # type: ignore[union-attr, arg-type]
        wait_until(lambda: len(event_ids(table)) == len(before), 240, "the first clicks in Delta", log=output)

        stack = LocalStack(settings)
        [victim] = [c for c in stack.status() if c.name == "kafka-3"]
        os.kill(victim.pid, signal.SIGKILL)
        back_at = time.monotonic() + OUTAGE_S
        during = produce_clicks(settings, source, 400, first=600)  # acks=all: two in-sync replicas are enough
        wait_until(lambda: len(event_ids(table)) >= 1000, OUTAGE_S, "clicks in Delta with a broker gone", log=output)
        while time.monotonic() < back_at:  # the rest of the outage itself, not a wait for a condition
            assert job.poll() is None, "the job exited with a broker gone:\n" + "".join(output[-40:])
            time.sleep(5)
        stack.stop_component("kafka-3")  # forget the killed process, then start the broker on its data again
        stack.start_component("kafka-3")

        after = produce_clicks(settings, source, 400, first=1000)
        wait_until(lambda: len(event_ids(table)) >= 1400, 300, "the clicks after the broker's return", log=output)
        job.send_signal(signal.SIGTERM)
        job.wait(timeout=120)
    finally:
        if job is not None and job.poll() is None:
            job.kill()
        down = kappa("down", "--purge", env=env)
    out = "".join(output)
    assert job.returncode == 0, out[-3000:]
    assert sorted(event_ids(table)) == sorted(before | during | after)  # nothing lost, nothing twice
    assert "Traceback" not in out
    assert "stopped by signal" in out
    assert down.code == 0, down.err
    assert stack_processes(stack_dir) == []
    for port in (22092, 22093, 22094, 22192, 22193, 22194, 22081, 22082):
        assert not port_in_use(port)
