"""`kappa produce <topic> FILE`: a data engineer's own rows (JSON lines, CSV, Parquet) into a declared topic.

Each row is checked against the topic's value schema and encoded in the Confluent wire format with the id the
schema already has under its subject: nothing is registered here (`kappa schemas apply` does that). Records are
keyed and partitioned as the topic declares, like `kappa generate` does. A row that cannot be converted or does
not validate is not produced: it goes, with its row (and line) number and the reason, to the rejects file, and
the run goes on. A file that is not of its format at all, or whose columns do not fit the schema, is refused
before anything is produced.

The file is streamed (lines, or Parquet record batches): its size does not matter.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import re
import sys
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import IO, Any, TextIO

from fastavro import parse_schema
from fastavro.validation import validate

from kappa.contracts.avro_serde import AvroEncoder
from kappa.contracts.registry import Registry, value_subject
from kappa.contracts.schema_files import topic_value_schema
from kappa.contracts.topic_declarations import Cleanup, Topic
from kappa.contracts.wire_format import WireFormatError
from kappa.core.errors import KappaError
from kappa.core.settings import KappaSettings
from kappa.kafka.clients import Outgoing, Publisher, require_kafka
from kappa.kafka.partitioning import partition_for
from kappa.kafka.topic_admin import describe
from kappa.ops import receipts


class FileFormat(StrEnum):
    JSONL = "jsonl"
    CSV = "csv"
    PARQUET = "parquet"


EXTENSIONS = {
    ".jsonl": FileFormat.JSONL,
    ".json": FileFormat.JSONL,
    ".ndjson": FileFormat.JSONL,
    ".csv": FileFormat.CSV,
    ".parquet": FileFormat.PARQUET,
}
REJECTS_SUFFIX = ".rejected.jsonl"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_INTEGER = re.compile(r"[+-]?[0-9]+")
_SNIFF_BYTES = 8192  # a NUL byte this early: not a text file (a Parquet file named .csv, say)
_SNIFF_LINES = 20  # a JSON-lines file has a JSON object among its first lines; one broken line is only a reject
_PARQUET_BATCH_ROWS = 4096
_SHOWN_CHARS = 60  # a value quoted in a reason is cut to this length
INTERRUPT_FLUSH_S = 10.0  # after Ctrl-C: how long the rows already sent get to be acknowledged


def detect_format(path: Path, explicit: str | None = None) -> FileFormat:
    """The format named by `--format`, else the one the file's extension says."""
    if explicit is not None:
        try:
            return FileFormat(explicit)
        except ValueError:
            raise KappaError(f"unknown format {explicit!r}: use jsonl, csv or parquet") from None
    found = EXTENSIONS.get(path.suffix.lower())
    if found is None:
        known = ", ".join(EXTENSIONS)
        raise KappaError(
            f"cannot tell the format of {path} from its extension ({known}): pass --format jsonl|csv|parquet"
        )
    return found


def default_rejects_path(path: Path) -> Path:
    """Beside the input: `clicks.csv` -> `clicks.csv.rejected.jsonl`."""
    return path.with_name(path.name + REJECTS_SUFFIX)


# --- the value schema, as rows meet it ---------------------------------------------------------------------


class RowError(ValueError):
    """A row that cannot be produced; the message is the reason written to the rejects file."""


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."


def _branches(avro_type: Any) -> list[Any]:
    return avro_type if isinstance(avro_type, list) else [avro_type]


def _base(avro_type: Any) -> Any:
    """The type under a logical type (`long` under timestamp-millis); the type itself otherwise."""
    if isinstance(avro_type, dict) and isinstance(avro_type.get("type"), str) and "logicalType" in avro_type:
        return avro_type["type"]
    return avro_type


def _logical(avro_type: Any) -> str | None:
    return avro_type.get("logicalType") if isinstance(avro_type, dict) else None


