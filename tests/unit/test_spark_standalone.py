"""The stack's Spark standalone cluster: the command lines, ports and state the stack starts it with."""

import json
from pathlib import Path

import pytest

from kappa.core.settings import load_settings
from kappa.stack.local import Component, StackState
from kappa.stack.spark_standalone import (
    MASTER,
    WORKER_PROPERTIES,
    is_spark,
    master_argv,
    master_url,
    worker_argv,
    worker_env,
    worker_name,
    worker_ports,
)


def option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_the_master_and_each_worker_listen_on_loopback_on_ports_of_their_own(tmp_path: Path) -> None:
    settings = load_settings(state_dir=tmp_path, spark_workers=2, spark_master_port=27077, spark_master_ui_port=28180)
    master = master_argv(settings, "/jdk/bin/java", "-Dkappa.component=spark-master@x")
    assert master[:2] == ["/jdk/bin/java", "-Dkappa.component=spark-master@x"]  # the marker `down` checks
    assert "org.apache.spark.deploy.master.Master" in master
    assert (option(master, "--host"), option(master, "--port"), option(master, "--webui-port")) == (
        "127.0.0.1", "27077", "28180",
    )  # fmt: skip
    assert master_url(settings) == "spark://127.0.0.1:27077"
    seen = {27077, 28180}
    for index in (1, 2):
        ports = worker_ports(settings, index)
        assert ports == {"rpc": 27077 + index, "ui": 28180 + index}
        assert not seen & set(ports.values())
        seen |= set(ports.values())


def test_a_worker_offers_its_declared_cores_and_memory_and_keeps_its_folders(tmp_path: Path) -> None:
    settings = load_settings(state_dir=tmp_path, spark_worker_cores=3, spark_worker_memory="5g",
                             spark_daemon_heap="128m", spark_master_port=27077)  # fmt: skip
    home = tmp_path / "spark-worker-1"
    home.mkdir()
    argv = worker_argv(settings, "/jdk/bin/java", "-Dkappa.component=spark-worker-1@x", 1, home)
    assert "org.apache.spark.deploy.worker.Worker" in argv
    assert (option(argv, "--cores"), option(argv, "--memory")) == ("3", "5g")
    assert option(argv, "--work-dir") == str(home / "work")
    assert argv[-1] == "spark://127.0.0.1:27077"  # the master it joins
    assert "-Xmx128m" in argv  # the daemon's own heap, not its executors'
    assert option(argv, "-cp").endswith("/jars/*")  # pyspark's distribution: nothing else installed
    written = dict(line.split("=", 1) for line in Path(option(argv, "--properties-file")).read_text().splitlines())
    assert written == WORKER_PROPERTIES
    # Weeks of applications: their folders go a day after they end, each executor's log rolls at 16 MB.
    assert written["spark.worker.cleanup.enabled"] == "true"
    assert int(written["spark.executor.logs.rolling.maxSize"]) == 16 * 1024 * 1024
    env = worker_env("/opt/jdk-17/bin/java", home)
    assert env["JAVA_HOME"] == str(Path("/opt/jdk-17").resolve())  # executors start with $JAVA_HOME/bin/java
    assert env["SPARK_LOCAL_DIRS"] == str(home / "local")  # shuffle and spills in the stack folder
    assert env["SPARK_LOCAL_IP"] == "127.0.0.1"
    assert env["SPARK_SCALA_VERSION"] == "2.13"  # what Spark 4's launcher needs to find pyspark's jars/


def test_spark_components_are_told_apart_from_brokers_and_services() -> None:
    assert is_spark(MASTER)
    assert is_spark(worker_name(2))
    assert not any(is_spark(name) for name in ("kafka-1", "registry", "prometheus"))


@pytest.mark.parametrize("workers", [None, 2])
def test_a_state_file_of_before_the_cluster_still_loads(workers: int | None) -> None:
    state = StackState("id", 1, {"kafka-1": Component("kafka-1", 1, "-Dm", "log", {"kafka": 9092}, "127.0.0.1:9092")})
    raw = json.loads(state.to_json())
    if workers is None:
        del raw["spark_workers"]  # written before `--spark-workers` existed
    else:
        raw["spark_workers"] = workers
    assert StackState.from_json(json.dumps(raw)).spark_workers == (workers or 0)
