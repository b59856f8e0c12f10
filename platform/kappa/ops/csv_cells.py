"""CSV cells (text) as the values of a record's fields.

`from_text` is the definition: one cell, one Avro type, and a RowError saying why the cell is not one. A file is
typed a batch of rows at a time, column by column (`CsvTyping`): numbers, booleans, dates and timestamps by
`pyarrow.csv` with `ConvertOptions`, strings and enums here. pyarrow cannot do the rejects: it refuses a whole
column for one cell it cannot read and does not say which, and it reads a few cells from_text does not
(hexadecimal integers, which are kept from it). So a column pyarrow refuses is read again in parts, the parts it
still refuses cell by cell, and a row with a cell that does not read is typed by `from_cells`, whose reason names
every such cell of the row. The unit tests hold the two ways to the same values and reasons on every kind of cell.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Sequence
from datetime import date, datetime
from typing import Any

from kappa.ops.avro_types import EPOCH, PER_SECOND, Field, RowError, base, branches, describe_type, logical
from kappa.ops.avro_types import shown as _shown
from kappa.ops.avro_types import since_epoch as _since_epoch

_INTEGER = re.compile(r"[+-]?[0-9]+")
_PART = 256  # a batch pyarrow does not read whole is read in parts of this many rows
_TRUE = ["true", "True", "TRUE", "1"]  # the spellings pyarrow reads; the others (`tRue`) are read by from_text
_FALSE = ["false", "False", "FALSE", "0"]


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


def _from_text_one(text: str, avro_type: Any) -> Any:
    """One CSV cell as a value of one (non-union) Avro type; RowError says why it is not one."""
    logical_type = logical(avro_type)
    base_type = base(avro_type)
    stripped = text.strip()
    if logical_type in PER_SECOND:
        return _instant(stripped, PER_SECOND[logical_type])
    if logical_type == "date":
        if _INTEGER.fullmatch(stripped):
            return int(stripped)
        try:
            return (date.fromisoformat(stripped) - EPOCH.date()).days
        except ValueError:
            raise RowError("is neither an ISO 8601 date nor days since the epoch") from None
    if base_type == "string":
        return text  # as written: surrounding spaces are data
    if base_type == "null":
        if stripped:
            raise RowError("is not empty (null)")
        return None
    if base_type in ("int", "long"):
        if not _INTEGER.fullmatch(stripped):
            raise RowError(f"is not an integer ({base_type})")
        return int(stripped)
    if base_type in ("float", "double"):
        try:
            if "_" in stripped:  # Python's float() reads 1_000; a CSV's number does not mean that
                raise ValueError
            return float(stripped)
        except ValueError:
            raise RowError(f"is not a number ({base_type})") from None
    if base_type == "boolean":
        lowered = stripped.lower()
        if lowered in ("true", "1"):
            return True
        if lowered in ("false", "0"):
            return False
        raise RowError("is not a boolean (true, false, 1 or 0)")
    if isinstance(base_type, dict) and base_type.get("type") == "enum":
        if stripped not in base_type["symbols"]:
            raise RowError(f"is not {describe_type(base_type)}")
        return stripped
    raise RowError(f"cannot be read from a CSV cell ({describe_type(avro_type)})")


def from_text(text: str, avro_type: Any) -> Any:
    """A CSV cell as a value of the field's type. In a union with null an empty cell is null; other unions take
    the first branch the text reads as (a CSV cell carries no type)."""
    types = branches(avro_type)
    if len(types) == 1:
        return _from_text_one(text, types[0])
    if text == "" and "null" in types:
        return None
    reasons = []
    for branch in types:
        if branch == "null":
            continue
        try:
            return _from_text_one(text, branch)
        except RowError as exc:
            reasons.append(str(exc))
    if "null" in types and not text.strip():
        return None
    raise RowError(reasons[0] if len(reasons) == 1 else f"is not {describe_type(avro_type)}")


def csv_readable(avro_type: Any) -> bool:
    """A type a CSV cell can carry (primitives, enums, logical types on them; unions of those)."""
    for branch in branches(avro_type):
        base_type = base(branch)
        if isinstance(base_type, dict):
            if base_type.get("type") != "enum":
                return False
        elif base_type not in ("null", "boolean", "int", "long", "float", "double", "string"):
            return False
    return True


def _accepts_empty(avro_type: Any) -> bool:
    """An empty cell is a value of this type: null in a nullable union, the empty string in a string."""
    return any(b == "null" or base(b) == "string" for b in branches(avro_type))


def _is_utf8(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a byte that was not UTF-8 (kept as a surrogate while reading)
        return False
    return True


def _cell(field: Field, text: str) -> Any:
    """One cell as its field's value: an empty cell where the type has no empty value is the field's default."""
    if field.has_default and not text.strip() and not _accepts_empty(field.type):
        return field.default  # an empty cell is a missing value: the default, as for no column
    return from_text(text, field.type)


def from_cells(fields: dict[str, Field], cells: dict[str, str]) -> dict[str, Any]:
    """A CSV row (column -> text) as field values; every cell that does not read is a reason."""
    values: dict[str, Any] = {}
    reasons = []
    for name, text in cells.items():
        if not _is_utf8(text):
            reasons.append(f"{name}: is not UTF-8 text")
            continue
        try:
            values[name] = _cell(fields[name], text)
        except RowError as exc:
            reasons.append(f"{name}: {_shown(text)} {exc}")
    if reasons:
        raise RowError("; ".join(reasons))
    return values


# --- a batch of rows, column by column ---------------------------------------------------------------------

# A column's cells -> (their values, the positions of the cells that do not read: their rows are typed cell by cell).
Column = Callable[[list[str]], tuple[list[Any], list[int]]]


def _arrow_types(avro_type: Any) -> list[Any]:
    """The pyarrow types that read this Avro type's cells as from_text does (for the cells they read), in the
    order to try them: a timestamp column is ISO 8601 text or epoch integers."""
    import pyarrow as pa

    types = [b for b in branches(avro_type) if b != "null"]
    if len(types) != 1:
        return []
    logical_type, base_type = logical(types[0]), base(types[0])
    if logical_type == "timestamp-millis":
        return [pa.timestamp("ms", tz="UTC"), pa.int64()]
    if logical_type == "timestamp-micros":
        return [pa.timestamp("us", tz="UTC"), pa.int64()]
    if logical_type == "date":
        return [pa.date32(), pa.int64()]
    if logical_type is not None or not isinstance(base_type, str):
        return []
    numbers = {"int": pa.int64(), "long": pa.int64(), "float": pa.float64(), "double": pa.float64()}
    if base_type in numbers:
        return [numbers[base_type]]
    return [pa.bool_()] if base_type == "boolean" else []


def _text_column(field: Field) -> Column | None:
    """A string field's cells as they are (an empty one null in a union with null); None: not a string field."""
    types = branches(field.type)
    if [b for b in types if b != "null"] != ["string"]:
        return None
    nullable = "null" in types

    def column(cells: list[str]) -> tuple[list[Any], list[int]]:
        bad = [] if _is_utf8("".join(cells)) else [i for i, c in enumerate(cells) if not _is_utf8(c)]
        return ([None if c == "" else c for c in cells] if nullable else cells), bad

    return column