def describe_type(avro_type: Any) -> str:
    """An Avro type as a reason names it: `long`, `timestamp-millis`, `one of A, B`, `null or string`."""
    if isinstance(avro_type, list):
        return " or ".join(describe_type(b) for b in avro_type)
    if isinstance(avro_type, dict):
        logical = _logical(avro_type)
        if logical is not None:
            return str(logical)
        kind = avro_type.get("type")
        if kind == "enum":
            return "one of " + ", ".join(avro_type["symbols"])
        if kind in ("record", "error", "fixed"):
            return f"a {kind} {avro_type['name']}"
        return f"{'an' if kind == 'array' else 'a'} {kind}"
    return str(avro_type)


def _instant(text: str, per_second: int) -> int:
    """An ISO 8601 timestamp with a UTC offset, or an integer already in the field's unit since the epoch."""
    if _INTEGER.fullmatch(text):
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        unit = "milliseconds" if per_second == 1000 else "microseconds"
        raise RowError(f"is neither an ISO 8601 timestamp nor epoch {unit}") from None
    if moment.tzinfo is None:
        # The schemas' timestamps are UTC: a time without an offset would be a guess.
        raise RowError("has no UTC offset (write it as ...Z or ...+00:00)")
    return _since_epoch(moment, per_second)


def _since_epoch(moment: datetime, per_second: int) -> int:
    """Since the epoch in the field's unit, in exact integer arithmetic (no float); finer digits are floored."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)  # a Parquet timestamp without a zone counts from the epoch as UTC
    delta = moment - _EPOCH
    micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return micros // (1_000_000 // per_second)


_PER_SECOND = {"timestamp-millis": 1000, "timestamp-micros": 1_000_000}


def _from_text_one(text: str, avro_type: Any) -> Any:
    """One CSV cell as a value of one (non-union) Avro type; RowError says why it is not one."""
    logical = _logical(avro_type)
    base = _base(avro_type)
    stripped = text.strip()
    if logical in _PER_SECOND:
        return _instant(stripped, _PER_SECOND[logical])
    if logical == "date":
        if _INTEGER.fullmatch(stripped):
            return int(stripped)
        try:
            return (date.fromisoformat(stripped) - _EPOCH.date()).days
        except ValueError:
            raise RowError("is neither an ISO 8601 date nor days since the epoch") from None
    if base == "string":
        return text  # as written: surrounding spaces are data
    if base == "null":
        if stripped:
            raise RowError("is not empty (null)")
        return None
    if base in ("int", "long"):
        if not _INTEGER.fullmatch(stripped):
            raise RowError(f"is not an integer ({base})")
        return int(stripped)
    if base in ("float", "double"):
        try:
            if "_" in stripped:  # Python's float() reads 1_000; a CSV's number does not mean that
                raise ValueError
            return float(stripped)
        except ValueError:
            raise RowError(f"is not a number ({base})") from None
    if base == "boolean":
        lowered = stripped.lower()
        if lowered in ("true", "1"):
            return True
        if lowered in ("false", "0"):
            return False
        raise RowError("is not a boolean (true, false, 1 or 0)")
    if isinstance(base, dict) and base.get("type") == "enum":
        if stripped not in base["symbols"]:
            raise RowError(f"is not {describe_type(base)}")
        return stripped
    raise RowError(f"cannot be read from a CSV cell ({describe_type(avro_type)})")


def from_text(text: str, avro_type: Any) -> Any:
    """A CSV cell as a value of the field's type. In a union with null an empty cell is null; other unions take
    the first branch the text reads as (a CSV cell carries no type)."""
    branches = _branches(avro_type)
    if len(branches) == 1:
        return _from_text_one(text, branches[0])
    if text == "" and "null" in branches:
        return None
    reasons = []
    for branch in branches:
        if branch == "null":
            continue
        try:
            return _from_text_one(text, branch)
        except RowError as exc:
            reasons.append(str(exc))
    if "null" in branches and not text.strip():
        return None
    raise RowError(reasons[0] if len(reasons) == 1 else f"is not {describe_type(avro_type)}")


def from_parquet(value: Any, avro_type: Any) -> Any:
    """A Parquet value in the field's terms: dates and timestamps become the numbers Avro stores; the rest as is."""
    if value is None or not isinstance(value, (datetime, date)):
        return value
    for branch in _branches(avro_type):
        logical = _logical(branch)
        if logical in _PER_SECOND:
            moment = value if isinstance(value, datetime) else datetime(value.year, value.month, value.day, tzinfo=UTC)
            return _since_epoch(moment, _PER_SECOND[logical])
        if logical == "date":
            day = value.date() if isinstance(value, datetime) else value
            return (day - _EPOCH.date()).days
    return value


