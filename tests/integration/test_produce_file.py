"""`kappa produce <topic> FILE` on the real stack, run as a user runs it: a JSON-lines file and a CSV file of
clicks into a topic declared like `clicks`; every good row arrives once, keyed by its event id and in its
user's partition, also when a file is produced twice; bad rows are in the rejects file and nowhere else; a schema
not registered is refused with nothing produced.

The CLI finds topics in `jobs/catalog.py`: each test writes a `jobs` package declaring only its own topics and
runs the CLI from there (PYTHONPATH first), as replay_pipeline does with its copies of jobs/.
"""

import csv
import json
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from confluent_kafka import TopicPartition

from jobs.catalog import CLICKS
from jobs.clickstream.generator import clicks
from kappa.contracts.avro_serde import AvroDecoder
from kappa.contracts.registry import Registry, value_subject
from kappa.contracts.schema_files import topic_value_schema
from kappa.contracts.schema_rollout import apply_schemas
from kappa.contracts.topic_declarations import Cleanup, Topic
from kappa.core.settings import KappaSettings
from kappa.kafka.clients import admin_client
from kappa.kafka.partitioning import partition_for
from kappa.kafka.reading import whole_topic
from kappa.kafka.topic_admin import apply
from tests.environment import stack_env

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def declare(code: Path, topics: list[Topic]) -> None:
    """A `jobs` package in `code` (no jobs) whose catalog module declares exactly these topics."""
    (code / "jobs").mkdir(parents=True)
    (code / "jobs" / "__init__.py").write_text("")
    declarations = "".join(
        f"TOPIC_{n} = Topic(name={t.name!r}, partitions={t.partitions}, cleanup=Cleanup({t.cleanup.value!r}), "
        f"value_schema={t.value_schema!r}, key_field={t.key_field!r}, partition_field={t.partition_field!r})\n"
        for n, t in enumerate(topics)
    )
    (code / "jobs" / "catalog.py").write_text(
        f"from kappa.contracts.topic_declarations import Cleanup, Topic\n\n{declarations}"
    )


def kappa_produce(stack: KappaSettings, code: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kappa.cli", "produce", *args],
        cwd=code,  # `python -m` puts it first on the path: its jobs/ is the catalog the CLI reads
        env=stack_env(stack, PYTHONPATH=str(code)),
        capture_output=True,
        text=True,
        timeout=300,
    )


def consume_all(stack: KappaSettings, topic: Topic) -> list[tuple[int, bytes | None, bytes | None]]:
    """(partition, key, value) of every record the topic holds now, each partition in offset order."""
    return [(int(m.partition() or 0), m.key(), m.value()) for m in whole_topic(stack, topic.name)]


def declared_file(stack: KappaSettings, topic: Topic, tmp_path: Path, rows: list[dict[str, Any]]) -> tuple[Path, Path]:
    """The topic created with its schema registered, declared in a `jobs` package of its own, and the rows in a
    JSON-lines file: -> (the package's folder, the file)."""
    apply(admin_client(stack), [topic])
    apply_schemas(stack.schemas_path, [topic], stack.registry)
    code = tmp_path / "code"
    declare(code, [topic])
    jsonl = tmp_path / "clicks.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return code, jsonl


def as_ms(moment: datetime) -> int:
    return (moment - EPOCH) // timedelta(milliseconds=1)


def iso(ms: int) -> str:
    return (EPOCH + timedelta(milliseconds=ms)).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def row(c: Any) -> dict[str, Any]:
    return {"event_id": c.event_id, "user_id": c.user_id, "page": c.page, "referrer": c.referrer,
            "event_time": c.event_time_ms, "device": c.device}  # fmt: skip


