"""`kappa produce`'s logic without services: reading JSON lines, CSV and Parquet, converting and validating rows
against the value schema, rejects with row numbers and reasons, and each record's key and partition.

Expected values are written out or computed here from first principles (calendar.timegm, fastavro's own reader,
`partition_for`), never by the code under test; records are encoded with a wire-format encoder built here.
"""

import calendar
import io
import json
import os
import re
import signal
import struct
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fastavro import parse_schema, schemaless_reader, schemaless_writer
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.catalog import CLICKS
from kappa.contracts.schema_files import topic_value_schema
from kappa.contracts.topic_declarations import Cleanup, Topic
from kappa.contracts.wire_format import frame, unframe
from kappa.core.errors import KappaError
from kappa.core.settings import project_root
from kappa.kafka.clients import Outgoing
from kappa.kafka.partitioning import partition_for
from kappa.ops.avro_types import Field, RowError
from kappa.ops.csv_cells import CsvTyping, from_text
from kappa.ops.file_rows import FileFormat, detect_format, open_source
from kappa.ops.produce_file import Interrupts, RejectsFile, default_rejects_path, produce_rows
from kappa.ops.progress_bar import Progress
from kappa.ops.receipts import ranges
from kappa.ops.record_shape import RecordShape, placement
from kappa.runtime.discovery import find_topic

SCHEMAS = project_root() / "schemas" if project_root() else Path("schemas")
CLICK_SCHEMA: dict[str, Any] = topic_value_schema(SCHEMAS, CLICKS)
SCHEMA_ID = 42

# One field of every type a CSV cell can carry.
EVERY_TYPE: dict[str, Any] = {
    "type": "record",
    "name": "EveryType",
    "namespace": "io.kappa.test",
    "fields": [
        {"name": "name", "type": "string"},
        {"name": "count", "type": "int"},
        {"name": "total", "type": "long"},
        {"name": "ratio", "type": "float"},
        {"name": "score", "type": "double"},
        {"name": "active", "type": "boolean"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "amount", "type": ["null", "long"], "default": None},
        {
            "name": "kind",
            "type": {"type": "enum", "name": "Kind", "symbols": ["UNKNOWN", "RED", "BLUE"], "default": "UNKNOWN"},
            "default": "UNKNOWN",
        },
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "seen", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}], "default": None},
        {"name": "again", "type": ["null", "Kind"], "default": None},  # a named type by reference
    ],
}


def epoch_ms(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0, ms: int = 0) -> int:
    return calendar.timegm((year, month, day, hour, minute, second)) * 1000 + ms


def encoder(schema: dict[str, Any]) -> Any:
    parsed = parse_schema(schema)

    def encode(record: dict[str, Any]) -> bytes:
        out = io.BytesIO()
        schemaless_writer(out, parsed, record)
        return frame(SCHEMA_ID, out.getvalue())

    return encode