def _csv_readable(avro_type: Any) -> bool:
    """A type a CSV cell can carry (primitives, enums, logical types on them; unions of those)."""
    for branch in _branches(avro_type):
        base = _base(branch)
        if isinstance(base, dict):
            if base.get("type") != "enum":
                return False
        elif base not in ("null", "boolean", "int", "long", "float", "double", "string"):
            return False
    return True


def _accepts_empty(avro_type: Any) -> bool:
    """An empty cell is a value of this type: null in a nullable union, the empty string in a string."""
    return any(b == "null" or _base(b) == "string" for b in _branches(avro_type))


@dataclass(frozen=True)
class Field:
    name: str
    type: Any  # fastavro's parsed type, named types written out in full (so it validates on its own)
    has_default: bool
    default: Any


def _inline(avro_type: Any, named: dict[str, Any], seen: frozenset[str] = frozenset()) -> Any:
    """The type with references to named types replaced by their definitions (fastavro validates a field's type
    on its own only when nothing in it is a bare name)."""
    if isinstance(avro_type, str):
        if avro_type in named and avro_type not in seen:
            return _inline(named[avro_type], named, seen | {avro_type})
        return avro_type
    if isinstance(avro_type, list):
        return [_inline(b, named, seen) for b in avro_type]
    if isinstance(avro_type, dict):
        kind = avro_type.get("type")
        if kind in ("record", "error"):
            inner = seen | {avro_type["name"]}
            fields = [{**f, "type": _inline(f["type"], named, inner)} for f in avro_type["fields"]]
            return {**avro_type, "fields": fields}
        if kind == "array":
            return {**avro_type, "items": _inline(avro_type["items"], named, seen)}
        if kind == "map":
            return {**avro_type, "values": _inline(avro_type["values"], named, seen)}
    return avro_type


class RecordShape:
    """A topic's value schema (a record) as the rows of a file meet it: conversion, defaults, validation."""

    def __init__(self, schema: dict[str, Any]) -> None:
        named: dict[str, Any] = {}
        parsed = parse_schema(schema, named_schemas=named)
        assert isinstance(parsed, dict)  # a record: topic_value_schema holds schemas to that
        self.name: str = schema["name"]
        self.fields = [
            Field(f["name"], _inline(f["type"], named), "default" in f, f.get("default")) for f in parsed["fields"]
        ]
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
            complex_ = [c for c in columns if not _csv_readable(self.by_name[c].type)]
            if complex_:
                raise KappaError(
                    f"{path}: a CSV cell cannot carry {', '.join(complex_)} "
                    f"({'; '.join(describe_type(self.by_name[c].type) for c in complex_)}): use JSON lines or Parquet"
                )

    def from_cells(self, cells: dict[str, str]) -> dict[str, Any]:
        """A CSV row (column -> text) as field values; every cell that does not read is a reason."""
        values: dict[str, Any] = {}
        reasons = []
        for name, text in cells.items():
            field = self.by_name[name]
            if not text.isascii():
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError:  # a byte that was not UTF-8 (kept as a surrogate while reading)
                    reasons.append(f"{name}: is not UTF-8 text")
                    continue
            if field.has_default and not text.strip() and not _accepts_empty(field.type):
                values[name] = field.default  # an empty cell is a missing value: the default, as for no column
                continue
            try:
                values[name] = from_text(text, field.type)
            except RowError as exc:
                reasons.append(f"{name}: {_shown(text)} {exc}")
        if reasons:
            raise RowError("; ".join(reasons))
        return values

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
                reasons.append(f"{field.name}: {_shown(value)} is not {describe_type(field.type)}")
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