def test_produce_jsonl_and_csv_into_a_declared_topic(
    stack: KappaSettings, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    topic = replace(CLICKS, name=unique_name("produce-clicks"))
    assert (topic.key_field, topic.partition_field) == ("event_id", "user_id")
    apply(admin_client(stack), [topic])
    apply_schemas(stack.schemas_path, [topic], stack.registry)
    schema = topic_value_schema(stack.schemas_path, topic)
    with Registry(stack.registry) as registry:
        schema_id = registry.lookup(value_subject(topic.name), schema)
    assert schema_id is not None
    code = tmp_path / "code"
    declare(code, [topic])
    made = [row(c) for c in clicks(80, users=9, seed=23)]
    by_json, by_csv = made[:40], made[40:]

    # JSON lines: 40 good rows, 4 bad ones among them.
    jsonl = tmp_path / "clicks.jsonl"
    lines = [json.dumps(r) for r in by_json]
    lines.insert(5, json.dumps({**by_json[0], "event_id": "bad-device", "device": "SMARTWATCH"}))  # line 6
    lines.insert(10, json.dumps({k: v for k, v in by_json[1].items() if k != "user_id"} | {"event_id": "bad-user"}))
    lines.insert(20, '{"event_id": "bad-json", "user_id": "u"')  # line 21
    lines.insert(30, json.dumps({**by_json[2], "event_id": "bad-time", "event_time": "2026-01-01T00:00:00Z"}))
    jsonl.write_text("\n".join(lines) + "\n")

    done = kappa_produce(stack, code, topic.name, str(jsonl))
    rejects = tmp_path / "clicks.jsonl.rejected.jsonl"
    assert (done.returncode, done.stdout) == (
        1, f"produced 40 records to {topic.name} (schema id {schema_id})\nrejected 4 rows: see {rejects}\n"
    ), done.stderr  # fmt: skip
    entries = [json.loads(line) for line in rejects.read_text().splitlines()]
    assert [(e["row"], e["line"]) for e in entries] == [(6, 6), (11, 11), (21, 21), (31, 31)]
    assert [e["reason"] for e in entries][:2] == [
        "device: 'SMARTWATCH' is not one of UNKNOWN, DESKTOP, MOBILE, TABLET",
        "user_id: missing, and ClickEvent has no default for it",
    ]
    assert entries[2]["reason"].startswith("not valid JSON")
    assert entries[3]["reason"] == "event_time: '2026-01-01T00:00:00Z' is not timestamp-millis"
    # Run again by mistake: the receipt beside the file says every row is in already; nothing is produced twice.
    again = kappa_produce(stack, code, topic.name, str(jsonl))
    assert (again.returncode, again.stdout.split(" (delete")[0]) == (
        0, f"nothing to do: all 40 rows of {jsonl} are in {topic.name}, produced by an earlier run"
    ), again.stderr  # fmt: skip

    # CSV: text cells converted (timestamps as ISO 8601 or epoch ms, an empty referrer is null); 3 bad rows.
    csv_path = tmp_path / "clicks.csv"
    with csv_path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["event_id", "user_id", "page", "referrer", "event_time", "device"])
        for n, r in enumerate(by_csv):
            when = iso(r["event_time"]) if n % 2 else str(r["event_time"])
            out.writerow([r["event_id"], r["user_id"], r["page"], r["referrer"] or "", when, r["device"]])
            if n == 3:
                out.writerow(["bad-when", "u", "/p", "", "soon", "MOBILE"])  # line 6, row 5
            if n == 9:
                out.writerow(["bad-cells", "u", "/p"])
            if n == 19:
                out.writerow(["bad-phone", "u", "/p", "", "0", "PHONE"])
    csv_rejects = tmp_path / "csv-rejects.jsonl"
    done = kappa_produce(stack, code, topic.name, str(csv_path), "--rejects", str(csv_rejects))
    assert (done.returncode, done.stdout) == (
        1, f"produced 40 records to {topic.name} (schema id {schema_id})\nrejected 3 rows: see {csv_rejects}\n"
    ), done.stderr  # fmt: skip
    entries = [json.loads(line) for line in csv_rejects.read_text().splitlines()]
    assert [(e["row"], e["line"], e["input"][0] if isinstance(e["input"], list) else e["input"]["event_id"])
            for e in entries] == [(5, 6, "bad-when"), (12, 13, "bad-cells"), (23, 24, "bad-phone")]  # fmt: skip
    assert [e["reason"] for e in entries] == [
        "event_time: 'soon' is neither an ISO 8601 timestamp nor epoch milliseconds",
        "3 cells, but the header names 6 columns",
        "device: 'PHONE' is not one of UNKNOWN, DESKTOP, MOBILE, TABLET",
    ]

    # Every good row exactly once, with its key and its user's partition; no bad row.
    records = consume_all(stack, topic)
    with Registry(stack.registry) as registry:
        decoder = AvroDecoder(registry, schema)
        values = [decoder.decode(value) for _, _, value in records]
    assert Counter(v["event_id"] for v in values) == Counter(r["event_id"] for r in made)
    expected = {r["event_id"]: r for r in made}
    for (partition, key, _), value in zip(records, values, strict=True):
        assert {**value, "event_time": as_ms(value["event_time"])} == expected[value["event_id"]]
        assert key == value["event_id"].encode("utf-8")
        assert partition == partition_for(value["user_id"], topic.partitions)