def decoded(value: bytes | None, schema: dict[str, Any] = CLICK_SCHEMA) -> dict[str, Any]:
    """Raw values (timestamps as epoch milliseconds), read back with fastavro's own reader."""
    schema_id, body = unframe(value)
    assert schema_id == SCHEMA_ID
    record = schemaless_reader(
        io.BytesIO(body), parse_schema(schema), return_record_name=False, handle_unicode_errors="strict"
    )
    return {k: (calendar.timegm(v.utctimetuple()) * 1000 + v.microsecond // 1000 if isinstance(v, datetime) else v)
            for k, v in record.items()}  # fmt: skip


def run(
    path: Path,
    file_format: FileFormat,
    schema: dict[str, Any] = CLICK_SCHEMA,
    topic: Topic = CLICKS,
    skip: frozenset[int] = frozenset(),
    rows: list[int] | None = None,
) -> tuple[list[Outgoing], list[dict[str, Any]]]:
    """Produce the file into a list; (what was sent, the rejects file's entries). `rows` gets the row numbers sent."""
    shape = RecordShape(schema)
    sent: list[Outgoing] = []
    numbers = [] if rows is None else rows

    def send(record: Outgoing, row: int) -> None:
        sent.append(record)
        numbers.append(row)

    rejects_path = default_rejects_path(path)
    with RejectsFile(rejects_path) as rejects:
        count = produce_rows(open_source(path, file_format, shape), shape, topic, encoder(schema), send, rejects,
                             skip=skip)  # fmt: skip
    assert count == len(sent)
    entries = [json.loads(line) for line in rejects_path.read_text().splitlines()] if rejects_path.exists() else []
    assert len(entries) == rejects.count
    return sent, entries


def click(n: int, user: str = "user-1", **overrides: Any) -> dict[str, Any]:
    return {
        "event_id": f"e{n}", "user_id": user, "page": f"/page/{n}", "referrer": None,
        "event_time": epoch_ms(2026, 1, 1, 0, 0, n), "device": "MOBILE", **overrides,
    }  # fmt: skip


# --- CSV cells to the schema's types ------------------------------------------------------------------


def test_csv_cells_become_each_type() -> None:
    shape = RecordShape(EVERY_TYPE)
    cells = {
        "name": " Ada ", "count": "-12", "total": "9007199254740993", "ratio": "0.5", "score": "-1.25e3",
        "active": "TRUE", "note": "", "amount": "17", "kind": "BLUE", "at": "2026-03-01T12:34:56.789Z",
        "seen": "1767225600000", "again": "RED",
    }  # fmt: skip
    assert shape.record(shape.from_cells(cells)) == {
        "name": " Ada ", "count": -12, "total": 9007199254740993, "ratio": 0.5, "score": -1250.0, "active": True,
        "note": None, "amount": 17, "kind": "BLUE", "at": epoch_ms(2026, 3, 1, 12, 34, 56, 789),
        "seen": 1767225600000, "again": "RED",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-03-01T12:34:56.789Z", epoch_ms(2026, 3, 1, 12, 34, 56, 789)),
        ("2026-03-01T14:34:56.789+02:00", epoch_ms(2026, 3, 1, 12, 34, 56, 789)),  # the offset is applied
        ("2026-03-01 12:34:56+00:00", epoch_ms(2026, 3, 1, 12, 34, 56)),
        ("2026-03-01T12:34:56.789999Z", epoch_ms(2026, 3, 1, 12, 34, 56, 789)),  # microseconds floored
        ("1969-12-31T23:59:59.999Z", -1),
        ("1772368496789", 1772368496789),  # epoch milliseconds
        ("-5", -5),
    ],
)
def test_csv_timestamps_are_iso_8601_or_epoch_milliseconds(text: str, expected: int) -> None:
    assert from_text(text, {"type": "long", "logicalType": "timestamp-millis"}) == expected


@pytest.mark.parametrize(("text", "expected"), [("true", True), ("False", False), ("1", True), ("0", False)])
def test_csv_booleans(text: str, expected: bool) -> None:
    assert from_text(text, "boolean") is expected


def test_csv_empty_cells() -> None:
    shape = RecordShape(EVERY_TYPE)
    values = shape.from_cells({"name": "", "note": "", "amount": "", "kind": "", "seen": ""})
    # The empty string in a string, null in a nullable field, the default where a field has one.
    assert values == {"name": "", "note": None, "amount": None, "kind": "UNKNOWN", "seen": None}
    with pytest.raises(RowError, match=re.escape("count: '' is not an integer (int)")):
        shape.from_cells({"count": ""})


@pytest.mark.parametrize(
    ("cells", "reason"),
    [
        ({"count": "12.5"}, "count: '12.5' is not an integer (int)"),
        ({"total": "1_000"}, "total: '1_000' is not an integer (long)"),
        ({"ratio": "half"}, "ratio: 'half' is not a number (float)"),
        ({"score": "1_0.5"}, "score: '1_0.5' is not a number (double)"),
        ({"active": "yes"}, "active: 'yes' is not a boolean (true, false, 1 or 0)"),
        ({"kind": "GREEN"}, "kind: 'GREEN' is not one of UNKNOWN, RED, BLUE"),
        ({"amount": "many"}, "amount: 'many' is not an integer (long)"),
        ({"at": "yesterday"}, "at: 'yesterday' is neither an ISO 8601 timestamp nor epoch milliseconds"),
        ({"at": "2026-03-01T12:00:00"}, "at: '2026-03-01T12:00:00' has no UTC offset"),
        ({"count": "x", "kind": "y"}, "count: 'x' is not an integer (int); kind: 'y' is not one of"),  # every cell
    ],
)
def test_csv_cells_that_do_not_read_are_reasons(cells: dict[str, str], reason: str) -> None:
    with pytest.raises(RowError, match="^" + re.escape(reason)):
        RecordShape(EVERY_TYPE).from_cells(cells)


def test_values_out_of_range_fail_validation() -> None:
    shape = RecordShape(EVERY_TYPE)
    values = shape.from_cells({"name": "n", "count": "2147483648", "total": "1", "ratio": "1", "score": "1",
                               "active": "1", "at": "0"})  # fmt: skip
    with pytest.raises(RowError, match=re.escape("count: 2147483648 is not int")):
        shape.record(values)


# --- defaults, missing and unknown fields -------------------------------------------------------------