# --- reading a file, row by row ------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceRow:
    """One row as read: its number (1-based, data rows only), the line it starts on (text formats), what the
    file held (for the rejects file), and its field values, or why it could not be read."""

    row: int
    line: int | None
    raw: Any
    values: dict[str, Any] | None
    problem: str | None = None


class RowSource:
    """A file's rows, streamed; `done` out of `total` (bytes, or Parquet rows) says how far it has got."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.total = 1
        self.done = 0

    def rows(self) -> Iterator[SourceRow]:
        raise NotImplementedError

    @property
    def fraction(self) -> float:
        return min(1.0, self.done / max(self.total, 1))

    def _binary(self) -> IO[bytes]:
        try:
            return self.path.open("rb")
        except OSError as exc:
            raise KappaError(f"cannot read {self.path}: {exc.strerror or exc}") from None

    def _require_text(self, what: str) -> None:
        with self._binary() as f:
            head = f.read(_SNIFF_BYTES)
        if b"\x00" in head:
            raise KappaError(f"{self.path} is not {what}: it is a binary file (is it Parquet? --format parquet)")

    def _lines(self, f: IO[bytes]) -> Iterator[bytes]:
        """The file's lines (a leading UTF-8 byte-order mark dropped), counting the bytes read."""
        first = True
        for raw in f:
            self.done += len(raw)
            if first and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            first = False
            yield raw


def _readable(raw: bytes) -> str:
    return raw.decode("utf-8", "backslashreplace").rstrip("\r\n")


class JsonLinesSource(RowSource):
    """One JSON object per line, taken as it is (JSON's own types); blank lines are no rows."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self._require_text("JSON lines")
        self.total = path.stat().st_size
        self._check_format()

    def _check_format(self) -> None:
        tried: list[str] = []
        with self._binary() as f:
            for raw in f:
                if not raw.strip():
                    continue
                try:
                    if isinstance(json.loads(raw), dict):
                        return
                    tried.append("a JSON value, not an object")
                except ValueError:
                    tried.append("not JSON")
                if len(tried) == _SNIFF_LINES:
                    break
        self.done = 0
        if tried:  # an empty file is fine: no rows
            raise KappaError(f"{self.path} is not JSON lines (one JSON object per line): its first line is {tried[0]}")

    def rows(self) -> Iterator[SourceRow]:
        number = 0
        with self._binary() as f:
            for line, raw in enumerate(self._lines(f), start=1):
                if not raw.strip():
                    continue
                number += 1
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError:
                    yield SourceRow(number, line, _readable(raw), None, "the line is not UTF-8 text")
                    continue
                text = text.rstrip("\r\n")
                try:
                    value = json.loads(text)
                except json.JSONDecodeError as exc:
                    yield SourceRow(number, line, text, None, f"not valid JSON: {exc.msg} at column {exc.colno}")
                    continue
                if not isinstance(value, dict):
                    yield SourceRow(number, line, value, None, f"not a JSON object but {type(value).__name__}")
                    continue
                yield SourceRow(number, line, value, value)


def _cell_text(cell: str) -> str:
    """A cell for the rejects file: bytes that were not UTF-8 shown as escapes."""
    return cell if cell.isascii() else cell.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


class CsvSource(RowSource):
    """A CSV file with a header row naming the fields; every cell is text, converted to the field's type."""

    def __init__(self, path: Path, shape: RecordShape) -> None:
        super().__init__(path)
        self.shape = shape
        self._require_text("CSV")
        self.total = path.stat().st_size
        with self._binary() as f:
            header = self._header(csv.reader(self._texts(f)))
        self.done = 0
        shape.check_columns(header, path, csv_cells=True)
        self.header = header

    def _texts(self, f: IO[bytes]) -> Iterator[str]:
        # Bytes that are not UTF-8 stay in the text as surrogates: that row is rejected, not the file.
        return (raw.decode("utf-8", "surrogateescape") for raw in self._lines(f))

    def _header(self, reader: Any) -> list[str]:
        try:
            header: list[str] = next(reader)
        except StopIteration:
            raise KappaError(f"{self.path} is empty: a CSV file starts with a header row naming the fields") from None
        except csv.Error as exc:
            raise KappaError(f"{self.path} is not CSV: its header row does not read ({exc})") from None
        columns = [c.strip() for c in header]
        if not any(columns):
            raise KappaError(f"{self.path}: the first row is empty; a CSV file starts with a header row")
        return columns

    def rows(self) -> Iterator[SourceRow]:
        with self._binary() as f:
            reader = csv.reader(self._texts(f))
            self._header(reader)
            number = 0
            end = reader.line_num
            while True:
                start = end + 1
                try:
                    cells = next(reader)
                except StopIteration:
                    return
                except csv.Error as exc:  # e.g. a field over the size limit: that record only
                    number += 1
                    end = reader.line_num
                    yield SourceRow(number, start, None, None, f"not valid CSV: {exc}")
                    continue
                end = reader.line_num
                if not cells:  # a blank line
                    continue
                number += 1
                shown = [_cell_text(c) for c in cells]
                if len(cells) != len(self.header):
                    problem = f"{len(cells)} cells, but the header names {len(self.header)} columns"
                    yield SourceRow(number, start, shown, None, problem)
                    continue
                by_column = dict(zip(self.header, cells, strict=True))
                raw = dict(zip(self.header, shown, strict=True))
                try:
                    yield SourceRow(number, start, raw, self.shape.from_cells(by_column))
                except RowError as exc:
                    yield SourceRow(number, start, raw, None, str(exc))


