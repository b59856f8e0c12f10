"""A topic's value schema (a record) as the rows of a file meet it: its columns, defaults and validation, and where
each record goes (its key and partition, as the topic declares them)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from fastavro.schema import expand_schema
from fastavro.validation import validate

from kappa.contracts.topic_declarations import Cleanup, Topic
from kappa.core.errors import KappaError
from kappa.kafka.partitioning import partition_for
from kappa.ops.avro_types import (
    EPOCH,
    PER_SECOND,
    Field,
    RowError,
    branches,
    describe_type,
    logical,
    shown,
    since_epoch,
)
from kappa.ops.csv_cells import csv_readable
from kappa.ops.csv_cells import from_cells as _from_cells


def from_parquet(value: Any, avro_type: Any) -> Any:
    """A Parquet value in the field's terms: dates and timestamps become the numbers Avro stores; the rest as is."""
    if value is None or not isinstance(value, (datetime, date)):
        return value
    for branch in branches(avro_type):
        logical_type = logical(branch)
        if logical_type in PER_SECOND:
            moment = value if isinstance(value, datetime) else datetime(value.year, value.month, value.day, tzinfo=UTC)
            return since_epoch(moment, PER_SECOND[logical_type])
        if logical_type == "date":
            day = value.date() if isinstance(value, datetime) else value
            return (day - EPOCH.date()).days
    return value


class RecordShape:
    """A topic's value schema (a record) as the rows of a file meet it: conversion, defaults, validation."""

    def __init__(self, schema: dict[str, Any]) -> None:
        # fastavro's expansion writes every named type out where it is used: a field's type validates on its own.
        expanded = expand_schema(schema)
        assert isinstance(expanded, dict)  # a record: topic_value_schema holds schemas to that
        self.name: str = schema["name"]
        self.fields = [Field(f["name"], f["type"], "default" in f, f.get("default")) for f in expanded["fields"]]
        self.by_name = {f.name: f for f in self.fields}

    def check_columns(self, columns: Sequence[str], path: Path, csv_cells: bool) -> None:
        """A file whose columns do not fit the schema is refused whole (every row would fail alike)."""
        duplicates = sorted({c for c in columns if list(columns).count(c) > 1})
        if duplicates:
            raise KappaError(f"{path}: column(s) {', '.join(duplicates)} appear more than once")
        unknown = [c for c in columns if c not in self.by_name]
        if unknown:
            raise KappaError(
                f"{path}: column(s) {', '.join(unknown)} are not fields of {self.name} "
                f"(its fields: {', '.join(self.by_name)})"
            )
        missing = [f.name for f in self.fields if f.name not in columns and not f.has_default]
        if missing:
            raise KappaError(f"{path}: no column for {', '.join(missing)} ({self.name} has no default for them)")
        if csv_cells:
            complex_ = [c for c in columns if not csv_readable(self.by_name[c].type)]
            if complex_:
                raise KappaError(
                    f"{path}: a CSV cell cannot carry {', '.join(complex_)} "
                    f"({'; '.join(describe_type(self.by_name[c].type) for c in complex_)}): use JSON lines or Parquet"
                )

    def from_cells(self, cells: dict[str, str]) -> dict[str, Any]:
        """A CSV row (column -> text) as field values; every cell that does not read is a reason."""
        return _from_cells(self.by_name, cells)

    def from_parquet_row(self, row: dict[str, Any]) -> dict[str, Any]:
        return {name: from_parquet(value, self.by_name[name].type) for name, value in row.items()}

    def record(self, values: dict[str, Any]) -> dict[str, Any]:
        """The complete record: missing fields take their default; every problem found is in the RowError."""
        reasons = []
        unknown = [name for name in values if name not in self.by_name]
        if unknown:
            reasons.append(f"not fields of {self.name}: {', '.join(unknown)}")
        record: dict[str, Any] = {}
        for field in self.fields:
            if field.name in values:
                value = values[field.name]
            elif field.has_default:
                value = field.default
            else:
                reasons.append(f"{field.name}: missing, and {self.name} has no default for it")
                continue
            if not validate(value, field.type, field=field.name, raise_errors=False):
                reasons.append(f"{field.name}: {shown(value)} is not {describe_type(field.type)}")
            record[field.name] = value
        if reasons:
            raise RowError("; ".join(reasons))
        return record


def key_text(value: Any) -> str:
    """A field's value as the UTF-8 text of a Kafka key (what Spark's cast to string gives, which the jobs'
    key check compares with)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else str(value)


def placement(topic: Topic, record: dict[str, Any]) -> tuple[bytes | None, int | None]:
    """(key, partition) of a record as the topic declares them: the key field's text as the key, and the
    partition of the partition field's value (`partition_for`), else None: Kafka's default partitioner by key."""
    key = None
    if topic.key_field is not None:
        value = record[topic.key_field]
        if value is None:
            if topic.cleanup is not Cleanup.DELETE:
                raise RowError(f"{topic.key_field}: null, and a compacted topic's record needs a key")
        else:
            key = key_text(value).encode("utf-8")
    partition = None
    if topic.partition_field is not None:
        value = record[topic.partition_field]
        if value is None:
            raise RowError(f"{topic.partition_field}: null, and it places the record (the topic's partition field)")
        partition = partition_for(key_text(value), topic.partitions)
    return key, partition


def check_declaration(topic: Topic, shape: RecordShape) -> None:
    """The topic's key and partition fields are fields of its schema (a declaration error otherwise)."""
    for what, name in (("key_field", topic.key_field), ("partition_field", topic.partition_field)):
        if name is not None and name not in shape.by_name:
            raise KappaError(f"topic {topic.name} declares {what}={name!r}, which is not a field of {shape.name}")
