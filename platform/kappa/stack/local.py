"""`kappa up | down | status`: the embedded stack on loopback, one folder of state, processes known by pid.

Layout of the stack folder (KAPPA_STACK_DIR, default <state>/stack):

    stack.json              what runs: cluster id, nodes, and per component its pid, ports, log, marker
    kafka-<i>/server.properties, kafka-<i>/data/, kafka-<i>/kafka.log
    registry/registry.log
    prometheus/prometheus.yml, prometheus/data/, prometheus/prometheus.log   (`kappa up --monitoring`)
    spark-master/spark-master.log                                           (`kappa up --spark-workers N`)
    spark-worker-<i>/spark-worker.log, spark-worker-<i>/work/ (each application's executors), local/ (scratch)

A component's JVM carries `-Dkappa.component=<name>@<stack folder>` on its command line, so `down` never
signals a process that merely reuses an old pid; Prometheus carries its data folder, inside the stack folder.
"""

from __future__ import annotations

import base64
import contextlib
import json
import shutil
import subprocess
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
from confluent_kafka import KafkaException
from confluent_kafka.admin import AclBinding, AdminClient

from kappa.core.errors import StackError
from kappa.core.security import Credential, librdkafka_config, registry_login
from kappa.core.settings import KappaSettings, Security, project_root
from kappa.stack import process, spark_standalone
from kappa.stack.artifacts import ensure_jvm_artifacts
from kappa.stack.java import spark_java, stack_java
from kappa.stack.prometheus import prometheus_argv, prometheus_healthy
from kappa.stack.secured_kafka import (
    REGISTRY_PASSWORD_VARIABLE,
    StackSecrets,
    ensure_stack_secrets,
    registry_acls,
    registry_auth_file,
    registry_kafka_options,
    scram_format_arguments,
    secured_properties,
    write_argument_file,
)
from kappa.stack.spark_standalone import MASTER, is_spark, worker_name

STATE_FILE = "stack.json"
REGISTRY = "registry"
PROMETHEUS = "prometheus"
SERVICES = (REGISTRY, PROMETHEUS)  # stopped first: they are the brokers' clients


@dataclass
class Component:
    name: str
    pid: int
    marker: str
    log: str
    ports: dict[str, int]
    address: str
    started_at: float = field(default_factory=time.time)


@dataclass(frozen=True)
class ComponentStatus:
    name: str
    address: str
    pid: int | None
    running: bool
    healthy: bool
    log: str


@dataclass
class StackState:
    cluster_id: str
    brokers: int
    components: dict[str, Component] = field(default_factory=dict)
    spark_workers: int = 0
    security: str = Security.PLAINTEXT.value  # what its brokers were formatted for (KappaSettings.security)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> StackState:
        raw = json.loads(text)
        comps = {name: Component(**c) for name, c in raw["components"].items()}
        return cls(
            cluster_id=str(raw["cluster_id"]),
            brokers=int(raw["brokers"]),
            components=comps,
            spark_workers=int(raw.get("spark_workers", 0)),  # a state file of before the Spark cluster
            security=str(raw.get("security", Security.PLAINTEXT.value)),
        )


def _node_name(index: int) -> str:
    return f"kafka-{index}"


def _is_kafka_node(name: str) -> bool:
    return name.startswith("kafka-")


