"""A job's output kinds, each in one place: a Kafka topic (`Topic`, declared in kappa.contracts) or a Delta table
(`DeltaTable`, declared here).

`output_of(job.output)` gives the declared output's `Output`: what the runtime, the replay protocol, the CLI and
Dagster ask of an output whatever its kind (its alias name, physical location per version, whether it exists, how
it is read as of a moment, its keys, its expectation suite, how it is deleted). Nothing outside this module asks
which kind an output is; a topic-only or table-only concern reads the typed accessor (`topic`, `delta_table`),
which is None for the other kinds.

A new output kind (an Iceberg table, say) is its declaration, a subclass of `Output` and one entry in `_KINDS`, all
here, and one more member of `OutputDeclaration` and of `JobSpec.output`'s type (spelled out there for the job
API's page).
"""

from __future__ import annotations

import shutil
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from kappa.contracts.dead_letter_format import late_topic
from kappa.contracts.topic_declarations import Topic, late_events_of, side_topic_declaration
from kappa.core.settings import KappaSettings
from kappa.kafka.aliases import DELTA_KIND, TOPIC_KIND
from kappa.kafka.clients import admin_client
from kappa.kafka.topic_admin import delete

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


class TableWrite(StrEnum):
    """How the runtime writes a `TablePlan`'s batch into its Delta table, exactly once per batch id."""

    APPEND = "append"  # each batch's rows are added
    UPSERT = "upsert"  # each batch's rows replace the table's rows of the same `keys`, or are inserted
    ACCUMULATE = "accumulate"  # each batch holds partial sums per `keys`: the `summed` columns are added up


@dataclass(frozen=True)
class DeltaTable:
    """A Delta table output; its physical path is versioned: `<delta_root>/<name>/v<version>`."""

    name: str  # the table's name: its folder under KAPPA_DELTA_ROOT and its expectation suite's dataset name
    doc: str = ""  # what a row of the table is, in one sentence (shown in Dagster)
    keys: tuple[str, ...] = ()  # the columns that identify a row (what a reconciliation joins versions on)
    write: TableWrite = TableWrite.APPEND  # how a TablePlan's batches are written (a JobPlan writes its own way)
    summed: tuple[str, ...] = ()  # ACCUMULATE: the columns that add up across batches
    # UPSERT: a batch row whose boolean `deleted` column is true deletes its key (the column is not stored)
    deletes: bool = False

    def __post_init__(self) -> None:
        if self.write is not TableWrite.APPEND and not self.keys:
            raise ValueError(f"table {self.name}: {self.write} needs the keys that identify a row (keys=...)")
        if (self.write is TableWrite.ACCUMULATE) != bool(self.summed):
            raise ValueError(f"table {self.name}: the columns that add up (summed=...) go with ACCUMULATE, only")
        if self.deletes and self.write is not TableWrite.UPSERT:
            raise ValueError(f"table {self.name}: rows that delete their key (deletes=True) go with UPSERT, only")

    def path(self, settings: KappaSettings, version: int) -> str:
        """The physical path of one job version's table (a job calls `ctx.output_path()` instead)."""
        return f"{settings.delta_root}/{self.name}/v{version}"


OutputDeclaration = Topic | DeltaTable  # what a job may declare as its output: one per kind in `_KINDS`

Declared = TypeVar("Declared", Topic, DeltaTable)


def table_dataset(table: str) -> str:
    """A Delta table's name in the alias registry: `delta:<table>` (a table and a topic may share a name)."""
    return f"delta:{table}"


