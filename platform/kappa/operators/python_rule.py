"""A per-key rule written in Python, run by Spark's `transformWithState` (the Row interface) under the platform.

For a rule that needs per-key state but not the JVM operators' speed: the job author subclasses `KeyedRule`
(a Spark `StatefulProcessor`), declares its output columns, keeps its state with Spark's handle (`init`), and
writes `apply(key, rows)`, which sees one key's records of a batch in log order. `keyed_rule` runs it on a
decoded read: the input's dead letters (the SIDE columns set) pass through untouched, and the state lives in the
query's checkpoint like the JVM operators' (RocksDB). Spark's guide recommends this Row interface over
`transformWithStateInPandas` for many keys with few rows each (a pandas frame per key costs more than its rows).

It costs a Python call per key and batch, and the rows' trip to a Python worker: a rule on a busy path belongs
in the JVM (kappa.operators, infra/jvm/operators; the measured difference is in docs/job_api.md, "Per-key rules
in Python").
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator
from typing import Any, ClassVar

from pyspark.sql import Column, DataFrame, Row
from pyspark.sql import functions as F
from pyspark.sql.streaming import StatefulProcessor
from pyspark.sql.streaming.stateful_processor import TimerValues
from pyspark.sql.types import StructType

from kappa.operators.jvm import require_rocksdb
from kappa.spark.side_outputs import SIDE_COLUMNS, SIDE_KIND, SIDE_SCHEMA, side_columns

RULE_KEY = "rule_key"  # the column the rows are grouped by: the rule's key, null on a dead letter
_LOG_ORDER = ("kafka_partition", "kafka_offset")


class KeyedRule(StatefulProcessor):
    """A per-key rule in Python with its state in Spark's state store; run it with `keyed_rule`.

    Declare `output` (the rule's output columns as Spark DDL, e.g. `"user_id string, clicks long"`; the SIDE
    columns follow them), get the state variables in `init(handle)` as Spark's `StatefulProcessor` does
    (`self.count = handle.getValueState("count", "n long")`), and write `apply`. A row `apply` yields is a
    `Row` or a dict of output columns (a column left out is null); it may set SIDE columns itself, e.g. a late
    record's (`side_kind`, its `raw_value` as `side_value`, its topic and position).
    """

    output: ClassVar[str]  # the rule's output columns, as Spark DDL
    _columns: tuple[str, ...] = ()  # every output column, the SIDE columns last (set by `keyed_rule`)

    @abstractmethod
    def apply(self, key: Any, rows: list[Row]) -> Iterator[Row | dict[str, Any]]:
        """One key's records of a batch, in log order (kafka_partition, kafka_offset) -> the rows to emit.
        `key` is the grouping key's value (a string for `keyed_rule(rows, F.col("user_id"), ...)`)."""

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: TimerValues) -> Iterator[Row]:  # noqa: N802, N803 (Spark names it)
        """Spark's entry point: dead letters (only under the null key) pass through, the rest go to `apply`."""
        empty = dict.fromkeys(self._columns)
        records = []
        for row in rows:
            if row[SIDE_KIND] is not None:
                yield Row(**(empty | {c: row[c] for c in SIDE_COLUMNS}))
            else:
                records.append(row)
        if records:
            records.sort(key=lambda r: tuple(r[c] for c in _LOG_ORDER))  # stable: Spark's order within a position
            for out in self.apply(key[0], records):
                yield Row(**(empty | (out.asDict() if isinstance(out, Row) else out)))


def keyed_rule(rows: DataFrame, key: Column, rule: KeyedRule) -> DataFrame:
    """A decoded read (`ctx.read(topic).rows`: records with their Kafka position, and dead letters) -> what
    `rule` emits per key, then the dead letters, all with `rule.output`'s columns and the SIDE columns.

    `key`: what the rule keys its state by, e.g. `F.col("user_id")` (a user's records share a partition, so
    their log order is the same in every run). Streaming input keeps the state in the state store, in the
    query's checkpoint; it needs the RocksDB state store (the platform's default).
    """
    missing = [c for c in _LOG_ORDER if c not in rows.columns]
    if missing:
        raise ValueError(f"keyed_rule puts each key's rows in log order: the rows lack {', '.join(missing)}")
    require_rocksdb(rows, f"the Python rule {type(rule).__name__}")
    output = StructType.fromDDL(f"{rule.output}, {SIDE_SCHEMA}")  # parsed here: a bad DDL fails the plan
    assert isinstance(output, StructType)
    rule._columns = tuple(output.fieldNames())
    fields = [c for c in rows.columns if c not in SIDE_COLUMNS]
    side = side_columns(rows)  # null where a batch read has none
    keyed = rows.select(
        F.when(side[SIDE_COLUMNS.index(SIDE_KIND)].isNull(), key.cast("string")).alias(RULE_KEY), *fields, *side
    )
    return keyed.groupBy(RULE_KEY).transformWithState(rule, output, outputMode="Update", timeMode="None")