def test_missing_fields_take_the_schemas_default() -> None:
    row = {"event_id": "e1", "user_id": "u1", "page": "/", "event_time": 5}
    assert RecordShape(CLICK_SCHEMA).record(row) == {**row, "referrer": None, "device": "UNKNOWN"}


def test_missing_fields_without_default_and_unknown_fields_are_reasons() -> None:
    with pytest.raises(RowError) as err:
        RecordShape(CLICK_SCHEMA).record({"event_id": "e1", "page": "/", "event_time": 5, "referer": "/a"})
    assert str(err.value) == (
        "not fields of ClickEvent: referer; user_id: missing, and ClickEvent has no default for it"
    )


# --- key and partition ----------------------------------------------------------------------------------


@pytest.mark.parametrize("user", ["user-00001", "user-00042", "ünïcode-user", ""])
def test_key_is_the_key_field_and_partition_is_partition_for_the_user(user: str) -> None:
    key, partition = placement(CLICKS, click(7, user=user))
    assert key == b"e7"
    assert partition == partition_for(user, 4)


def test_without_partition_field_kafka_partitions_by_key() -> None:
    topic = Topic("t", partitions=4, cleanup=Cleanup.COMPACT, key_field="event_id")
    assert placement(topic, click(1)) == (b"e1", None)
    unkeyed = Topic("t", partitions=4, cleanup=Cleanup.DELETE)
    assert placement(unkeyed, click(1)) == (None, None)


def test_key_of_a_non_text_field_is_its_text() -> None:
    topic = Topic("t", partitions=3, cleanup=Cleanup.COMPACT, key_field="n", partition_field="n")
    assert placement(topic, {"n": 12}) == (b"12", partition_for("12", 3))


# --- whole files ------------------------------------------------------------------------------------------


def test_jsonl_rows_are_produced_and_bad_lines_rejected(tmp_path: Path) -> None:
    good = [click(1, user="u-a"), click(2, user="u-b", referrer="/page/1"), click(3, user="u-c")]
    missing_default = {k: v for k, v in click(4, user="u-d").items() if k not in ("referrer", "device")}
    lines = [
        json.dumps(good[0]),
        "",  # blank: no row
        json.dumps(good[1]),
        '{"event_id": "e9", "user_id": ',  # line 4: broken JSON
        json.dumps(click(10, device="SMARTWATCH")),
        json.dumps(click(11, event_time="2026-01-01T00:00:00Z")),  # JSON as it is: a string is no long
        "[1, 2]",
        json.dumps(missing_default),
        json.dumps(good[2]),
    ]
    path = tmp_path / "clicks.jsonl"
    path.write_text("\n".join(lines) + "\n")

    sent, rejects = run(path, FileFormat.JSONL)

    expected = [*good[:2], {**missing_default, "referrer": None, "device": "UNKNOWN"}, good[2]]
    assert [decoded(o.value) for o in sent] == expected
    assert [(o.key, o.partition) for o in sent] == [
        (r["event_id"].encode(), partition_for(r["user_id"], 4)) for r in expected
    ]
    assert [(r["row"], r["line"]) for r in rejects] == [(3, 4), (4, 5), (5, 6), (6, 7)]
    assert rejects[0]["reason"].startswith("not valid JSON:")
    assert rejects[0]["input"] == '{"event_id": "e9", "user_id": '
    assert rejects[1]["reason"] == "device: 'SMARTWATCH' is not one of UNKNOWN, DESKTOP, MOBILE, TABLET"
    assert rejects[1]["input"] == click(10, device="SMARTWATCH")  # the row as it was, to fix and produce again
    assert rejects[2]["reason"] == "event_time: '2026-01-01T00:00:00Z' is not timestamp-millis"
    assert rejects[3]["reason"] == "not a JSON object but list"