class Output(ABC, Generic[Declared]):
    """One declared output, as everything beyond the job sees it. A version's output is physical and its own
    (`location`); readers find the live one by `dataset` in the alias registry."""

    kind: ClassVar[str]  # what a message calls the kind: "topic", "Delta table"
    alias_kind: ClassVar[str]  # the kind the alias registry records for a version (kappa.kafka.aliases)
    storage: ClassVar[str]  # where it is kept: its Dagster asset key's first part, and its Dagster kind

    def __init__(self, declared: Declared) -> None:
        self.declared: Declared = declared  # as the job declares it (or as a version binds it)

    @property
    def name(self) -> str:
        """The declared name (a topic's, bound: its physical name)."""
        return self.declared.name

    @property
    def doc(self) -> str:
        """What a record or row of it is, in one sentence."""
        return self.declared.doc

    @property
    def asset_path(self) -> tuple[str, ...]:
        """Its Dagster asset key: `("kafka", <topic>)`, `("delta", <table>)`."""
        return (self.storage, self.name)

    @property
    def topic(self) -> Topic | None:
        """The topic it is, which other jobs may read; None for an output that is no topic."""
        return None

    @property
    def delta_table(self) -> DeltaTable | None:
        """The Delta table it is; None for an output that is no Delta table."""
        return None

    @property
    @abstractmethod
    def label(self) -> str:
        """How a listing names it: `topic:<name>`, `delta:<name>`."""

    @property
    @abstractmethod
    def dataset(self) -> str:
        """Its name in the alias registry: what readers follow to the live version."""

    @property
    @abstractmethod
    def suite(self) -> str:
        """The dataset name of its expectation suite (kappa.contracts.expectations)."""

    @abstractmethod
    def bound(self, names: Mapping[str, str]) -> OutputDeclaration:
        """The declaration under other physical names (declared name -> physical name): a test's own topics."""

    @abstractmethod
    def versioned(self, version: int) -> OutputDeclaration:
        """The declaration as one job version writes it."""

    @abstractmethod
    def location(self, settings: KappaSettings, version: int) -> str:
        """Where one version's output is: its physical topic, its table's path."""

    @abstractmethod
    def metadata(self, version: int) -> dict[str, Any]:
        """What a UI shows of one version's output, from the declaration alone (no settings)."""

    @abstractmethod
    def late_events(self, version: int) -> Topic:
        """The side topic of one version's late records: the input records its rule set aside as beyond its
        lateness contract. Asked of the version's own output (`versioned(version)`, or a job bound to it): a
        topic's is named after the bound topic, which holds the version already; a table's after the version."""

    @abstractmethod
    def topics(self, version: int) -> list[Topic]:
        """The topics one version writes for it (a topic output itself, and the `.late` side topic): what
        prepare creates and retire deletes."""

    @abstractmethod
    def exists(self, settings: KappaSettings, version: int) -> bool:
        """Whether one version's output is there (a retired version's is not)."""

    @abstractmethod
    def read(
        self, spark: SparkSession, settings: KappaSettings, version: int, *, as_of_ms: int | None = None
    ) -> DataFrame:
        """One version's output as readers see it; with `as_of_ms`, as it was then."""

    @abstractmethod
    def row_keys(self, columns: Sequence[str]) -> list[str]:
        """The columns that identify a row of what `read` returns (with these `columns`): what a reconciliation
        of two versions joins on."""

    @abstractmethod
    def delete(self, settings: KappaSettings, version: int) -> list[str]:
        """Delete one version's output (a retire); returns what was deleted."""


class TopicOutput(Output[Topic]):
    """A Kafka topic: a version writes `<dataset>.v<version>` and its `.late` side topic."""

    kind = "topic"
    alias_kind = TOPIC_KIND
    storage = "kafka"

    @property
    def topic(self) -> Topic:
        return self.declared

    @property
    def label(self) -> str:
        return f"topic:{self.name}"

    @property
    def dataset(self) -> str:
        return self.declared.dataset_name  # also for a version's bound topic

    @property
    def suite(self) -> str:
        return self.declared.dataset_name

    def bound(self, names: Mapping[str, str]) -> Topic:
        return replace(self.declared, name=names.get(self.name, self.name))

    def versioned(self, version: int) -> Topic:
        return self.declared.versioned(version)

    def location(self, settings: KappaSettings, version: int) -> str:
        return self.versioned(version).name

    def metadata(self, version: int) -> dict[str, Any]:
        return {"topic": self.name}

    def late_events(self, version: int) -> Topic:
        return late_events_of(self.declared)  # beside the version's topic: bound, its name holds the version

    def topics(self, version: int) -> list[Topic]:
        return [self.declared, self.late_events(version)]

    def exists(self, settings: KappaSettings, version: int) -> bool:
        return self.location(settings, version) in admin_client(settings).list_topics(timeout=15).topics

    def read(
        self, spark: SparkSession, settings: KappaSettings, version: int, *, as_of_ms: int | None = None
    ) -> DataFrame:
        """The latest value per key; with `as_of_ms`, of the records written until then."""
        # Lazy: imports pyspark, only where a Spark session runs (this module is imported without one).
        from kappa.spark.compacted import latest_per_key

        return latest_per_key(spark, settings, self.versioned(version), written_until_ms=as_of_ms).drop(
            "kafka_partition", "kafka_offset", "kafka_timestamp"
        )

    def row_keys(self, columns: Sequence[str]) -> list[str]:
        return ["key"]  # the Kafka key

    def delete(self, settings: KappaSettings, version: int) -> list[str]:
        return delete(admin_client(settings), TopicOutput(self.versioned(version)).topics(version))


