"""What a job declares (one `JOB = JobSpec(...)` in `jobs/<name>/declaration.py`), and what it gets to run.

The runtime, the replay engine, Dagster and the tests all read the declaration; nothing repeats it. The
checkpoint, query name and progress consumer group derive from the job's name and logic version, so a new
version never reuses an old version's state.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ConfigDict

from kappa.contracts.topic_declarations import Topic
from kappa.core.settings import KappaSettings
from kappa.runtime.outputs import DeltaTable, output_kind, output_of

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from kappa.spark.topic_io import DecodedTopic


@dataclass(frozen=True)
class Starting:
    """Where a job starts reading when it has no checkpoint: `earliest`, `latest` or an event timestamp."""

    offsets: str = "earliest"  # `earliest`, `latest`, or `timestamp` (then `timestamp_ms` says where)
    timestamp_ms: int | None = None  # with `timestamp`: start at the first record of this time or later (epoch ms)

    @classmethod
    def parse(cls, text: str) -> Starting:
        """From `--from`: `earliest`, `latest` or an ISO timestamp with a zone (e.g. 2026-01-01T00:00:00Z)."""
        if text in ("earliest", "latest"):
            return cls(offsets=text)

        try:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"--from expects earliest, latest or an ISO timestamp with zone, got {text!r}") from None
        if moment.tzinfo is None:
            raise ValueError(f"--from {text}: give a time zone (e.g. {text}Z): event times are UTC")
        return cls(offsets="timestamp", timestamp_ms=int(moment.timestamp() * 1000))

    @property
    def text(self) -> str:
        """As `--from` takes it (the inverse of `parse`)."""
        if self.offsets != "timestamp":
            return self.offsets

        return datetime.fromtimestamp((self.timestamp_ms or 0) / 1000, tz=UTC).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class JobPlan:
    """What a job's `plan` returns; the runtime turns it into the job's one streaming query.

    `rows` streams the job's output rows and, in the SIDE columns (kappa.spark.side_outputs), what it sets aside: its
    inputs' dead letters (the decoded `rows` carry them; a per-key rule passes them through) and late records.
    Each micro-batch the runtime sends the side rows to their topics, then calls `write` with the rest.
    """

    rows: DataFrame  # the output rows and the side rows, streamed (usually built from `ctx.read(topic).rows`)
    # (one batch's output rows, batch id) -> the job's output; the same batch id may come again after a crash
    write: Callable[[DataFrame, int], None]


@dataclass(frozen=True)
class TablePlan:
    """What the `plan` of a job writing a Delta table returns when the table's declaration says how it is written
    (`DeltaTable.write`): the job gives its rows and, optionally, what each batch becomes; the runtime writes the
    result exactly once per batch id (Delta's idempotent writes), so the job's folder holds no write code.

    `rows` as in JobPlan. Each micro-batch the runtime sends the side rows to their topics, applies `batch` to the
    rest (a pure DataFrame function: the place to join a lookup read with `ctx.read_lookup`, which is read again
    in every batch, or to pre-aggregate) and writes the result to the table.
    """

    rows: DataFrame  # the output rows and the side rows, streamed (usually built from `ctx.read(topic).rows`)
    batch: Callable[[DataFrame], DataFrame] | None = None  # one batch's rows -> the table's rows (None: as they are)


@dataclass(frozen=True)
class TopicPlan:
    """What the `plan` of a job writing a topic returns: its output and side rows leave in one Kafka write.

    `rows` as in JobPlan, with the output topic's schema fields as columns. The runtime encodes each output row
    under `key` (and `partition`, if given) and writes it with the batch's side rows in one Kafka write, in
    the order `rows` gives them: each batch is read once, with no cache and no second pass. `keep` says which
    output rows are records (default: all); on a row where `delete` holds, the record is a tombstone of its key.
    """

    rows: DataFrame  # the output rows (the output topic's schema fields as columns) and the side rows
    key: Column  # each output record's Kafka key (cast to a string)
    partition: Column | None = None  # each record's partition (`partition_column`); None: by key
    keep: Column | None = None  # which output rows are records (the others are dropped); None: every row
    delete: Column | None = None  # where true, the record is a tombstone of its key (the topic declares deletes)


@dataclass(frozen=True)
class RealTimePlan:
    """What a real-time job's `plan` returns: stateless rows that the runtime writes with Spark's Kafka sink
    alone (no Python between batches), so its live query runs in Spark's real-time mode.

    `rows` has the output topic's schema fields as columns and, in the SIDE columns, its inputs' dead letters
    (the decoded `rows` carry them). The runtime encodes each output row under `key` (and `partition`, if given)
    and sends each side row to its dead-letter topic, all in one Kafka write.
    """

    rows: DataFrame  # the output rows and the side rows, from a stateless, one-stage plan
    key: Column  # each output record's Kafka key (cast to a string)
    partition: Column | None = None  # each record's partition (`partition_column`); None: by key


class NoSettings(BaseModel):
    """The settings of a job without knobs. A job with knobs declares its own pydantic model (`Settings` in its
    declaration module): typed fields with defaults and bounds, so a bad value is refused when the job is
    declared, and the plan reads them typed with `ctx.spec.settings_as(Settings)`."""

    model_config = ConfigDict(frozen=True, extra="forbid")


Knobs = TypeVar("Knobs", bound=BaseModel)

# What each plan kind writes to: a TablePlan a Delta table; a TopicPlan or RealTimePlan a topic (a JobPlan writes
# its own way, to either).
_PLAN_OUTPUTS: dict[type, type] = {TablePlan: DeltaTable, TopicPlan: Topic, RealTimePlan: Topic}


def _declared_plan(plan: Callable[..., object]) -> type | None:
    """The plan kind a `plan` function's return annotation names, or None when it names none we can resolve."""
    try:
        returned = typing.get_type_hints(plan).get("return")
    except (NameError, TypeError):  # an annotation naming what the module imports only for type checking
        return None
    return returned if isinstance(returned, type) else None


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|milliseconds?|s|seconds?|min|minutes?|h|hours?)\s*$")
_UNIT_MS = {"ms": 1, "millisecond": 1, "s": 1000, "second": 1000, "min": 60_000, "minute": 60_000, "h": 3_600_000,
            "hour": 3_600_000}  # fmt: skip


