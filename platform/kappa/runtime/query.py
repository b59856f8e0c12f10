"""A job's one streaming query, built from its plan: each input read and decoded once per batch, one write path.

Every micro-batch, before it writes anything:
1. A stop was requested (SIGTERM): the batch does not start. The query ends, nothing of the batch is written,
   and the restarted job runs it whole: a stop never writes a dead letter or late record twice.
2. An input's subject gained a writer version since the query was planned: the query ends and the runner plans
   it again, with that version, from the same checkpoint. The batch decodes it: nothing is dead-lettered for a
   schema the registry knows, and no restart is needed. (The registry is asked once per batch, one request per
   input; if it does not answer, the batch goes on unless it holds a record of an unknown schema id.)
Then the batch's side rows (dead letters, late records) go to their topics. A job writing a topic (TopicPlan)
sends them and its output records in one Kafka write, so the batch is read once; a job writing a table sends
them in one Kafka write, then the rest to its own write. A batch passes the fault points of kappa.runtime.faults
(before its writes, between a table job's two, after them), where a test can make the job die.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from kappa.contracts.dead_letter_format import DeadLetterKind
from kappa.contracts.registry import RegistryError, registry_of
from kappa.contracts.topic_declarations import Topic
from kappa.core.errors import KappaError
from kappa.core.settings import KappaSettings
from kappa.runtime.declaration import JobContext, JobPlan, RealTimePlan, TablePlan, TopicPlan
from kappa.runtime.faults import FaultPoint, process_faults
from kappa.runtime.outputs import DeltaTable, TableWrite, output_of

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.streaming.query import StreamingQuery


class QueryEnd(StrEnum):
    """Why the runtime ended a query from inside a batch (before the batch wrote anything)."""

    STOP = "stop"  # a stop was requested
    NEW_SCHEMA = "new-schema"  # an input gained a writer version: plan again
    REGISTRY_UNAVAILABLE = "registry-unavailable"  # a record of an unknown schema id, and no registry to ask


class EndedByRuntime(Exception):  # noqa: N818 (not an error: the signal that ends a query between batches)
    """Raised inside a batch to end the query before the batch writes; QueryControl says why."""


class _TheQuerySaysIt(logging.Filter):
    """Py4J logs every exception of a Python callback, stack trace and all, on the terminal. An exception of a
    batch function ends its query, whose failure the runner reports in one line (retried, or the run's error) and
    Spark's log file keeps whole; the runtime's own EndedByRuntime is no failure at all."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("There was an exception while executing the Python Proxy")


_PY4J_CALLBACKS = logging.getLogger("py4j.clientserver")


@dataclass
class QueryControl:
    """Shared by the runner (main thread) and the batch function (Spark's callback thread)."""

    stop: threading.Event
    ended: QueryEnd | None = None
    detail: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def end(self, why: QueryEnd, detail: str = "") -> EndedByRuntime:
        with self._lock:
            self.ended, self.detail = why, detail
        return EndedByRuntime(f"{why}: {detail}" if detail else str(why))


class WriterWatch:
    """The registered versions of the inputs' value subjects when the query was planned, to notice new ones."""

    def __init__(self, settings: KappaSettings, inputs: tuple[Topic, ...]) -> None:
        self._registry = registry_of(settings, timeout_s=5.0)  # one connection for the query's life, not per batch
        self._subjects = tuple(dict.fromkeys(t.value_subject for t in inputs))
        # Asked before the plan reads the schemas: a version registered in between costs one needless re-plan,
        # never a missed one.
        try:
            self._known = self._numbers()
        except Exception:
            self._registry.close()  # the caller never gets the watch to close
            raise

    def _numbers(self) -> dict[str, list[int]]:
        return {s: self._registry.version_numbers(s) for s in self._subjects}

    def new_versions(self) -> list[str]:
        """`subject vN` for each version registered since; raises RegistryError when the registry is away."""
        now = self._numbers()
        return [f"{s} v{n}" for s in self._subjects for n in now[s] if n not in self._known[s]]

    def __enter__(self) -> WriterWatch:
        return self

    def __exit__(self, *_: object) -> None:
        self._registry.close()


def start_query(
    ctx: JobContext, plan: JobPlan | TablePlan | TopicPlan | RealTimePlan, control: QueryControl, watch: WriterWatch
) -> StreamingQuery:
    """Start the job's one query over `plan.rows` (ctx names it, checkpoints it and sets its trigger)."""
    if isinstance(plan, RealTimePlan):
        return _start_kafka_query(ctx, plan)
    return _start_batch_function_query(ctx, plan, control, watch)


def _check_side_columns(ctx: JobContext, rows: DataFrame) -> None:
    """The side rows ride in the plan's own rows (each input is read once, dead letters and all); a plan whose
    last select left the SIDE columns out would lose them: refused before the query starts, with the fix."""
    # Lazy: pyspark, only where a Spark session runs (this module is imported without one).
    from kappa.spark.side_outputs import SIDE_COLUMNS

    if missing := [c for c in SIDE_COLUMNS if c not in rows.columns]:
        raise KappaError(
            f"job {ctx.spec.name}: its plan's rows lack the side columns {', '.join(missing)}, which carry its "
            "inputs' dead letters and late records to their topics: keep them in the plan's last select "
            "(`*SIDE_COLUMNS`, from kappa.job)"
        )


def _start_kafka_query(ctx: JobContext, plan: RealTimePlan) -> StreamingQuery:
    """One Kafka write per batch, for output and side rows alike: the `topic` column says where each goes.

    Nothing runs in Python between batches, so the runner checks the registry for new writer versions itself
    (see the runner), and a stop ends the query at once: a long-running batch would otherwise hold it until its
    end. What the ended batch wrote is written again after a restart, under the same keys (at least once, as
    every Kafka output here).
    """
    # Lazy: imports pyspark, only where a Spark session runs (this module is imported without one).
    from kappa.spark.topic_io import KAFKA_WRITE_OPTIONS, kafka_options

    # Live, a record leaves within 5 ms: the lane is measured in milliseconds. (At 0 ms every record was a produce
    # request of its own, which cost the broker as much CPU as the lane itself; batches of a few records are not
    # worth compressing: LZ4's frame set-up cost more than it saved.) A replay batches.
    live = {"kafka.linger.ms": "5", "kafka.compression.type": "none"}
    writes = KAFKA_WRITE_OPTIONS | (live if "realTime" in ctx.trigger() else {})
    _check_side_columns(ctx, plan.rows)
    return (
        kafka_records(ctx, plan.key, plan.partition)(plan.rows)
        .writeStream.format("kafka")
        .options(**kafka_options(ctx.settings), **writes)
        .queryName(ctx.query_name())
        .option("checkpointLocation", ctx.checkpoint())
        .outputMode("update")
        .trigger(**ctx.trigger())
        .start()
    )


def kafka_records(
    ctx: JobContext,
    key: Column,
    partition: Column | None = None,
    keep: Column | None = None,
    delete: Column | None = None,
) -> Callable[[DataFrame], DataFrame]:
    """A job's rows -> Kafka records (key, value, headers, topic[, partition]) in one projection: an output row
    encoded for the output topic (a tombstone where `delete` holds), a side row to its dead-letter or late topic
    with its original bytes. Output rows where `keep` does not hold are dropped. The output's schema id is
    resolved now, once."""
    # Lazy: pyspark, only where a Spark session runs (this module is imported without one).
    from pyspark.sql import functions as F

    # Lazy: imports pyspark, only where a Spark session runs (this module is imported without one).
    from kappa.spark.side_outputs import HEADERS_TYPE, SIDE_KIND, side_record_columns
    from kappa.spark.topic_io import topic_value

    output = ctx.output_topic
    side = F.col(SIDE_KIND).isNotNull()
    late_to = output_of(ctx.spec.output).late_events(ctx.version).name
    dead = side_record_columns(ctx.spec.name, ctx.version, tuple(t.name for t in ctx.spec.inputs), late_to)
    value = topic_value(ctx.settings, output)
    record = {
        "key": key.cast("string").cast("binary"),
        "value": value if delete is None else F.when(~delete, value),
        "headers": F.lit(None).cast(HEADERS_TYPE),
        "topic": F.lit(output.name),
    }
    columns = [F.when(side, dead[name]).otherwise(column).alias(name) for name, column in record.items()]
    if partition is not None:  # a dead letter goes where Kafka's partitioner puts its key
        columns.append(F.when(~side, partition).alias("partition"))

    def records(rows: DataFrame) -> DataFrame:
        return (rows if keep is None else rows.where(side | keep)).select(*columns)

    return records


def table_write(ctx: JobContext, table: DeltaTable) -> Callable[[DataFrame, int], None]:
    """The write a table's declaration asks for, once per batch id (a batch run again after a crash is skipped)."""
    # Lazy: imports pyspark and Delta, only where a Spark session runs (this module is imported without one).
    from kappa.spark.delta_merge import DeltaMerge, MergeMode, append_once
    from kappa.spark.topic_io import DELETED

    path, app_id = ctx.output_path(), ctx.delta_app_id
    if table.write is TableWrite.APPEND:
        return lambda batch, batch_id: append_once(batch, path, app_id, batch_id)
    mode = MergeMode.ACCUMULATE if table.write is TableWrite.ACCUMULATE else MergeMode.UPSERT
    deleted = DELETED if table.deletes else None
    return DeltaMerge(path, keys=table.keys, app_id=app_id, mode=mode, summed=table.summed, deleted=deleted).write


# A live Delta table batch runs while no other does in the same process. On the job host the tables share a
# cadence (Spark aligns processing-time triggers to the clock, so all are due at the same instant) and, run at once,
# held every core for seconds with their task threads: the topic jobs' batches waited, and set the pipeline's p99
# (clicks produced in the 12 s after the views' batches began reached enriched_clicks at p99 5.0 to 6.7 s, the
# others at 1.6 to 1.9 s). One at a time they leave the topic jobs their share of the cores: make bench-live, 4 min
# at 1,000 clicks/s, same session, without and with: enriched_clicks p99 4.6 -> 2.4 s, sessions 7.4 -> 4.1 s, the
# lane 1.9 s -> 0.7 s, page_stats 42 -> 47 s. A replay's batches do not wait: it needs throughput, and has the
# cores to itself.
_LIVE_TABLE_BATCH = threading.Lock()


def _start_batch_function_query(
    ctx: JobContext, plan: JobPlan | TablePlan | TopicPlan, control: QueryControl, watch: WriterWatch
) -> StreamingQuery:
    # Lazy: pyspark, only where a Spark session runs (this module is imported without one).
    from pyspark.sql import functions as F

    # Lazy: imports pyspark, only where a Spark session runs (this module is imported without one).
    from kappa.spark.side_outputs import SIDE_COLUMNS, SIDE_KIND, observe_side_rows, side_records
    from kappa.spark.topic_io import publish

    if not any(isinstance(f, _TheQuerySaysIt) for f in _PY4J_CALLBACKS.filters):
        _PY4J_CALLBACKS.addFilter(_TheQuerySaysIt())
    _check_side_columns(ctx, plan.rows)
    inputs = tuple(t.name for t in ctx.spec.inputs)
    faults, query = process_faults(), ctx.query_name()
    output = output_of(ctx.spec.output)
    late_to = output.late_events(ctx.version).name
    to_records: Callable[[DataFrame], DataFrame] | None = None
    write: Callable[[DataFrame, int], None] | None = None
    if isinstance(plan, TopicPlan):
        if output.topic is None:
            raise KappaError(f"job {ctx.spec.name}: a TopicPlan writes Kafka records, not {ctx.spec.output.name}")
        to_records = kafka_records(ctx, plan.key, plan.partition, plan.keep, plan.delete)
    elif isinstance(plan, TablePlan):
        if output.delta_table is None:
            raise KappaError(f"job {ctx.spec.name}: a TablePlan writes a Delta table, not {ctx.spec.output.name}")
        table_rows, to_table = plan.batch, table_write(ctx, output.delta_table)

        def write(rows: DataFrame, batch_id: int) -> None:
            to_table(table_rows(rows) if table_rows else rows, batch_id)

    else:
        write = plan.write

    def run_batch(batch: DataFrame, batch_id: int) -> None:
        if control.stop.is_set():
            raise control.end(QueryEnd.STOP)
        try:
            learned = watch.new_versions()
            unreachable: RegistryError | None = None
        except RegistryError as exc:
            learned, unreachable = [], exc
        if learned:
            raise control.end(QueryEnd.NEW_SCHEMA, ", ".join(learned))
        # Read more than once (a look before the write, or two writes), a batch is cached: else its stateful
        # steps would run again.
        cached = unreachable is not None or to_records is None
        turn = _LIVE_TABLE_BATCH if to_records is None and not ctx.available_now else contextlib.nullcontext()
        with turn:
            _run_batch(batch, batch_id, cached, unreachable)

    def _run_batch(batch: DataFrame, batch_id: int, cached: bool, unreachable: RegistryError | None) -> None:
        if cached:
            batch.persist()
        try:
            side = batch.where(F.col(SIDE_KIND).isNotNull())
            unknown = side.where(F.col(SIDE_KIND) == DeadLetterKind.UNKNOWN_SCHEMA_ID.value)
            if unreachable is not None and not unknown.isEmpty():
                raise control.end(QueryEnd.REGISTRY_UNAVAILABLE, str(unreachable))
            faults.reached(FaultPoint.BEFORE_WRITES, query, batch_id)
            if to_records is not None:
                publish(to_records(batch), ctx.settings)
            else:
                assert write is not None
                publish(side_records(side, ctx.spec.name, ctx.version, inputs, late_to), ctx.settings)
                rows = batch.where(F.col(SIDE_KIND).isNull()).drop(*SIDE_COLUMNS)
                said = lambda: f"{side.count()} side rows sent, {rows.count()} rows unwritten"  # noqa: E731
                faults.reached(FaultPoint.BETWEEN_WRITES, query, batch_id, said, counts=lambda: not rows.isEmpty())
                write(rows, batch_id)
            faults.reached(FaultPoint.AFTER_WRITES, query, batch_id)
        finally:
            if cached:
                batch.unpersist()

    # Dead letters and late records by kind, for the metrics (none counted with metrics off).
    rows = observe_side_rows(plan.rows) if ctx.settings.metrics_enabled else plan.rows
    return (
        rows.writeStream.foreachBatch(run_batch)
        .queryName(ctx.query_name())
        .option("checkpointLocation", ctx.checkpoint())
        .outputMode("update")
        .trigger(**ctx.trigger())
        .start()
    )