class DeltaOutput(Output[DeltaTable]):
    """A Delta table: a version writes `<delta_root>/<table>/v<version>`."""

    kind = "Delta table"
    alias_kind = DELTA_KIND
    storage = "delta"

    @property
    def delta_table(self) -> DeltaTable:
        return self.declared

    @property
    def label(self) -> str:
        return table_dataset(self.name)

    @property
    def dataset(self) -> str:
        return table_dataset(self.name)

    @property
    def suite(self) -> str:
        return self.name  # a table's suite is its name

    def bound(self, names: Mapping[str, str]) -> DeltaTable:
        return self.declared  # its versions differ by path, not by name

    def versioned(self, version: int) -> DeltaTable:
        return self.declared

    def location(self, settings: KappaSettings, version: int) -> str:
        return self.declared.path(settings, version)

    def metadata(self, version: int) -> dict[str, Any]:
        return {"table": self.name, "path": f"<delta_root>/{self.name}/v{version}"}

    def late_events(self, version: int) -> Topic:
        # A table's name may be a topic's too (`table_dataset`): `delta.` keeps their side topics apart.
        return side_topic_declaration(
            late_topic(f"delta.{self.name}.v{version}"),
            f"Input records the job writing Delta table {self.name} v{version} set aside as beyond its lateness "
            "contract, counted.",
        )

    def topics(self, version: int) -> list[Topic]:
        return [self.late_events(version)]

    def exists(self, settings: KappaSettings, version: int) -> bool:
        return Path(self.location(settings, version).removeprefix("file:"), "_delta_log").is_dir()

    def read(
        self, spark: SparkSession, settings: KappaSettings, version: int, *, as_of_ms: int | None = None
    ) -> DataFrame:
        """The table; with `as_of_ms`, its last commit by then."""
        path = self.location(settings, version)
        reader = spark.read.format("delta")
        if as_of_ms is not None and (commit := commit_as_of(spark, path, as_of_ms)) is not None:
            reader = reader.option("versionAsOf", commit)
        return reader.load(path)

    def row_keys(self, columns: Sequence[str]) -> list[str]:
        return list(self.declared.keys) or list(columns)  # a view's declared keys, else every column

    def delete(self, settings: KappaSettings, version: int) -> list[str]:
        # Lazy: imports pyspark, only where a Spark session runs (this module is imported without one).
        from kappa.spark.delta_merge import forget_table

        deleted = delete(admin_client(settings), self.topics(version))
        table = self.location(settings, version)
        if Path(table.removeprefix("file:")).exists():
            shutil.rmtree(table.removeprefix("file:"))
            forget_table(table)
            deleted.append(table)
        return deleted


def commit_as_of(spark: SparkSession, path: str, at_ms: int) -> int | None:
    """The table's latest version committed by `at_ms` (Delta's timestampAsOf refuses a time after the last
    commit, so the history decides); None if it had none then."""
    # Lazy: pyspark, only where a Spark session runs (this module is imported without one).
    from delta.tables import DeltaTable as Delta
    from pyspark.sql import functions as F

    history = Delta.forPath(spark, path).history().where(F.col("timestamp") <= F.timestamp_millis(F.lit(at_ms)))
    found = history.agg(F.max("version")).first()
    return None if found is None or found[0] is None else int(found[0])


# Each declared kind, and the Output that implements it.
_KINDS: dict[type, type[Output[Any]]] = {Topic: TopicOutput, DeltaTable: DeltaOutput}


def output_kind(declared: type) -> type[Output[Any]]:
    """The Output that implements a kind of declaration (e.g. `output_kind(DeltaTable).kind`)."""
    if declared not in _KINDS:
        kinds = ", ".join(kind.__name__ for kind in _KINDS)
        raise TypeError(f"{declared.__name__} is no output kind: a job writes one of {kinds}")
    return _KINDS[declared]


def output_of(declared: OutputDeclaration) -> Output[Any]:
    """The declared output (`job.output`) as an Output of its kind."""
    return output_kind(type(declared))(declared)
