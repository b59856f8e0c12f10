"""The stack's Spark standalone cluster (`kappa up --spark-workers N`): a master and N workers on loopback, run from
the pyspark distribution's own jars (the classes `spark-class` starts: `deploy.master.Master`, `deploy.worker.Worker`)
with Spark's Java, each worker with its cores, memory and work folder in the stack folder.

Ports: the master listens on KAPPA_SPARK_MASTER_PORT and serves its UI on KAPPA_SPARK_MASTER_UI_PORT; worker i
listens on the master's port + i and serves its UI on the UI port + i (Spark's default worker UI port, 8081, is the
registry's here).
"""

from __future__ import annotations

from pathlib import Path

import httpx

from kappa.core.errors import StackError
from kappa.core.settings import KappaSettings

MASTER = "spark-master"
WORKER_PREFIX = "spark-worker-"

# Read by the worker, for every application's executors on it: weeks of running keep bounded logs and work
# folders (a finished application's folder goes a day after it ended).
WORKER_PROPERTIES = {
    "spark.worker.cleanup.enabled": "true",
    "spark.worker.cleanup.interval": "1800",
    "spark.worker.cleanup.appDataTtl": "86400",
    "spark.executor.logs.rolling.strategy": "size",
    "spark.executor.logs.rolling.maxSize": str(16 * 1024 * 1024),
    "spark.executor.logs.rolling.maxRetainedFiles": "4",
}


def worker_name(index: int) -> str:
    return f"{WORKER_PREFIX}{index}"


def is_spark(name: str) -> bool:
    return name == MASTER or name.startswith(WORKER_PREFIX)


def master_url(settings: KappaSettings) -> str:
    """What KAPPA_SPARK_MASTER is set to for the stack's cluster."""
    return f"spark://127.0.0.1:{settings.spark_master_port}"


def master_ui(settings: KappaSettings) -> str:
    return f"http://127.0.0.1:{settings.spark_master_ui_port}"


def worker_ports(settings: KappaSettings, index: int) -> dict[str, int]:
    return {"rpc": settings.spark_master_port + index, "ui": settings.spark_master_ui_port + index}


def spark_home() -> Path:
    """The pyspark distribution: its jars are the cluster's classes, and a worker launches executors from it."""
    import pyspark  # lazy: the stack module is imported where no Spark runs

    return Path(pyspark.__file__).parent


def spark_jars() -> Path:
    """Spark's own jars: a local driver's classpath, and the cluster's daemons' and executors'."""
    return spark_home() / "jars"


def master_argv(settings: KappaSettings, java: str, marker: str) -> list[str]:
    return [
        *_daemon(settings, java, marker),
        "org.apache.spark.deploy.master.Master",
        "--host", "127.0.0.1",
        "--port", str(settings.spark_master_port),
        "--webui-port", str(settings.spark_master_ui_port),
    ]  # fmt: skip


def worker_argv(settings: KappaSettings, java: str, marker: str, index: int, home: Path) -> list[str]:
    """Worker `index`'s command line; `home` is its folder (work folder, properties)."""
    properties = home / "spark-worker.properties"
    properties.write_text("".join(f"{k}={v}\n" for k, v in WORKER_PROPERTIES.items()))
    ports = worker_ports(settings, index)
    return [
        *_daemon(settings, java, marker),
        "org.apache.spark.deploy.worker.Worker",
        "--host", "127.0.0.1",
        "--port", str(ports["rpc"]),
        "--webui-port", str(ports["ui"]),
        "--cores", str(settings.spark_worker_cores),
        "--memory", settings.spark_worker_memory,
        "--work-dir", str(home / "work"),
        "--properties-file", str(properties),
        master_url(settings),
    ]  # fmt: skip


def worker_env(java: str, home: Path) -> dict[str, str]:
    """A worker starts each executor as `$JAVA_HOME/bin/java -cp $SPARK_HOME/jars/* ...`, with its scratch space
    (shuffle, spills) in SPARK_LOCAL_DIRS."""
    return {
        "SPARK_HOME": str(spark_home()),
        # The launcher asks for a build folder unless told the Scala version: pyspark ships no build folders.
        "SPARK_SCALA_VERSION": scala_version(),
        "JAVA_HOME": str(Path(java).resolve().parent.parent),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOCAL_DIRS": str(home / "local"),
    }


def scala_version() -> str:
    """The Scala version Spark's jars are built for, from spark-core's file name (spark-core_2.13-4.2.0.jar)."""
    cores = sorted(spark_jars().glob("spark-core_*.jar"))
    if not cores:
        raise StackError(f"no spark-core jar in {spark_jars()}: the pyspark installation is broken")
    return cores[0].name.removeprefix("spark-core_").split("-", 1)[0]


def _daemon(settings: KappaSettings, java: str, marker: str) -> list[str]:
    return [
        java,
        marker,
        f"-Xmx{settings.spark_daemon_heap}",
        "-XX:+UseSerialGC",  # a daemon's heap is small and its load light
        "-Djava.awt.headless=true",
        "-cp",
        f"{spark_jars()}/*",
    ]


def master_alive(ui: str) -> bool:
    return bool(httpx.get(f"{ui}/json/", timeout=3).json().get("status") == "ALIVE")


def alive_workers(ui: str) -> set[int]:
    """The RPC ports of the workers the master at `ui` holds alive (a worker killed and started again on its port
    shows twice, DEAD then ALIVE)."""
    state = httpx.get(f"{ui}/json/", timeout=3).json()
    if state.get("status") != "ALIVE":
        return set()
    return {int(w["port"]) for w in state.get("workers", []) if w.get("state") == "ALIVE"}