def test_a_schema_not_registered_is_refused_and_nothing_produced(
    stack: KappaSettings, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    topic = replace(CLICKS, name=unique_name("produce-unregistered"))
    apply(admin_client(stack), [topic])  # the topic, but no `kappa schemas apply`
    code = tmp_path / "code"
    declare(code, [topic])
    jsonl = tmp_path / "clicks.jsonl"
    jsonl.write_text("".join(json.dumps(row(c)) + "\n" for c in clicks(5, seed=3)))

    done = kappa_produce(stack, code, topic.name, str(jsonl))

    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""
    assert done.stderr == (
        f"kappa: error: the schema {topic.value_schema} is not registered under {value_subject(topic.name)}: "
        "run `kappa schemas apply` first (nothing was produced)\n"
    )
    assert consume_all(stack, topic) == []
    assert not (tmp_path / "clicks.jsonl.rejected.jsonl").exists()


def test_an_interrupted_run_says_so_and_run_again_adds_the_rest_exactly_once(
    stack: KappaSettings, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    topic = replace(CLICKS, name=unique_name("produce-interrupted"))
    made = [row(c) for c in clicks(400, users=9, seed=29)]
    code, jsonl = declared_file(stack, topic, tmp_path, made)
    command = [sys.executable, "-m", "kappa.cli", "produce", topic.name, str(jsonl), "--rate", "100"]
    running = subprocess.Popen(command, cwd=code, env=stack_env(stack, PYTHONPATH=str(code)),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 60
    while len(consume_all(stack, topic)) < 50:  # under way: 4 s of rows left at 100 rows/s
        assert running.poll() is None, running.communicate()
        assert time.monotonic() < deadline, "no row arrived within 60 s"
        time.sleep(0.2)
    running.send_signal(signal.SIGINT)  # Ctrl-C: it stops reading, waits for what it sent, and says so
    out, err = running.communicate(timeout=60)
    assert running.returncode == 130, out + err
    assert "interrupted: run the same command again to produce the rest" in out
    first = len(consume_all(stack, topic))
    assert 50 <= first < len(made)

    again = kappa_produce(stack, code, topic.name, str(jsonl))
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"produced {len(made) - first} records" in again.stdout
    assert f"; {first} rows were in the topic already, from an earlier run" in again.stdout
    receipt = json.loads((tmp_path / "clicks.jsonl.produced.json").read_text())
    assert (receipt["complete"], receipt["rows"], len(receipt["runs"])) == (True, len(made), 2)
    ids = Counter(r["event_id"] for r in _decoded(stack, topic))
    assert ids == Counter(r["event_id"] for r in made)  # every row once: none lost at the interrupt, none twice


def test_a_run_after_retention_deleted_the_first_runs_oldest_records_finds_the_rest(
    stack: KappaSettings, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    """Retention deleted the oldest records of an unfinished first run (the log start moved past the receipt's
    start offsets): the next run reads on from the log start and produces only the rows deleted, never a row
    that is still there (a reader reset to the log's end would find none and produce every row again)."""
    topic = replace(CLICKS, name=unique_name("produce-retained"), cleanup=Cleanup.DELETE)  # Kafka deletes records
    made = [row(c) for c in clicks(120, users=9, seed=31)]
    code, jsonl = declared_file(stack, topic, tmp_path, made)
    first = kappa_produce(stack, code, topic.name, str(jsonl))
    assert first.returncode == 0, first.stdout + first.stderr
    # As an interrupted run leaves it: the receipt not complete, so the next run looks for the rows.
    where = tmp_path / "clicks.jsonl.produced.json"
    where.write_text(json.dumps(json.loads(where.read_text()) | {"complete": False, "rows": 0}))
    # Retention, by hand: partition 0 loses its first 10 records.
    deleted = [r["event_id"] for r in _decoded(stack, topic, partition=0)[:10]]
    assert len(deleted) == 10
    admin = admin_client(stack)  # held until the answer: a collected client never resolves its futures
    for future in admin.delete_records([TopicPartition(topic.name, 0, 10)], request_timeout=30).values():
        assert future.result(timeout=30).low_watermark == 10
    assert len(consume_all(stack, topic)) == len(made) - 10  # gone from the topic, as retention leaves it

    again = kappa_produce(stack, code, topic.name, str(jsonl))
    assert again.returncode == 0, again.stdout + again.stderr
    assert "produced 10 records" in again.stdout
    assert f"; {len(made) - 10} rows were in the topic already, from an earlier run" in again.stdout
    ids = Counter(r["event_id"] for r in _decoded(stack, topic))
    assert ids == Counter(r["event_id"] for r in made)  # the deleted rows once more, the others not twice
    assert all(ids[e] == 1 for e in deleted)


def _decoded(stack: KappaSettings, topic: Topic, partition: int | None = None) -> list[dict[str, Any]]:
    """The topic's values (of one partition, in offset order), decoded."""
    with Registry(stack.registry) as registry:
        decoder = AvroDecoder(registry, topic_value_schema(stack.schemas_path, topic))
        records = consume_all(stack, topic)
        return [decoder.decode(value) for p, _, value in records if partition is None or p == partition]