def _python_column(field: Field) -> Column:
    """Any field, cell by cell as from_cells reads it (an enum's cells first checked all at once)."""
    only = branches(field.type)
    enum = base(only[0]) if len(only) == 1 else None
    symbols = frozenset(enum["symbols"]) if isinstance(enum, dict) and enum.get("type") == "enum" else frozenset()

    def column(cells: list[str]) -> tuple[list[Any], list[int]]:
        if symbols and symbols.issuperset(cells):
            return cells, []
        values: list[Any] = []
        bad = []
        for i, text in enumerate(cells):
            try:
                if not _is_utf8(text):
                    raise RowError
                values.append(_cell(field, text))
            except RowError:
                values.append(None)
                bad.append(i)
        return values, bad

    return column


def _arrow_column(field: Field, arrow_types: list[Any]) -> Column:
    """A number, boolean, date or timestamp field: its cells read by pyarrow.csv in one go, as the first of its
    types that reads them all; a batch none reads is read in parts, and the parts none reads cell by cell."""
    import pyarrow as pa
    import pyarrow.csv as pa_csv

    read = pa_csv.ReadOptions(column_names=[field.name], use_threads=False)
    # No quoting, no delimiter: the cells are already split out of the file; each goes in as one line.
    parse = pa_csv.ParseOptions(delimiter="\x1f", quote_char=False, ignore_empty_lines=False)
    converts = [
        pa_csv.ConvertOptions(
            column_types={field.name: t}, null_values=[""], true_values=_TRUE, false_values=_FALSE, check_utf8=False
        )
        for t in arrow_types
    ]
    as_numbers = [pa.int64() if pa.types.is_timestamp(t) else pa.int32() if pa.types.is_date(t) else None
                  for t in arrow_types]  # fmt: skip
    by_python = _python_column(field)
    empty_is_default = field.has_default and not _accepts_empty(field.type)
    empty_is_null = "null" in branches(field.type)

    def by_arrow(cells: list[str]) -> list[Any] | None:
        text = "\n".join(cells) + "\n"
        # A line break or \x1f in a cell would split it; pyarrow reads 0x1F as an integer, from_text does not.
        if text.count("\n") != len(cells) or any(c in text for c in "\r\x1fxX") or not text.isascii():
            return None
        data = text.encode("ascii")
        for convert, as_number in zip(converts, as_numbers, strict=True):
            try:
                table = pa_csv.read_csv(io.BytesIO(data), read_options=read, parse_options=parse,
                                        convert_options=convert)  # fmt: skip
            except pa.ArrowInvalid:
                continue
            read_column = table.column(0)
            if as_number is not None:
                read_column = read_column.cast(as_number)
            values: list[Any] = read_column.to_pylist()
            if not read_column.null_count or empty_is_null:
                return values
            if empty_is_default:
                return [field.default if v is None else v for v in values]
            return None  # an empty cell and no value for it: from_text says why
        return None

    def column(cells: list[str]) -> tuple[list[Any], list[int]]:
        values = by_arrow(cells)
        if values is not None:
            return values, []
        bad: list[int] = []
        values = []
        for start in range(0, len(cells), _PART):
            part = cells[start : start + _PART]
            read_part = by_arrow(part) if len(part) < len(cells) else None
            if read_part is None:
                read_part, bad_part = by_python(part)
                bad.extend(start + i for i in bad_part)
            values.extend(read_part)
        return values, bad

    return column