def test_csv_rows_are_converted_and_bad_rows_rejected(tmp_path: Path) -> None:
    path = tmp_path / "clicks.csv"
    path.write_bytes(
        b"\xef\xbb\xbfevent_id,user_id,page,referrer,event_time,device\r\n"  # a byte-order mark, as Excel writes
        b"e1,u-a,/a,,2026-01-01T00:00:01Z,MOBILE\r\n"
        b'e2,u-b,"/b,with comma",/a,1767225602000,\r\n'  # empty enum cell: its default
        b"e3,u-c,/c,,not-a-time,DESKTOP\r\n"
        b"e4,u-d,/d\r\n"
        b"\r\n"
        b"e5,u-e,/caf\xe9,,1767225605000,TABLET\r\n"  # Latin-1, not UTF-8
        b'e6,u-f,"/multi\nline",,2026-01-01T01:00:06+01:00,DESKTOP\r\n'
    )

    sent, rejects = run(path, FileFormat.CSV)

    assert [decoded(o.value) for o in sent] == [
        {"event_id": "e1", "user_id": "u-a", "page": "/a", "referrer": None,
         "event_time": epoch_ms(2026, 1, 1, 0, 0, 1), "device": "MOBILE"},
        {"event_id": "e2", "user_id": "u-b", "page": "/b,with comma", "referrer": "/a",
         "event_time": epoch_ms(2026, 1, 1, 0, 0, 2), "device": "UNKNOWN"},
        {"event_id": "e6", "user_id": "u-f", "page": "/multi\nline", "referrer": None,
         "event_time": epoch_ms(2026, 1, 1, 0, 0, 6), "device": "DESKTOP"},
    ]  # fmt: skip
    assert [(o.key, o.partition) for o in sent] == [
        (b"e1", partition_for("u-a", 4)), (b"e2", partition_for("u-b", 4)), (b"e6", partition_for("u-f", 4))
    ]  # fmt: skip
    assert [(r["row"], r["line"], r["reason"]) for r in rejects] == [
        (3, 4, "event_time: 'not-a-time' is neither an ISO 8601 timestamp nor epoch milliseconds"),
        (4, 5, "3 cells, but the header names 6 columns"),
        (5, 7, "page: is not UTF-8 text"),
    ]
    assert rejects[0]["input"]["event_time"] == "not-a-time"
    assert rejects[2]["input"]["page"] == "/caf\\xe9"


def _parquet(path: Path, rows: dict[str, list[Any]], time_type: pa.DataType) -> None:
    pq.write_table(
        pa.table({**rows, "event_time": pa.array(rows["event_time"], type=time_type)}), path, row_group_size=2
    )


@pytest.mark.parametrize("time_type", [pa.timestamp("ms", tz="UTC"), pa.timestamp("us"), pa.int64()])
def test_parquet_rows_are_produced_and_bad_rows_rejected(tmp_path: Path, time_type: pa.DataType) -> None:
    times = [epoch_ms(2026, 1, 1, 0, 0, n) for n in range(5)]
    column: list[Any] = (
        times if pa.types.is_integer(time_type) else [datetime.fromtimestamp(t // 1000, UTC) for t in times]
    )
    if pa.types.is_timestamp(time_type) and time_type.tz is None:
        column = [t.replace(tzinfo=None) for t in column]  # stored without a zone: counted from the epoch as UTC
    path = tmp_path / "clicks.parquet"
    _parquet(
        path,
        {
            "event_id": ["e0", "e1", "e2", "e3", "e4"],
            "user_id": ["u-a", "u-b", None, "u-d", "u-e"],
            "page": ["/0", "/1", "/2", "/3", "/4"],
            "referrer": [None, "/0", None, None, None],
            "event_time": column,
            "device": ["MOBILE", "DESKTOP", "MOBILE", "PHONE", "TABLET"],
        },
        time_type,
    )

    sent, rejects = run(path, FileFormat.PARQUET)

    devices = ["MOBILE", "DESKTOP", "TABLET"]
    assert [decoded(o.value) for o in sent] == [
        {"event_id": f"e{n}", "user_id": u, "page": f"/{n}", "referrer": r, "event_time": times[n], "device": d}
        for n, u, r, d in ((0, "u-a", None, devices[0]), (1, "u-b", "/0", devices[1]), (4, "u-e", None, devices[2]))
    ]
    assert [o.partition for o in sent] == [partition_for(u, 4) for u in ("u-a", "u-b", "u-e")]
    assert [(r["row"], r["reason"]) for r in rejects] == [
        (3, "user_id: None is not string"),
        (4, "device: 'PHONE' is not one of UNKNOWN, DESKTOP, MOBILE, TABLET"),
    ]
    assert "line" not in rejects[0]


def test_a_file_without_rejects_leaves_no_rejects_file(tmp_path: Path) -> None:
    path = tmp_path / "clicks.jsonl"
    path.write_text(json.dumps(click(1)) + "\n")
    default_rejects_path(path).write_text("from an earlier run\n")
    sent, rejects = run(path, FileFormat.JSONL)
    assert (len(sent), rejects) == (1, [])
    assert not default_rejects_path(path).exists()
    assert default_rejects_path(path) == tmp_path / "clicks.jsonl.rejected.jsonl"


# --- files that are not their format ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "content", "file_format", "message"),
    [
        ("c.csv", b"PAR1\x00\x00\x01binary", FileFormat.CSV, "is not CSV: it is a binary file"),
        ("c.csv", b"", FileFormat.CSV, "is empty: a CSV file starts with a header row"),
        ("c.csv", b"event_id,user_id,page,event_time,referer\n", FileFormat.CSV,
         "column(s) referer are not fields of ClickEvent"),
        ("c.csv", b"event_id,page,event_time\n", FileFormat.CSV, "no column for user_id (ClickEvent has no default"),
        ("c.csv", b"event_id,event_id,user_id,page,event_time\n", FileFormat.CSV,
         "column(s) event_id appear more than once"),
        ("c.jsonl", b'[{"event_id": "e1"}]\n', FileFormat.JSONL,
         "is not JSON lines (one JSON object per line): its first line is a JSON value, not an object"),
        ("c.jsonl", b"event_id,user_id\ne1,u1\n", FileFormat.JSONL, "its first line is not JSON"),
        ("c.parquet", b"event_id,user_id\n", FileFormat.PARQUET, "is not a Parquet file"),
    ],
)  # fmt: skip
def test_a_file_not_of_its_format_is_refused_whole(
    tmp_path: Path, name: str, content: bytes, file_format: FileFormat, message: str
) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(KappaError, match=re.escape(message)):
        open_source(path, file_format, RecordShape(CLICK_SCHEMA))


def test_a_missing_file_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(KappaError, match=re.escape(f"cannot read {tmp_path / 'nope.csv'}: No such file")):
        open_source(tmp_path / "nope.csv", FileFormat.CSV, RecordShape(CLICK_SCHEMA))


def test_one_bad_first_line_is_a_reject_not_a_refusal(tmp_path: Path) -> None:
    path = tmp_path / "clicks.jsonl"
    path.write_text("not json\n" + json.dumps(click(1)) + "\n")
    sent, rejects = run(path, FileFormat.JSONL)
    assert (len(sent), [(r["row"], r["line"]) for r in rejects]) == (1, [(1, 1)])


# --- format, topic, progress --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [("a.jsonl", FileFormat.JSONL), ("a.json", FileFormat.JSONL), ("a.NDJSON", FileFormat.JSONL),
     ("a.csv", FileFormat.CSV), ("dir.v1/a.parquet", FileFormat.PARQUET)],
)  # fmt: skip
def test_format_from_the_extension(name: str, expected: FileFormat) -> None:
    assert detect_format(Path(name)) is expected


