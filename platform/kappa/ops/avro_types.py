"""An Avro field's type as `kappa produce` meets it: what a reason calls it, and the numbers its dates and times
are stored as. The one exception every row problem is raised as (`RowError`) lives here too."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
PER_SECOND = {"timestamp-millis": 1000, "timestamp-micros": 1_000_000}
_SHOWN_CHARS = 60  # a value quoted in a reason is cut to this length


class RowError(ValueError):
    """A row that cannot be produced; the message is the reason written to the rejects file."""


def shown(value: Any) -> str:
    """A value as a reason quotes it: its repr, cut to a readable length."""
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."


def branches(avro_type: Any) -> list[Any]:
    return avro_type if isinstance(avro_type, list) else [avro_type]


def base(avro_type: Any) -> Any:
    """The type under a logical type (`long` under timestamp-millis); the type itself otherwise."""
    if isinstance(avro_type, dict) and isinstance(avro_type.get("type"), str) and "logicalType" in avro_type:
        return avro_type["type"]
    return avro_type


def logical(avro_type: Any) -> str | None:
    return avro_type.get("logicalType") if isinstance(avro_type, dict) else None


def describe_type(avro_type: Any) -> str:
    """An Avro type as a reason names it: `long`, `timestamp-millis`, `one of A, B`, `null or string`."""
    if isinstance(avro_type, list):
        return " or ".join(describe_type(b) for b in avro_type)
    if isinstance(avro_type, dict):
        logical_type = logical(avro_type)
        if logical_type is not None:
            return str(logical_type)
        kind = avro_type.get("type")
        if kind == "enum":
            return "one of " + ", ".join(avro_type["symbols"])
        if kind in ("record", "error", "fixed"):
            return f"a {kind} {avro_type['name']}"
        return f"{'an' if kind == 'array' else 'a'} {kind}"
    return str(avro_type)


def since_epoch(moment: datetime, per_second: int) -> int:
    """Since the epoch in the field's unit, in exact integer arithmetic (no float); finer digits are floored."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)  # a Parquet timestamp without a zone counts from the epoch as UTC
    delta = moment - EPOCH
    micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return micros // (1_000_000 // per_second)


@dataclass(frozen=True)
class Field:
    name: str
    type: Any  # fastavro's expanded type: named types written out in full (so it validates on its own)
    has_default: bool
    default: Any
