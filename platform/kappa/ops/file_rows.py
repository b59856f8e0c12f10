"""Reading the file `kappa produce` is given, row by row: JSON lines, CSV (its cells typed by kappa.ops.csv_cells)
or Parquet. A file that is not of its format at all, or whose columns do not fit the schema, is a KappaError when
it is opened; a row that cannot be read is a `SourceRow` with the problem, for the rejects file.

The file is streamed (lines, or Parquet record batches): its size does not matter.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import IO, Any

from kappa.core.errors import KappaError
from kappa.ops.avro_types import RowError
from kappa.ops.csv_cells import CsvTyping
from kappa.ops.record_shape import RecordShape


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
_SNIFF_BYTES = 8192  # a NUL byte this early: not a text file (a Parquet file named .csv, say)
_SNIFF_LINES = 20  # a JSON-lines file has a JSON object among its first lines; one broken line is only a reject
_PARQUET_BATCH_ROWS = 4096
_CSV_BATCH_ROWS = 2048  # CSV rows typed together (a column at a time)


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
        typing = CsvTyping(self.shape.by_name, self.header)
        batch: list[_CsvRecord] = []
        for record in self._records():
            batch.append(record)
            if len(batch) == _CSV_BATCH_ROWS:
                yield from self._typed(typing, batch)
                batch = []
        yield from self._typed(typing, batch)

    def _records(self) -> Iterator[_CsvRecord]:
        """The data rows as csv splits them: (row number, the line it starts on, its cells, or why they are not)."""
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
                    yield _CsvRecord(number, start, None, f"not valid CSV: {exc}")
                    continue
                end = reader.line_num
                if not cells:  # a blank line
                    continue
                number += 1
                problem = None
                if len(cells) != len(self.header):
                    problem = f"{len(cells)} cells, but the header names {len(self.header)} columns"
                yield _CsvRecord(number, start, cells, problem)

    def _typed(self, typing: CsvTyping, batch: list[_CsvRecord]) -> Iterator[SourceRow]:
        """The batch's rows in order, each with its values or its reason; the raw cells kept for the rejects file."""
        typed = iter(typing.rows([r.cells for r in batch if r.cells is not None and r.problem is None]))
        for r in batch:
            if r.cells is None or r.problem is not None:
                shown = None if r.cells is None else [_cell_text(c) for c in r.cells]
                yield SourceRow(r.number, r.line, shown, None, r.problem)
                continue
            values = next(typed)
            raw = dict(zip(self.header, map(_cell_text, r.cells), strict=True))
            if isinstance(values, RowError):
                yield SourceRow(r.number, r.line, raw, None, str(values))
            else:
                yield SourceRow(r.number, r.line, raw, values)


@dataclass(frozen=True)
class _CsvRecord:
    number: int
    line: int
    cells: list[str] | None  # None: csv could not split the record
    problem: str | None


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