class ParquetSource(RowSource):
    """A Parquet file, read in record batches; columns are the fields, values keep Parquet's types."""

    def __init__(self, path: Path, shape: RecordShape) -> None:
        super().__init__(path)
        # Lazy: pyarrow is a large import, needed only by this format.
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.shape = shape
        self._errors: tuple[type[BaseException], ...] = (pa.ArrowException, OSError)
        if not path.is_file():
            raise KappaError(f"cannot read {path}: no such file")
        try:
            self._file = pq.ParquetFile(path)
        except self._errors as exc:
            raise KappaError(f"{path} is not a Parquet file: {exc}") from None
        self.total = self._file.metadata.num_rows
        shape.check_columns(list(self._file.schema_arrow.names), path, csv_cells=False)

    def rows(self) -> Iterator[SourceRow]:
        batches = self._file.iter_batches(batch_size=_PARQUET_BATCH_ROWS)
        while True:
            try:
                batch = next(batches)
            except StopIteration:
                return
            except self._errors as exc:
                raise KappaError(f"{self.path}: cannot read past row {self.done}: {exc}") from None
            for row in batch.to_pylist():
                self.done += 1
                try:
                    yield SourceRow(self.done, None, row, self.shape.from_parquet_row(row))
                except RowError as exc:
                    yield SourceRow(self.done, None, row, None, str(exc))


def open_source(path: Path, file_format: FileFormat, shape: RecordShape) -> RowSource:
    """The file's rows; a file that is not of its format (or whose columns do not fit) is a KappaError here."""
    if path.is_dir():
        raise KappaError(f"cannot read {path}: it is a folder")
    if file_format is FileFormat.JSONL:
        return JsonLinesSource(path)
    if file_format is FileFormat.CSV:
        return CsvSource(path, shape)
    return ParquetSource(path, shape)


# --- rejects, and the run ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rejected:
    row: int
    line: int | None
    reason: str
    input: Any

    def as_json(self) -> str:
        entry: dict[str, Any] = {"row": self.row}
        if self.line is not None:
            entry["line"] = self.line
        entry.update(reason=self.reason, input=self.input)
        return json.dumps(entry, ensure_ascii=False, default=str)