def duration_ms(text: str, what: str) -> int:
    """ "500 milliseconds", "1 second", "2 minutes" (as Spark reads an interval) -> milliseconds."""
    found = _DURATION.match(text)
    if found is None or float(found.group(1)) <= 0:
        raise ValueError(f"{what} {text!r}: expected a positive duration such as '1 second' or '1 minute'")
    unit = found.group(2) if found.group(2) in _UNIT_MS else found.group(2)[:-1]  # "seconds" -> "second"
    return round(float(found.group(1)) * _UNIT_MS[unit])


@dataclass(frozen=True)
class JobSpec:
    """A single-step streaming job: inputs (topics), exactly one output (a topic or a Delta table)."""

    name: str  # an identifier, the job's folder name: it names checkpoints, queries and consumer groups
    version: int  # the logic version: bump it when the output would change for the same input
    description: str  # one line: what the job computes (the description of its Dagster asset)
    inputs: tuple[Topic, ...]  # the topics it streams; each is read and decoded once per batch
    output: Topic | DeltaTable  # its one output, written as `<dataset>.v<version>` or `<table>/v<version>`
    # Builds the job's rows and batch write from the context (reads its inputs with `ctx.read`).
    plan: Callable[[JobContext], JobPlan | TablePlan | TopicPlan | RealTimePlan]
    # How stale the output may be while the job keeps up (e.g. "1 second", "1 minute"). A live batch starts every
    # half of it: a record waits at most one interval for its batch, which must end within the other half. What
    # a batch costs whatever its rows (planning, logs, commits) is paid once per interval: a topic that other jobs
    # read wants a short one, a table that people query is fresh enough within a minute.
    freshness: str = "10 seconds"
    # A live batch reads at most this many records per input: a job that fell behind (an outage, a burst) catches
    # up in bounded batches, each committed, without holding the cores for minutes. A replay reads its whole
    # range in one batch unless `--max-offsets-per-trigger` says otherwise.
    max_batch_records: int = 100_000
    # Records a replay of the job reads per second, as measured (e.g. by a benchmark): what a cascade's time
    # estimate assumes until this cluster has replayed the job (then it uses that catch-up's rate). None: no
    # estimate before then.
    replay_events_per_s: int | None = None
    # Job-specific knobs: an instance of the job's own pydantic model (`Settings` in its declaration module, each
    # field documented there); the plan reads them typed with `ctx.spec.settings_as(Settings)`.
    settings: BaseModel = field(default_factory=NoSettings)
    # Compacted topics the job reads whole, as a table (`ctx.read_lookup`), again in every batch: not streamed,
    # so they have no offsets and no lag of the job's own.
    lookups: tuple[Topic, ...] = ()
    # A plan returning a RealTimePlan runs live in Spark's real-time mode: each long-running batch lasts this
    # long (its checkpoint, and the lookups' refresh, come at its end); replays run it as micro-batches.
    real_time: str | None = None
    # Set when the job is declared: the names of its inputs, then its lookups, as declared. A spec bound to other
    # physical topics (a version, a replay, a test's topics, `dataclasses.replace`) keeps them, so a plan finds
    # each input by its catalog declaration (`ctx.read(CLICKS)`) in whatever topic the run reads for it.
    declared_names: tuple[str, ...] = ()

    def bound(self, topic_names: Mapping[str, str]) -> JobSpec:
        """The same job reading and writing other physical topics (declared name -> physical name): a
        versioned output, a test's own topics. Topics not named keep their names."""

        def rename(topic: Topic) -> Topic:
            return replace(topic, name=topic_names.get(topic.name, topic.name))

        return replace(
            self,
            inputs=tuple(rename(t) for t in self.inputs),
            lookups=tuple(rename(t) for t in self.lookups),
            output=output_of(self.output).bound(topic_names),
        )

    def topic(self, declared: Topic) -> Topic:
        """The input or lookup declared as `declared` (its catalog topic; or the topic itself), as this run reads
        it."""
        reads = (*self.inputs, *self.lookups)
        if len(reads) != len(self.declared_names):
            raise ValueError(
                f"job {self.name} was declared with {len(self.declared_names)} inputs and lookups but is bound to "
                f"{len(reads)}: bind each declared one to one topic"
            )
        for topic in reads:
            if topic.name == declared.name:
                return topic
        if declared.name in self.declared_names:
            return reads[self.declared_names.index(declared.name)]
        raise ValueError(f"job {self.name} reads {declared.name}, which is not among its inputs or lookups")

    def settings_as(self, kind: type[Knobs]) -> Knobs:
        """The job's settings as its own model, typed (`ctx.spec.settings_as(Settings).gap_minutes`)."""
        if not isinstance(self.settings, kind):
            raise TypeError(f"job {self.name}: its settings are {type(self.settings).__name__}, not {kind.__name__}")
        return self.settings

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"job name {self.name!r} must be an identifier (it names folders and queries)")
        if self.version < 1:
            raise ValueError(f"job {self.name}: version must be >= 1")
        if self.real_time is not None and output_of(self.output).topic is None:
            raise ValueError(f"job {self.name}: real time mode writes with the Kafka sink, so its output is a topic")
        if self.max_batch_records < 1:
            raise ValueError(f"job {self.name}: max_batch_records must be >= 1")
        if self.replay_events_per_s is not None and self.replay_events_per_s < 1:
            raise ValueError(f"job {self.name}: replay_events_per_s must be >= 1 (or None: not measured)")
        duration_ms(self.freshness, f"job {self.name}: freshness")  # a clear error at discovery, not at start
        if not self.declared_names:  # first declared: what `topic` finds inputs by from now on
            object.__setattr__(self, "declared_names", tuple(t.name for t in (*self.inputs, *self.lookups)))
        if not isinstance(self.settings, BaseModel):
            raise ValueError(
                f"job {self.name}: settings must be an instance of the job's pydantic model "
                f"(class Settings(NoSettings) with typed fields), not {type(self.settings).__name__}"
            )
        plan_kind = _declared_plan(self.plan)
        wanted = _PLAN_OUTPUTS.get(plan_kind) if plan_kind is not None else None
        if wanted is not None and not isinstance(self.output, wanted):
            raise ValueError(
                f"job {self.name}: its plan returns a {plan_kind.__name__ if plan_kind else ''}, which writes a "
                f"{output_kind(wanted).kind}, but its output {self.output.name} is a {output_of(self.output).kind}"
            )

    @property
    def trigger_interval_ms(self) -> int:
        """The live trigger's interval: half the declared freshness."""
        return duration_ms(self.freshness, f"job {self.name}: freshness") // 2