class LocalStack:
    """The local Kafka (KRaft) cluster and Apicurio Registry described by the settings."""

    def __init__(self, settings: KappaSettings) -> None:
        self.settings = settings
        self.dir = settings.stack_path
        self.state_file = self.dir / STATE_FILE

    # ---------------------------------------------------------------- state -------------------------

    def _load_state(self) -> StackState | None:
        if not self.state_file.exists():
            return None
        try:
            return StackState.from_json(self.state_file.read_text())
        except (ValueError, KeyError, TypeError) as exc:
            raise StackError(
                f"the stack's state folder is corrupt: {self.state_file} cannot be read ({exc}); "
                "stop any leftover processes and run `kappa down --purge` to start afresh"
            ) from None

    def _save_state(self, state: StackState) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(state.to_json())
        tmp.replace(self.state_file)  # atomic: a crash never leaves half a file

    def _marker(self, name: str) -> str:
        return f"-Dkappa.component={name}@{self.dir}"

    # ---------------------------------------------------------------- up ----------------------------

    def up(
        self,
        brokers: int | None = None,
        with_registry: bool = True,
        monitoring: bool = False,
        spark_workers: int | None = None,
    ) -> dict[str, float]:
        """Start what is not running and wait until healthy. Return seconds to healthy per component."""
        brokers = brokers or self.settings.brokers
        spark_workers = self.settings.spark_workers if spark_workers is None else spark_workers
        ensure_jvm_artifacts(self.settings)
        java = stack_java(self.settings.stack_java)
        state = self._load_state()
        if state is None:
            if any(self.dir.glob("kafka-*/data")):
                raise StackError(
                    f"the stack's state folder is corrupt: {self.dir} holds broker data but no {STATE_FILE}; "
                    "run `kappa down --purge` to start afresh"
                )
            state = StackState(cluster_id=_new_cluster_id(), brokers=brokers, spark_workers=spark_workers,
                               security=str(self.settings.security))  # fmt: skip
        elif state.brokers != brokers:
            raise StackError(
                f"{self.dir} holds a {state.brokers}-node cluster, not {brokers}: "
                "`kappa down --purge` first, or use another KAPPA_STACK_DIR"
            )
        elif state.security != self.settings.security:
            raise StackError(
                f"{self.dir} holds a {state.security} stack, not {self.settings.security}: "
                "`kappa down --purge` first, or use another KAPPA_STACK_DIR"
            )
        timings: dict[str, float] = {}
        started: list[Component] = []
        try:
            nodes = [self._start_kafka_node(state, i, java, started) for i in range(1, brokers + 1)]
            if any(n is not None for n in nodes):
                timings["kafka"] = self._wait_kafka(state)
                if self.settings.secured:
                    self._grant(registry_acls())
            if with_registry and self._start_registry(state, java, started) is not None:
                timings[REGISTRY] = self._wait_registry(state.components[REGISTRY])
            if monitoring and self._start_prometheus(state, started) is not None:
                timings[PROMETHEUS] = self._wait_prometheus(state.components[PROMETHEUS])
            if spark_workers:
                timings.update(self._start_spark(state, spark_workers, started))
        except BaseException:
            for comp in started:  # leave nothing half-started behind
                process.stop(comp.pid, comp.marker)
                state.components.pop(comp.name, None)
            self._save_state(state)
            raise
        return timings

    def _running(self, state: StackState, name: str) -> bool:
        comp = state.components.get(name)
        return comp is not None and process.is_running(comp.pid, comp.marker)

    def _check_ports(self, ports: dict[str, int], settings_names: dict[str, str]) -> None:
        for role, port in ports.items():
            setting = settings_names[role]
            if process.port_in_use(port):
                raise StackError(
                    f"port {port} ({role}) on 127.0.0.1 is already in use by another process: stop it, "
                    f"or choose another port with {setting}"
                )

    def _start_kafka_node(self, state: StackState, index: int, java: str, started: list[Component]) -> Component | None:
        name = _node_name(index)
        if self._running(state, name):
            return None
        s = self.settings
        client, controller = s.kafka_port + index - 1, s.controller_port + index - 1
        self._check_ports(
            {"Kafka client": client, "KRaft controller": controller},
            {"Kafka client": "KAPPA_KAFKA_PORT", "KRaft controller": "KAPPA_CONTROLLER_PORT"},
        )
        node_dir = self.dir / name
        data = node_dir / "data"
        props = node_dir / "server.properties"
        node_dir.mkdir(parents=True, exist_ok=True)
        secrets = ensure_stack_secrets(s) if s.secured else None
        properties = _server_properties(index, state.brokers, s.kafka_port, s.controller_port, data)
        if secrets is not None:
            properties.update(secured_properties(secrets, client, controller))
        props.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
        classpath = f"{s.jars_path / 'kafka'}/*"
        meta = data / "meta.properties"
        if not meta.exists():
            if data.exists() and any(data.iterdir()):
                raise StackError(
                    f"the stack's state folder is corrupt: {data} has data but no meta.properties; "
                    "run `kappa down --purge`"
                )
            _format_storage(java, classpath, props, state.cluster_id, node_dir, secrets)
        elif f"cluster.id={state.cluster_id}" not in meta.read_text():
            raise StackError(
                f"the stack's state folder is corrupt: {meta} belongs to another cluster than {STATE_FILE} "
                f"({state.cluster_id}); run `kappa down --purge`"
            )
        log = node_dir / "kafka.log"
        marker = self._marker(name)
        argv = [
            java,
            marker,
            "-Xms128m",
            f"-Xmx{s.kafka_heap}",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-Djava.awt.headless=true",
            *_log4j_option(),
            "-cp",
            classpath,
            "kafka.Kafka",
            str(props),
        ]
        pid = process.spawn(argv, marker, log, cwd=node_dir)
        comp = Component(
            name=name,
            pid=pid,
            marker=marker,
            log=str(log),
            ports={"client": client, "controller": controller},
            address=f"127.0.0.1:{client}",
        )
        self._add(state, comp, started)
        return comp

    def _admin_config(self, bootstrap: str) -> dict[str, Any]:
        """The stack's health checks log in as the platform's admin (a secured broker refuses anybody else)."""
        return {**librdkafka_config(self.settings), "bootstrap.servers": bootstrap}

    def _grant(self, acls: list[AclBinding]) -> None:
        admin = AdminClient({**librdkafka_config(self.settings), "log_level": 0})
        for binding, future in admin.create_acls(acls, request_timeout=30).items():
            try:
                future.result(timeout=40)
            except KafkaException as exc:
                raise StackError(f"Kafka refused the ACL {binding}: {exc.args[0].str()}") from None

    def _wait_kafka(self, state: StackState) -> float:
        nodes = [state.components[_node_name(i)] for i in range(1, state.brokers + 1)]
        config = self._admin_config(",".join(n.address for n in nodes))
        deadline_total = 0.0
        for node in nodes:
            deadline_total = max(
                deadline_total,
                process.wait_healthy(
                    f"Kafka broker {node.name}",
                    lambda: _kafka_healthy(config, state.brokers),
                    node.pid,
                    node.marker,
                    Path(node.log),
                    self.settings.startup_timeout_s,
                ),
            )
        return deadline_total

    def _start_registry(self, state: StackState, java: str, started: list[Component]) -> Component | None:
        if self._running(state, REGISTRY):
            return None
        s = self.settings
        management = s.registry_management_port
        assert management is not None
        self._check_ports(
            {"schema registry": s.registry_port, "registry management": management},
            {"schema registry": "KAPPA_REGISTRY_PORT", "registry management": "KAPPA_REGISTRY_MANAGEMENT_PORT"},
        )
        reg_dir = self.dir / REGISTRY
        reg_dir.mkdir(parents=True, exist_ok=True)
        log = reg_dir / "registry.log"
        marker = self._marker(REGISTRY)
        app = s.jars_path / "registry" / "quarkus-run.jar"
        bootstrap = ",".join(f"127.0.0.1:{s.kafka_port + i}" for i in range(state.brokers))
        argv = [
            java,
            marker,
            "-Xms64m",
            f"-Xmx{s.registry_heap}",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",  # starts faster; the registry's load here is light
            "-Dquarkus.http.host=127.0.0.1",
            f"-Dquarkus.http.port={s.registry_port}",
            # Quarkus' management interface (health, metrics) is always on: keep it on loopback, on our port.
            "-Dquarkus.management.host=127.0.0.1",
            f"-Dquarkus.management.port={management}",
            # Schemas live in a Kafka topic (kafkasql), so they survive a registry restart.
            "-Dapicurio.storage.kind=kafkasql",
            f"-Dapicurio.kafkasql.bootstrap.servers={bootstrap}",
            # Its start reads two topics (the journal's last records, then the snapshots) until a poll comes back
            # empty, and each empty poll waits this long: at the default 5 s, 15-20 s of a 24 s start. A poll
            # ended early costs nothing here: this stack takes no snapshots (the registry then reads the whole
            # journal, which it keeps for ever).
            "-Dapicurio.kafkasql.consumer.poll.timeout=1000",
            "-Dquarkus.log.console.json=false",
            *(registry_kafka_options(ensure_stack_secrets(s)) if s.secured else []),
            *([f"-Dquarkus.config.locations={registry_auth_file(s)}"] if s.secured else []),
            "-jar",
            str(app),
        ]
        env = (
            {REGISTRY_PASSWORD_VARIABLE: ensure_stack_secrets(s).registry.password.get_secret_value()}
            if s.secured
            else None
        )
        pid = process.spawn(argv, marker, log, cwd=reg_dir, env=env)
        comp = Component(
            name=REGISTRY,
            pid=pid,
            marker=marker,
            log=str(log),
            ports={"http": s.registry_port, "management": management},
            address=f"http://127.0.0.1:{s.registry_port}/apis/ccompat/v7",
        )
        return self._add(state, comp, started)

    def _wait_registry(self, comp: Component) -> float:
        return process.wait_healthy(
            "schema registry",
            lambda: _registry_healthy(comp.address, registry_login(self.settings)),
            comp.pid,
            comp.marker,
            Path(comp.log),
            self.settings.startup_timeout_s,
        )

    def _start_prometheus(self, state: StackState, started: list[Component]) -> Component | None:
        if self._running(state, PROMETHEUS):
            return None
        s = self.settings
        self._check_ports({"prometheus": s.prometheus_port}, {"prometheus": "KAPPA_PROMETHEUS_PORT"})
        home = self.dir / PROMETHEUS
        home.mkdir(parents=True, exist_ok=True)
        argv, marker = prometheus_argv(s, home)
        log = home / "prometheus.log"
        pid = process.spawn(argv, marker, log, cwd=home)
        comp = Component(PROMETHEUS, pid, marker, str(log), {"http": s.prometheus_port},
                         f"http://127.0.0.1:{s.prometheus_port}")  # fmt: skip
        return self._add(state, comp, started)

    def _start_spark(self, state: StackState, workers: int, started: list[Component]) -> dict[str, float]:
        """The master, then workers 1..`workers` that do not run; seconds until each is healthy (a worker: once
        the master holds it alive)."""
        java = spark_java()
        timings = {}
        state.spark_workers = max(state.spark_workers, workers)
        if not self._running(state, MASTER):
            timings[MASTER] = self._wait_spark_master(self._start_spark_master(state, java, started))
        for index in range(1, workers + 1):
            if not self._running(state, worker_name(index)):
                timings[worker_name(index)] = self._wait_spark_worker(
                    self._start_spark_worker(state, index, java, started), index
                )
        return timings

    def _start_spark_master(self, state: StackState, java: str, started: list[Component]) -> Component:
        s = self.settings
        self._check_ports(
            {"Spark master": s.spark_master_port, "Spark master UI": s.spark_master_ui_port},
            {"Spark master": "KAPPA_SPARK_MASTER_PORT", "Spark master UI": "KAPPA_SPARK_MASTER_UI_PORT"},
        )
        home = self.dir / MASTER
        home.mkdir(parents=True, exist_ok=True)
        marker = self._marker(MASTER)
        log = home / f"{MASTER}.log"
        argv = spark_standalone.master_argv(s, java, marker)
        pid = process.spawn(argv, marker, log, cwd=home, env={"SPARK_LOCAL_IP": "127.0.0.1"})
        ui = spark_standalone.master_ui(s)
        comp = Component(MASTER, pid, marker, str(log), {"rpc": s.spark_master_port, "ui": s.spark_master_ui_port},
                         f"{spark_standalone.master_url(s)}, UI {ui}")  # fmt: skip
        return self._add(state, comp, started)

    def _start_spark_worker(self, state: StackState, index: int, java: str, started: list[Component]) -> Component:
        s = self.settings
        name = worker_name(index)
        ports = spark_standalone.worker_ports(s, index)
        self._check_ports(
            {f"{name}": ports["rpc"], f"{name} UI": ports["ui"]},
            {f"{name}": "KAPPA_SPARK_MASTER_PORT (+i)", f"{name} UI": "KAPPA_SPARK_MASTER_UI_PORT (+i)"},
        )
        home = self.dir / name
        (home / "work").mkdir(parents=True, exist_ok=True)
        marker = self._marker(name)
        log = home / "spark-worker.log"
        argv = spark_standalone.worker_argv(s, java, marker, index, home)
        pid = process.spawn(argv, marker, log, cwd=home, env=spark_standalone.worker_env(java, home))
        address = f"http://127.0.0.1:{ports['ui']} ({s.spark_worker_cores} cores, {s.spark_worker_memory})"
        return self._add(state, Component(name, pid, marker, str(log), ports, address), started)

    def _wait_spark_master(self, comp: Component) -> float:
        ui = spark_standalone.master_ui(self.settings)
        return process.wait_healthy(
            "Spark master", lambda: spark_standalone.master_alive(ui),
            comp.pid, comp.marker, Path(comp.log), self.settings.startup_timeout_s,
        )  # fmt: skip

    def _wait_spark_worker(self, comp: Component, index: int) -> float:
        ui = spark_standalone.master_ui(self.settings)
        port = comp.ports["rpc"]
        return process.wait_healthy(
            f"Spark worker {index}", lambda: port in spark_standalone.alive_workers(ui),
            comp.pid, comp.marker, Path(comp.log), self.settings.startup_timeout_s,
        )  # fmt: skip

    def _add(self, state: StackState, comp: Component, started: list[Component]) -> Component:
        """A component just spawned: in the state file at once, so that `down` finds it whatever happens next."""
        state.components[comp.name] = comp
        started.append(comp)
        self._save_state(state)
        return comp

    def _wait_prometheus(self, comp: Component) -> float:
        return process.wait_healthy(
            "prometheus", lambda: prometheus_healthy(comp.address), comp.pid, comp.marker, Path(comp.log),
            self.settings.startup_timeout_s,
        )  # fmt: skip

    # ---------------------------------------------------------------- down / restart -----------------

    def down(self, purge: bool = False) -> list[str]:
        """Stop exactly what `up` started (Prometheus and the registry first, then brokers). Return the names
        stopped."""
        state = self._load_state() if not purge else _load_state_leniently(self.state_file)
        stopped: list[str] = []
        if state is not None:
            # Spark's workers before its master (a worker whose master went retries it), the brokers last.
            order = [*SERVICES, *sorted((n for n in state.components if n not in SERVICES), reverse=True)]
            for name in order:
                comp = state.components.get(name)
                if comp is not None and process.stop(comp.pid, comp.marker):
                    stopped.append(name)
                state.components.pop(name, None)
        if purge:
            shutil.rmtree(self.dir, ignore_errors=True)
        elif state is not None:
            self._save_state(state)
        return stopped

    def purge_derived_state(self) -> list[str]:
        """Delete what refers to the purged stack's topics and offsets: the checkpoints (offsets of logs that no
        longer exist), the Delta tables written from them and the deployments' state. Local folders only: a
        remote root (s3://...) is the operator's to delete. Returns what was deleted."""
        deleted = []
        for root in (self.settings.checkpoint_root, self.settings.delta_root, self.settings.deployments_path):
            folder = Path(str(root).removeprefix("file:"))
            if "://" not in str(root) and folder.exists():
                shutil.rmtree(folder)
                deleted.append(str(folder))
        return deleted

    def restart(self, name: str) -> float:
        """Stop one component and start it again (used to prove the registry keeps its schemas)."""
        self.stop_component(name)
        return self.start_component(name)

    def stop_component(self, name: str) -> None:
        """Stop one running component (an outage, for fault tests); `start_component` brings it back."""
        state = self._load_state()
        if state is None or name not in state.components:
            raise StackError(f"{name} is not part of a running stack in {self.dir}")
        comp = state.components.pop(name)
        process.stop(comp.pid, comp.marker)
        self._save_state(state)

    def start_component(self, name: str) -> float:
        """Start one stopped component of the stack again, on its ports and data; seconds until healthy."""
        state = self._load_state()
        if state is None:
            raise StackError(f"no stack in {self.dir}: `kappa up` starts one")
        if name in state.components:
            raise StackError(f"{name} is running already")
        if name == PROMETHEUS:  # no JVM
            started = self._start_prometheus(state, [])
            assert started is not None
            return self._wait_prometheus(started)
        if name == MASTER:
            return self._wait_spark_master(self._start_spark_master(state, spark_java(), []))
        if name.startswith(spark_standalone.WORKER_PREFIX):
            index = name.removeprefix(spark_standalone.WORKER_PREFIX)
            if not index.isdigit() or not 1 <= int(index) <= state.spark_workers:
                raise StackError(f"{name} is not a worker of this stack ({state.spark_workers} Spark worker(s))")
            return self._wait_spark_worker(self._start_spark_worker(state, int(index), spark_java(), []), int(index))
        java = stack_java(self.settings.stack_java)
        if name == REGISTRY:
            new = self._start_registry(state, java, [])
            assert new is not None
            return self._wait_registry(new)
        index = name.removeprefix("kafka-")
        if not index.isdigit() or not 1 <= int(index) <= state.brokers:
            nodes = ", ".join(_node_name(i) for i in range(1, state.brokers + 1))
            raise StackError(
                f"{name} is not a component of this stack ({nodes}, {REGISTRY}, {PROMETHEUS}, {MASTER} or "
                f"{spark_standalone.WORKER_PREFIX}<i>)"
            )
        self._start_kafka_node(state, int(index), java, [])
        return self._wait_kafka(state)

    # ---------------------------------------------------------------- status -------------------------

    def status(self) -> list[ComponentStatus]:
        state = self._load_state()
        if state is None:
            return []
        bootstrap = ",".join(c.address for n, c in sorted(state.components.items()) if _is_kafka_node(n))
        kafka_ok = bool(bootstrap) and _safe(lambda: _kafka_healthy(self._admin_config(bootstrap), state.brokers))
        ui = spark_standalone.master_ui(self.settings)
        workers_alive = _safe_ports(lambda: spark_standalone.alive_workers(ui)) if MASTER in state.components else set()
        login = registry_login(self.settings)
        checks = {REGISTRY: lambda url: _registry_healthy(url, login), PROMETHEUS: prometheus_healthy}
        result = []
        for name, comp in sorted(state.components.items()):
            running = process.is_running(comp.pid, comp.marker)
            check = checks.get(name)
            if name == MASTER:
                healthy = running and _safe(lambda: spark_standalone.master_alive(ui))
            elif is_spark(name):  # a worker: the master holds it alive
                healthy = running and comp.ports["rpc"] in workers_alive
            else:
                healthy = running and (_safe(lambda c=comp, h=check: h(c.address)) if check else kafka_ok)
            result.append(ComponentStatus(name, comp.address, comp.pid, running, healthy, comp.log))
        return result