class RejectsFile:
    """The run's rejected rows, one JSON object a line. Opened before the first row (a path that cannot be written
    fails the run before anything is produced, not half-way); removed at the end if nothing was rejected, so
    the file, when there is one, holds this run's rejects and no earlier run's."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.count = 0
        try:
            self._file: TextIO = path.open("w", encoding="utf-8")
        except OSError as exc:
            raise KappaError(f"cannot write the rejects file {path}: {exc.strerror or exc} (--rejects PATH)") from None

    def write(self, rejected: Rejected) -> None:
        self._file.write(rejected.as_json() + "\n")
        self.count += 1

    def close(self) -> None:
        self._file.close()
        if not self.count:
            self.path.unlink(missing_ok=True)

    def __enter__(self) -> RejectsFile:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class Progress:
    """`kappa generate`'s progress bar, on stderr, for a run that lasts: drawn only after `after_s`, redrawn each 2%."""

    def __init__(self, out: TextIO | None, after_s: float = 1.0) -> None:
        self._out = out
        self._after_s = after_s
        self._started = time.monotonic()
        self._next = 0.0
        self.drawn = False

    def update(self, fraction: float, rows: int) -> None:
        if self._out is None or fraction < self._next:
            return
        elapsed = time.monotonic() - self._started
        if elapsed < self._after_s:
            return
        self._next = (int(fraction * 50) + 1) / 50
        bar = "#" * int(fraction * 30)
        print(f"\r[{bar:<30}] {fraction:4.0%} {rows / max(elapsed, 1e-9):,.0f} rows/s", end="", file=self._out)
        self.drawn = True

    def finish(self) -> None:
        if self._out is not None and self.drawn:
            print(file=self._out)


def produce_rows(
    source: RowSource,
    shape: RecordShape,
    topic: Topic,
    encode: Callable[[dict[str, Any]], bytes],
    send: Callable[[Outgoing, int], None],
    rejects: RejectsFile,
    progress: Progress | None = None,
    skip: Collection[int] = (),
    rate: float | None = None,
) -> int:
    """Every row of the source either sent (encoded, keyed, placed; with its row number) or written to the rejects
    file, except the rows in `skip` (in the topic already); the number sent. `rate`: at most that many rows a
    second."""
    sent = paced = 0
    started = time.monotonic()
    for row in source.rows():
        if row.row in skip:
            continue  # before the pacing: a re-run does not wait through the rows the topic holds already
        if rate:
            paced += 1
            ahead = paced / rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
        try:
            if row.values is None:
                raise RowError(row.problem or "unreadable")
            record = shape.record(row.values)
            try:
                value = encode(record)
            except Exception as exc:  # what validates can still fail to encode (text that is not Unicode, say)
                raise RowError(f"does not encode: {exc}") from None
            key, partition = placement(topic, record)
        except RowError as exc:
            rejects.write(Rejected(row.row, row.line, str(exc), row.raw))
        else:
            send(Outgoing(key, value, partition=partition), row.row)
            sent += 1
        if progress is not None:
            progress.update(source.fraction, row.row)
    return sent


@dataclass(frozen=True)
class ProduceReport:
    topic: str
    produced: int  # acknowledged by Kafka in this run
    rejected: int
    schema_id: int
    rejects_path: Path
    receipt_path: Path
    found: int = 0  # rows in the topic already (an earlier run's), not produced again
    unconfirmed: list[int] = dataclasses.field(default_factory=list)  # sent, not acknowledged: maybe in the topic
    interrupted: bool = False  # stopped by Ctrl-C / SIGTERM before the file's end
    already_complete: bool = False  # an earlier run produced every row: nothing was done


def _encoder(settings: KappaSettings, topic: Topic, schema: dict[str, Any]) -> AvroEncoder:
    """The encoder of the schema id already registered; never registers (schemas go out by `kappa schemas apply`)."""
    subject = value_subject(topic.name)
    with Registry(settings.registry) as registry:
        try:
            return AvroEncoder(registry, subject, schema, register=False)
        except WireFormatError:
            raise KappaError(
                f"the schema {topic.value_schema} is not registered under {subject}: run `kappa schemas apply` "
                "first (nothing was produced)"
            ) from None