def test_an_explicit_format_wins_and_an_unknown_extension_asks_for_one() -> None:
    assert detect_format(Path("rows.txt"), "csv") is FileFormat.CSV
    assert detect_format(Path("rows.csv"), "jsonl") is FileFormat.JSONL
    with pytest.raises(KappaError, match=re.escape("pass --format jsonl|csv|parquet")):
        detect_format(Path("rows.txt"))


def test_an_unknown_topic_names_the_declared_ones() -> None:
    other = Topic("user_profiles", partitions=4, cleanup=Cleanup.COMPACT)
    assert find_topic("clicks", [other, CLICKS]) is CLICKS
    with pytest.raises(KappaError) as err:
        find_topic("click", [other, CLICKS])
    assert str(err.value) == "no topic 'click' is declared; the declared topics are: clicks, user_profiles"


def test_progress_is_drawn_only_once_the_run_lasts(tmp_path: Path) -> None:
    path = tmp_path / "clicks.jsonl"
    path.write_text("".join(json.dumps(click(n, user=f"u{n}")) + "\n" for n in range(200)))
    shape = RecordShape(CLICK_SCHEMA)
    for after_s, drawn in ((0.0, True), (60.0, False)):
        out = io.StringIO()
        bar = Progress(out, after_s=after_s)
        with RejectsFile(tmp_path / "r.jsonl") as rejects:
            produce_rows(open_source(path, FileFormat.JSONL, shape), shape, CLICKS, encoder(CLICK_SCHEMA),
                         lambda _record, _row: None, rejects, bar)  # fmt: skip
        bar.finish()
        assert bar.drawn is drawn
        if drawn:
            last = out.getvalue().rstrip("\n").split("\r")[-1]
            assert re.fullmatch(r"\[#{30}\] 100% [\d,]+ rows/s", last), last
        else:
            assert out.getvalue() == ""


def test_a_rejects_path_that_cannot_be_written_fails_before_any_row(tmp_path: Path) -> None:
    with pytest.raises(KappaError, match=re.escape(f"cannot write the rejects file {tmp_path / 'no' / 'r.jsonl'}")):
        RejectsFile(tmp_path / "no" / "r.jsonl")