# -------------------------------------------------------------------- helpers -------------------------


def _new_cluster_id() -> str:
    # Kafka's cluster id: a base64url UUID without padding, as `kafka-storage random-uuid` prints it.
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _load_state_leniently(path: Path) -> StackState | None:
    with contextlib.suppress(Exception):
        return StackState.from_json(path.read_text())
    return None


def _safe(check: Any) -> bool:
    try:
        return bool(check())
    except Exception:
        return False


def _safe_ports(ports: Any) -> set[int]:
    try:
        return set(ports())
    except Exception:
        return set()


def _log4j_option() -> list[str]:
    root = project_root()
    config = root / "infra" / "kafka" / "log4j2.properties" if root else None
    return [f"-Dlog4j2.configurationFile={config}"] if config and config.is_file() else []


def _server_properties(index: int, nodes: int, kafka_port: int, controller_port: int, data: Path) -> dict[str, object]:
    """A combined broker+controller of an n-node KRaft quorum on loopback, with static voters."""
    client, controller = kafka_port + index - 1, controller_port + index - 1
    voters = ",".join(f"{i}@127.0.0.1:{controller_port + i - 1}" for i in range(1, nodes + 1))
    replication = min(3, nodes)
    min_isr = min(2, nodes)
    return {
        "process.roles": "broker,controller",
        "node.id": index,
        "controller.quorum.voters": voters,
        "listeners": f"PLAINTEXT://127.0.0.1:{client},CONTROLLER://127.0.0.1:{controller}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{client}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": data,
        # Topics are declared in code and applied by `kappa topics apply`: a typo must not create a topic.
        "auto.create.topics.enable": "false",
        "num.partitions": 1,
        "default.replication.factor": replication,
        "offsets.topic.replication.factor": replication,
        "transaction.state.log.replication.factor": replication,
        "transaction.state.log.min.isr": min_isr,
        "share.coordinator.state.topic.replication.factor": replication,
        "share.coordinator.state.topic.min.isr": min_isr,
        "group.initial.rebalance.delay.ms": 0,
        # Small machine: fewer threads, and the cleaner looks for work often so compaction is visible soon.
        "num.network.threads": 2,
        "num.io.threads": 4,
        "log.cleaner.threads": 1,
        "log.cleaner.backoff.ms": 5000,
        "log.cleaner.dedupe.buffer.size": 16 * 1024 * 1024,
    }


