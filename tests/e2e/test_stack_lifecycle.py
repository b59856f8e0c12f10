"""`kappa up | status | down` on a stack of the test's own, and schemas surviving a registry restart."""

import json
from pathlib import Path

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from kappa.settings import load_settings
from kappa.stack import LocalStack
from kappa.stack.process import port_in_use
from tests.e2e.stackctl import kappa, stack_processes
from tests.waiting import wait_until

PORTS = {"KAPPA_KAFKA_PORT": "21092", "KAPPA_CONTROLLER_PORT": "21192", "KAPPA_REGISTRY_PORT": "21081"}


def test_up_status_restart_down_leaves_nothing_behind(tmp_path: Path) -> None:
    stack_dir = tmp_path / "stack"
    env = {**PORTS, "KAPPA_STACK_DIR": str(stack_dir)}
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
        LocalStack(settings).restart("registry")
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

    purge = kappa("down", "--purge", env=env)
    assert purge.code == 0
    assert not stack_dir.exists()


def test_three_broker_kraft_cluster(tmp_path: Path) -> None:
    from confluent_kafka.admin import AdminClient

    from kappa.topics import Cleanup, Topic, apply, describe

    stack_dir = tmp_path / "cluster"
    env = {"KAPPA_KAFKA_PORT": "22092", "KAPPA_CONTROLLER_PORT": "22192", "KAPPA_STACK_DIR": str(stack_dir)}
    try:
        up = kappa("up", "--brokers", "3", "--no-registry", env=env)
        assert up.code == 0, up.err
        admin = AdminClient({"bootstrap.servers": "127.0.0.1:22092,127.0.0.1:22093,127.0.0.1:22094"})
        cluster = admin.describe_cluster().result(timeout=15)
        assert sorted(n.port for n in cluster.nodes) == [22092, 22093, 22094]
        topic = Topic("replicated", partitions=3, cleanup=Cleanup.COMPACT)
        apply(admin, [topic])
        # apply returns once the broker it asks shows the topic; another broker's metadata may lag a moment.
        wait_until(lambda: describe(admin, [topic])[0].partitions is not None, timeout_s=30,
                   what="every broker's metadata shows the new topic")  # fmt: skip
        state = describe(admin, [topic])[0]
        assert state.replication_factor == 3
        assert state.configs["min.insync.replicas"] == "2"
    finally:
        down = kappa("down", "--purge", env=env)
    assert down.code == 0, down.err
    assert stack_processes(stack_dir) == []
    for port in (22092, 22093, 22094, 22192, 22193, 22194):
        assert not port_in_use(port)