def _require_topic(settings: KappaSettings, topic: Topic) -> None:
    """The topic exists with its declared partitions (records placed by `partition_for` need exactly those)."""
    [state] = describe(require_kafka(settings), [topic])
    if state.partitions is None:
        raise KappaError(f"topic {topic.name} does not exist on {settings.bootstrap}: run `kappa topics apply`")
    if state.partitions != topic.partitions:
        raise KappaError(
            f"topic {topic.name} has {state.partitions} partitions but is declared with {topic.partitions}: "
            "see `kappa topics list`"
        )


def produce_file(
    settings: KappaSettings,
    topic: Topic,
    path: Path,
    file_format: FileFormat | None = None,
    rejects_path: Path | None = None,
    progress: TextIO | None = sys.stderr,
    rate: float | None = None,
) -> ProduceReport:
    """Produce the file's rows into the topic, each row once however often it is run (kappa.ops.receipts).
    Everything that would refuse the whole file (its format, its columns, the schema not registered, the topic
    missing) is checked before the first record is sent. A Kafka outage is waited out for KAPPA_PRODUCE_TIMEOUT_S
    (a line on `progress` while it lasts); rows still unacknowledged then, or at an interrupt, are reported by
    number in `unconfirmed`, and a later run adds those of them the topic does not hold."""
    file_format = file_format or detect_format(path)
    rejects_path = rejects_path or default_rejects_path(path)
    if rejects_path.resolve() == path.resolve():
        raise KappaError(f"the rejects file cannot be the input {path}")
    schema = topic_value_schema(settings.schemas_path, topic)
    shape = RecordShape(schema)
    check_declaration(topic, shape)
    source = open_source(path, file_format, shape)
    encoder = _encoder(settings, topic, schema)
    _require_topic(settings, topic)
    digest, where = receipts.file_digest(path), receipts.receipt_path(path)
    receipt = receipts.load(where, topic.name, digest)
    report = partial(ProduceReport, topic.name, schema_id=encoder.schema_id, rejects_path=rejects_path,
                     receipt_path=where)  # fmt: skip
    if receipt is not None and receipt.complete:
        return report(0, 0, found=receipt.rows, already_complete=True)
    found: set[int] = set()
    if receipt is None:  # the first run of these bytes into this topic: where its records will start
        since = receipts.end_offsets(settings, topic.name, topic.partitions)
        receipt = receipts.Receipt(topic.name, digest, since)
    else:
        found = receipts.rows_in_topic(settings, topic.name, receipt.since, digest)
    receipt = replace(receipt, runs=[*receipt.runs, datetime.now(UTC).isoformat(timespec="seconds")])
    receipts.save(where, receipt)

    def say(line: str) -> None:
        if progress is not None:
            print(f"\rkappa produce: {line}", file=progress)

    publisher = Publisher(settings, say=say)
    interrupted = False
    with RejectsFile(rejects_path) as rejects:
        bar = Progress(progress)

        def send(record: Outgoing, row: int) -> None:
            headers = [receipts.row_header(digest, row)]
            publisher.send(topic.name, replace(record, headers=headers), tag=row)

        try:
            produce_rows(source, shape, topic, encoder.encode, send, rejects, bar, skip=found, rate=rate)
        except KeyboardInterrupt:  # stop reading; what was sent is waited for briefly, and said
            interrupted = True
        except KappaError as exc:  # the file broke off: what was sent before is delivered, and said
            publisher.flush()
            raise KappaError(f"{exc}; the {publisher.confirmed} records before it were produced") from None
        finally:
            bar.finish()
        if interrupted:
            say(f"interrupted: waiting up to {INTERRUPT_FLUSH_S:g} s for the rows sent so far to be acknowledged")
        publisher.flush(INTERRUPT_FLUSH_S if interrupted else None)
    unconfirmed = publisher.unconfirmed()
    if not unconfirmed and not interrupted:
        receipts.save(where, replace(receipt, complete=True, rows=len(found) + publisher.confirmed))
    return report(publisher.confirmed, rejects.count, found=len(found), unconfirmed=unconfirmed,
                  interrupted=interrupted)  # fmt: skip