def _format_command(java: str, classpath: str, props: Path, cluster_id: str) -> list[str]:
    # `--cluster-id=<id>`, one argument: a random id can start with "-" (base64url), which as a separate
    # argument the tool's parser takes for an option ("expected one argument").
    return [java, *_log4j_option(), "-cp", classpath, "kafka.tools.StorageTool", "format",
            f"--cluster-id={cluster_id}", "-c", str(props)]  # fmt: skip


def _format_storage(
    java: str, classpath: str, props: Path, cluster_id: str, node_dir: Path, secrets: StackSecrets | None
) -> None:
    command = _format_command(java, classpath, props, cluster_id)
    log = node_dir / "format.log"
    arguments = node_dir / "format.args"
    if secrets is not None:  # the credentials in a file the tool reads (`@file`), never on a command line
        tool = command.index("format")
        command = [
            *command[:tool],
            f"@{write_argument_file(arguments, [*command[tool:], *scram_format_arguments(secrets)])}",
        ]
    try:
        result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
    finally:
        arguments.unlink(missing_ok=True)
    log.write_text(result.stdout + result.stderr)
    if result.returncode != 0:
        raise StackError(f"formatting KRaft storage failed (exit {result.returncode}); see {log}:\n"
                         f"{process.log_tail(log)}")  # fmt: skip


def _kafka_healthy(config: dict[str, Any], brokers: int) -> bool:
    # log_level 0: while the broker starts, refused connections are expected, not worth a line each.
    admin = AdminClient({**config, "socket.timeout.ms": 2000, "log_level": 0})
    cluster = admin.describe_cluster(request_timeout=3).result(timeout=5)
    return len(cluster.nodes) >= brokers


def _registry_healthy(url: str, login: Credential | None) -> bool:
    """The registry answers a read (as the platform, on a secured stack): its storage is ready."""
    auth = (login.user, login.password.get_secret_value()) if login is not None else None
    return httpx.get(f"{url}/subjects", timeout=3, auth=auth).status_code == 200