def test_rows_in_the_topic_already_are_skipped_and_each_record_names_its_row(tmp_path: Path) -> None:
    path = tmp_path / "clicks.jsonl"
    path.write_text("".join(json.dumps(click(n, user=f"u{n}")) + "\n" for n in range(6)))
    rows: list[int] = []
    sent, rejects = run(path, FileFormat.JSONL, skip=frozenset({1, 4}), rows=rows)
    assert rows == [2, 3, 5, 6]  # 1-based data rows, as the rejects file and the receipt number them
    assert [decoded(o.value)["event_id"] for o in sent] == [click(n)["event_id"] for n in (1, 2, 4, 5)]
    assert rejects == []


def test_row_ranges_read_as_an_operator_would_type_them() -> None:
    assert ranges([]) == ""
    assert ranges([7, 1, 2, 3, 9, 10]) == "1-3, 7, 9-10"
    assert ranges(list(range(1, 40, 2)), shown=2) == "1, 3 and 18 more ranges"


def test_a_rerun_at_a_rate_paces_only_the_rows_it_sends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "clicks.jsonl"
    path.write_text("".join(json.dumps(click(n, user=f"u-{n}")) + "\n" for n in range(40)))
    slept: list[float] = []
    monkeypatch.setattr("kappa.ops.produce_file.time.sleep", slept.append)
    shape, sent = RecordShape(CLICK_SCHEMA), []
    with RejectsFile(default_rejects_path(path)) as rejects:
        count = produce_rows(open_source(path, FileFormat.JSONL, shape), shape, CLICKS, encoder(CLICK_SCHEMA),
                             lambda record, row: sent.append(row), rejects, skip=frozenset(range(1, 39)),
                             rate=20)  # fmt: skip
    assert (count, sent) == (2, [39, 40])
    assert max(slept) <= 2 / 20  # two rows at 20 a second: the 38 in the topic already cost no wait


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_while_sending_stops_at_the_next_row_and_raises_nothing(tmp_path: Path, signum: int) -> None:
    """A signal raised as KeyboardInterrupt inside the Kafka client's delivery callback came out of `poll` as a
    SystemError (CI): inside `interrupts_noted` a signal only sets the event, and the rows stop after the one
    being sent. Outside it, Ctrl-C raises again."""
    path = tmp_path / "clicks.jsonl"
    path.write_text("".join(json.dumps(click(n, user=f"u-{n}")) + "\n" for n in range(10)))
    shape, sent = RecordShape(CLICK_SCHEMA), []

    def send(_record: Outgoing, row: int) -> None:
        sent.append(row)
        if row == 3:
            os.kill(os.getpid(), signum)  # delivered while this callback runs, as under the producer's poll

    with RejectsFile(default_rejects_path(path)) as rejects, Interrupts().noting() as interrupts:
        count = produce_rows(open_source(path, FileFormat.JSONL, shape), shape, CLICKS, encoder(CLICK_SCHEMA),
                             send, rejects, stop=interrupts)  # fmt: skip
        assert interrupts.noted
    assert (count, sent) == (3, [1, 2, 3])
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGINT)  # the handlers are back


def test_an_interrupt_ends_the_wait_between_paced_rows_at_once(tmp_path: Path) -> None:
    path = tmp_path / "clicks.jsonl"
    path.write_text("".join(json.dumps(click(n, user=f"u-{n}")) + "\n" for n in range(3)))
    shape, sent = RecordShape(CLICK_SCHEMA), []
    started = time.monotonic()
    ctrl_c = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    with RejectsFile(default_rejects_path(path)) as rejects, Interrupts().noting() as interrupts:
        ctrl_c.start()
        produce_rows(open_source(path, FileFormat.JSONL, shape), shape, CLICKS, encoder(CLICK_SCHEMA),
                     lambda _record, row: sent.append(row), rejects, rate=0.01, stop=interrupts)  # fmt: skip
    assert sent == []  # the first row would have waited 100 s
    assert time.monotonic() - started < 10