class CsvTyping:
    """The rows of one CSV file (cells in the header's order) as field values, a batch at a time."""

    def __init__(self, fields: dict[str, Field], header: Sequence[str]) -> None:
        self.fields = fields
        self.header = list(header)
        self._columns: list[Column] = []
        for name in self.header:
            field = fields[name]
            text = _text_column(field)
            arrow_types = [] if text is not None else _arrow_types(field.type)
            if text is not None:
                self._columns.append(text)
            elif arrow_types:
                self._columns.append(_arrow_column(field, arrow_types))
            else:
                self._columns.append(_python_column(field))

    def rows(self, rows: list[list[str]]) -> list[dict[str, Any] | RowError]:
        """Each row's values, or the RowError naming every cell of it that does not read."""
        columns = []
        bad: set[int] = set()
        for index, column in enumerate(self._columns):
            values, bad_cells = column([cells[index] for cells in rows])
            columns.append(values)
            bad.update(bad_cells)
        typed: list[dict[str, Any] | RowError] = [
            dict(zip(self.header, values, strict=True)) for values in zip(*columns, strict=True)
        ]
        for i in bad:  # the rows with a cell that does not read: every reason, in from_cells' words
            try:
                typed[i] = from_cells(self.fields, dict(zip(self.header, rows[i], strict=True)))
            except RowError as exc:
                typed[i] = exc
        return typed