def version_name(job: str, version: int) -> str:
    """`<job>.v<version>`: a version's name in its files (state, log, run record) and its Delta idempotency stream."""
    return f"{job}.v{version}"


def version_id(job: str, version: int) -> str:
    """`<job>_v<version>`: a version's name in query names, progress lines and run records (the one naming rule)."""
    return f"{job}_v{version}"


def version_consumer_group(job: str, version: int) -> str:
    """`kappa.<job>.v<version>`: the group the runner records a version's progress under (Kafka's tools show its
    lag)."""
    return f"kappa.{job}.v{version}"


def job_checkpoints(settings: KappaSettings, job: str) -> str:
    """The folder of a job's versions' checkpoint folders."""
    return f"{settings.checkpoint_root}/{job}"


def version_checkpoints(settings: KappaSettings, job: str, version: int) -> str:
    """The folder of one job version's checkpoints (one subfolder per query)."""
    return f"{job_checkpoints(settings, job)}/v{version}"


@dataclass(frozen=True)
class JobContext:
    """Everything a job's `plan` needs, derived once by the runner: `plan(ctx)` reads, the runtime writes."""

    spark: SparkSession  # the session the job's query runs in
    settings: KappaSettings  # the platform's settings (see Settings)
    spec: JobSpec  # the declaration, bound to this version's physical topics (`ctx.read(CLICKS)` finds them)
    version: int  # the logic version this run executes
    available_now: bool = False  # a replay or catch-up: drain what is there, then stop
    starting: Starting = field(default_factory=Starting)  # where the inputs start without a checkpoint
    max_offsets_per_trigger: int | None = None  # at most this many records per input and batch; None: no cap

    @property
    def id(self) -> str:
        """`<job>_v<version>`: the version's name in query names and progress lines."""
        return version_id(self.spec.name, self.version)

    def checkpoint(self, part: str = "output") -> str:
        """The checkpoint folder of one of the version's queries: `<checkpoint_root>/<job>/v<version>/<part>`."""
        return f"{version_checkpoints(self.settings, self.spec.name, self.version)}/{part}"

    def query_name(self, part: str = "output") -> str:
        """The Spark query name of one of the version's queries: `id`, or `<id>_<part>` for another part."""
        return self.id if part == "output" else f"{self.id}_{part}"

    @property
    def consumer_group(self) -> str:
        """The group under which the runner records this version's progress (Kafka's tools show its lag)."""
        return version_consumer_group(self.spec.name, self.version)

    def trigger(self) -> dict[str, Any]:
        """The query's trigger, as `DataStreamWriter.trigger` takes it: availableNow for a replay, else
        realTime (a `real_time` job) or processingTime (every half of the declared `freshness`)."""
        if self.available_now:
            return {"availableNow": True}
        if self.spec.real_time is not None:
            return {"realTime": self.spec.real_time}
        return {"processingTime": f"{self.spec.trigger_interval_ms} milliseconds"}

    @property
    def delta_app_id(self) -> str:
        """The version's idempotency stream in Delta (`txnAppId`): a batch id it has committed is not written
        again."""
        return version_name(self.spec.name, self.version)

    @property
    def output_topic(self) -> Topic:
        """The version's output topic (bound); a TypeError for a job writing a Delta table."""
        output = output_of(self.spec.output)
        if output.topic is None:
            raise TypeError(f"job {self.spec.name} writes a {output.kind}, not a topic")
        return output.topic

    def output_path(self) -> str:
        """The version's Delta table path (`DeltaTable.path`); a TypeError for a job writing a topic."""
        output = output_of(self.spec.output)
        if output.delta_table is None:
            raise TypeError(f"job {self.spec.name} writes a {output.kind}, not a Delta table")
        return output.delta_table.path(self.settings, self.version)

    def read(self, topic: Topic, with_raw: bool = False) -> DecodedTopic:
        """One of the job's inputs, streamed and decoded from where this run starts (`starting`, or the checkpoint).

        `topic`: the input as the catalog declares it (e.g. `CLICKS`); the run reads the topic it is bound to.
        `with_raw`: records also carry `kafka_topic` and their original bytes (`raw_value`), so a per-key rule can
        set a late record aside with its bytes.
        """
        topic = self.spec.topic(topic)
        # Lazy: imports pyspark, only where a Spark session runs (this module is imported without one).
        from kappa.spark.topic_io import REAL_TIME_CONSUMER, read_topic

        real_time = "realTime" in self.trigger()
        return read_topic(
            self.spark,
            self.settings,
            topic,
            job=self.spec.name,
            job_version=self.version,
            starting_offsets=self.starting.offsets,
            starting_timestamp_ms=self.starting.timestamp_ms,
            max_offsets_per_trigger=self.max_offsets_per_trigger,
            with_raw=with_raw,
            consumer_options=REAL_TIME_CONSUMER if real_time else None,
            # The live latency of kappa.runtime.metrics, when asked for: not of a replay's history.
            observe_age=self.settings.metrics_enabled
            and self.settings.metrics_record_latency
            and not (self.available_now or real_time),
        )

    def read_lookup(self, topic: Topic) -> DataFrame:
        """A declared lookup, read whole as a table: the latest value per key (a tombstone removes its key).
        Undecodable records are not in it: the job that streams the topic sends them to its dead letters."""
        # Lazy: imports pyspark, only where a Spark session runs (this module is imported without one).
        from kappa.spark.compacted import latest_per_key

        bound = self.spec.topic(topic)
        if bound not in self.spec.lookups:
            raise ValueError(f"job {self.spec.name} reads {topic.name} as a lookup but does not declare it in lookups")
        return latest_per_key(self.spark, self.settings, bound)