def test_an_ignored_signal_stays_ignored_while_interrupts_are_noted() -> None:
    """A run in the background (nohup, `&` in a script) ignores SIGINT: it must not start to stop on one."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with Interrupts().noting() as interrupts:
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            signal.raise_signal(signal.SIGINT)
            signal.raise_signal(signal.SIGTERM)  # not ignored: noted
        assert (interrupts.noted, signal.getsignal(signal.SIGINT)) == (True, signal.SIG_IGN)
        with Interrupts().noting() as quiet:
            signal.raise_signal(signal.SIGINT)
        assert not quiet.noted
    finally:
        signal.signal(signal.SIGINT, previous)


# --- CSV typing in batches (pyarrow.csv) against cell by cell (from_text) ----------------------------------------

TS_MS = {"type": "long", "logicalType": "timestamp-millis"}
TS_US = {"type": "long", "logicalType": "timestamp-micros"}
DATE = {"type": "int", "logicalType": "date"}
# Cells pyarrow reads differently from from_text, or not at all, or that only one of them reads.
TRICKY_CELLS = [
    "", " ", "5", "+5", "-5", "007", " 5", "5 ", "0x10", "0X1F", "1e3", "99999999999999999999", "-0", "\u0663",
    "1_0", "inf", "-inf", "nan", "NaN", "-nan", "Infinity", "infinity", "INF", "1e5", ".5", "5.", "+1.5", " 1.5",
    "1d5", "0x1p3", "1e400", "-0.0", "1e-400", "true", "True", "TRUE", "tRUE", "1", "0", "yes", " true", "false ",
    "2026-03-01T12:34:56.789Z", "2026-03-01T14:34:56.789+02:00", "2026-03-01 12:34:56+00:00",
    "2026-03-01T12:34:56.789999Z", "1969-12-31T23:59:59.999Z", "1969-12-31T23:59:59.9995Z", "2026-03-01T12:00:00",
    "2026-03-01", "2026-03-01T12Z", "2026-03-01T12:34Z", "2026-03-01T12:34:56+0200", "2026-03-01T12:34:56+02",
    "20260301T123456Z", "2026-03-01T23:59:60Z", "1772368496789", "2026-02-30T00:00:00Z", "0001-01-01T00:00:00Z",
    "9999-12-31T23:59:59.999Z", "2026-03-01T24:00:00Z", "2026-03-01t12:34:56z", "2026-03-01T12:34:56-00:00",
    "2026-03-01T12:34:56.123456789Z", "2026-03-01T12:34:56+02:00:30", "20260301", "2026-3-1", "19000",
    "5,6", "5\n6", "5\r", "\x1f", "caf\udce9", "RED", " RED",
]  # fmt: skip
CELL_TYPES: list[tuple[Any, bool, Any]] = [  # (type, has a default, the default)
    ("int", False, None), ("long", False, None), ("float", False, None), ("double", False, None),
    ("boolean", False, None), (TS_MS, False, None), (TS_US, False, None), (DATE, False, None),
    (["null", "long"], True, None), (["null", TS_MS], True, None), (["double", "null"], False, None),
    ("long", True, 7), ("boolean", True, True), (TS_MS, True, 0), ("string", False, None),
    (["null", "string"], True, None), ({"type": "enum", "name": "K", "symbols": ["RED", "BLUE"]}, True, "RED"),
    (["long", "string"], False, None),
]  # fmt: skip


def _exact(value: Any) -> Any:
    """A value compared with its type (True is not 1) and a float by its bits (NaN equals its NaN)."""
    return (type(value), struct.pack("<d", value)) if isinstance(value, float) else (type(value), value)


def _cell_by_cell(field: Field, cells: list[str]) -> list[Any]:
    """The definition: each cell alone through from_cells (from_text), as its value or its reason."""
    expected = []
    for cell in cells:
        try:
            expected.append(_exact(RecordShape({"type": "record", "name": "R", "fields": [
                {"name": field.name, "type": field.type, **({"default": field.default} if field.has_default else {})}
            ]}).from_cells({field.name: cell})[field.name]))  # fmt: skip
        except RowError as exc:
            expected.append(str(exc))
    return expected


def _in_batches(field: Field, cells: list[str]) -> list[Any]:
    typed = CsvTyping({field.name: field}, [field.name]).rows([[c] for c in cells])
    return [str(t) if isinstance(t, RowError) else _exact(t[field.name]) for t in typed]


@pytest.mark.parametrize(("avro_type", "has_default", "default"), CELL_TYPES)
def test_batches_type_every_tricky_cell_as_from_text_does(avro_type: Any, has_default: bool, default: Any) -> None:
    field = Field("f", parse_schema(avro_type) if isinstance(avro_type, dict) else avro_type, has_default, default)
    cells = [c for c in TRICKY_CELLS if c or has_default or "null" in str(avro_type)] + ["5"] * 3
    assert _in_batches(field, cells) == _cell_by_cell(field, cells)
    # One at a time as well: a batch pyarrow reads whole, where the batch above fell back to parts.
    assert [_in_batches(field, [c])[0] for c in cells] == _cell_by_cell(field, cells)


@settings(max_examples=40, deadline=None)
@given(
    kind=st.sampled_from(CELL_TYPES),
    cells=st.lists(
        st.one_of(st.sampled_from(TRICKY_CELLS), st.text(alphabet="0123456789+-.:eETZz xX_naifINF,\n", max_size=24)),
        max_size=30,
    ),
)
def test_batches_type_any_cells_as_from_text_does(kind: tuple[Any, bool, Any], cells: list[str]) -> None:
    avro_type, has_default, default = kind
    field = Field("f", parse_schema(avro_type) if isinstance(avro_type, dict) else avro_type, has_default, default)
    assert _in_batches(field, cells) == _cell_by_cell(field, cells)


def test_a_long_csv_is_typed_in_batches_and_every_bad_row_is_found(tmp_path: Path) -> None:
    bad = {7, 2048, 2049, 4100, 4999}  # at a batch's edges too
    lines = ["event_id,user_id,page,referrer,event_time,device"]
    for n in range(1, 5001):
        when = (
            "soon" if n in bad else (f"2026-01-01T00:00:{n % 60:02d}Z" if n < 3000 else str(epoch_ms(2026, 1, 2) + n))
        )
        lines.append(f"e{n},u{n % 7},/p/{n},{'' if n % 2 else '/r'},{when},{'TABLET' if n % 3 else ''}")
    path = tmp_path / "clicks.csv"
    path.write_text("\n".join(lines) + "\n")

    rows: list[int] = []
    sent, rejects = run(path, FileFormat.CSV, rows=rows)

    assert [(r["row"], r["line"], r["reason"]) for r in rejects] == [
        (n, n + 1, "event_time: 'soon' is neither an ISO 8601 timestamp nor epoch milliseconds") for n in sorted(bad)
    ]
    assert rows == [n for n in range(1, 5001) if n not in bad]
    values = [decoded(o.value) for o in sent]
    assert values[0] == {"event_id": "e1", "user_id": "u1", "page": "/p/1", "referrer": None,
                         "event_time": epoch_ms(2026, 1, 1, 0, 0, 1), "device": "TABLET"}  # fmt: skip
    assert values[-1] == {"event_id": "e5000", "user_id": f"u{5000 % 7}", "page": "/p/5000", "referrer": "/r",
                          "event_time": epoch_ms(2026, 1, 2) + 5000, "device": "TABLET"}  # fmt: skip
    assert [v["device"] for v in values[:3]] == ["TABLET", "TABLET", "UNKNOWN"]  # an empty cell: the default


def test_each_fields_type_stands_on_its_own() -> None:
    """Named types are written out where they are used (fastavro's expand_schema): a field validates alone."""
    shape = RecordShape(EVERY_TYPE)
    assert shape.by_name["again"].type == [
        "null", {"type": "enum", "name": "io.kappa.test.Kind", "symbols": ["UNKNOWN", "RED", "BLUE"],
                 "default": "UNKNOWN"},
    ]  # fmt: skip
    for path in sorted(SCHEMAS.glob("*.avsc")):
        schema = json.loads(path.read_text())
        if isinstance(schema, dict) and schema.get("type") == "record":
            for field in RecordShape(schema).fields:
                parse_schema(field.type)  # no bare name left that it would not know


def test_a_message_while_the_bar_is_up_is_a_line_of_its_own() -> None:
    out = io.StringIO()
    bar = Progress(out, after_s=0.0)
    bar.update(0.5, 10)
    bar.write("kappa produce: Kafka is not answering")
    bar.update(1.0, 20)
    bar.finish()
    lines = [line.split("\r")[-1] for line in out.getvalue().split("\n")]
    assert "kappa produce: Kafka is not answering" in lines
    assert re.fullmatch(r"\[#{30}\] 100% [\d,]+ rows/s", lines[-2]), lines
    assert lines[-1] == ""
    assert bar.drawn


def test_a_batch_of_clean_cells_is_read_by_pyarrow(monkeypatch: pytest.MonkeyPatch) -> None:
    def cell_by_cell(text: str, _avro_type: Any) -> Any:
        raise AssertionError(f"{text!r} was read cell by cell")

    monkeypatch.setattr("kappa.ops.csv_cells._from_text_one", cell_by_cell)
    fields = {
        "n": Field("n", "long", False, None),
        "ok": Field("ok", "boolean", False, None),
        "at": Field("at", parse_schema(TS_MS), False, None),
        "x": Field("x", ["null", "double"], True, None),
    }
    typed = CsvTyping(fields, list(fields)).rows([["-12", "true", "2026-03-01T12:34:56.789Z", "0.5"],
                                                  ["7", "0", "1969-12-31T23:59:59.999Z", ""]])  # fmt: skip
    assert typed == [
        {"n": -12, "ok": True, "at": epoch_ms(2026, 3, 1, 12, 34, 56, 789), "x": 0.5},
        {"n": 7, "ok": False, "at": -1, "x": None},
    ]
