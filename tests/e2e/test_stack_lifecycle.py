"""`kappa up | status | down` on a stack of the test's own, and schemas surviving a registry restart."""

import json
import socket
from pathlib import Path

import psutil
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from kappa.core.settings import load_settings
from kappa.stack import LocalStack
from kappa.stack.process import port_in_use
from tests.e2e.stackctl import kappa, stack_processes

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
