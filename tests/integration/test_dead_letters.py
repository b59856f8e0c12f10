"""Bad records go to <topic>.dlq with their reasons; counts reconcile; `kappa dlq` inspects and replays."""

import argparse
import uuid
from collections.abc import Callable
from datetime import UTC
from pathlib import Path

import deltalake
import pytest
from confluent_kafka import TopicPartition
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.clickstream.generator import Click
from kappa.cli.dlq import cmd_dlq_inspect
from kappa.contracts.avro_serde import AvroDecoder, AvroEncoder
from kappa.contracts.dead_letter_format import (
    H_JOB,
    H_JOB_VERSION,
    H_KIND,
    H_MESSAGE,
    H_SOURCE_OFFSET,
    H_SOURCE_PARTITION,
    H_SOURCE_TIMESTAMP,
    H_SOURCE_TOPIC,
    DeadLetterKind,
)
from kappa.contracts.registry import Registry, value_subject
from kappa.contracts.schema_files import topic_value_schema
from kappa.contracts.topic_declarations import SIDE_RETENTION_MS, Cleanup, Topic, dead_letters_of
from kappa.contracts.wire_format import WireFormatError, frame
from kappa.core.errors import KappaError
from kappa.core.settings import KappaSettings
from kappa.kafka.clients import Outgoing, admin_client, produce_all
from kappa.kafka.reading import whole_topic
from kappa.kafka.topic_admin import apply
from kappa.ops import dlq
from kappa.runtime import DeltaTable, JobContext, JobPlan, JobSpec, TablePlan
from kappa.runtime.binding import deployment_topics
from kappa.runtime.outputs import output_of
from kappa.runtime.runner import run_job
from kappa.spark.side_outputs import SIDE_COLUMNS, SIDE_KIND
from kappa.spark.topic_io import kafka_source, read_topic


@pytest.mark.slow
def test_bad_records_are_dead_lettered_counted_and_replayable(
    stack: KappaSettings, spark: SparkSession, avro_topic: Callable[..., Topic], tmp_path: Path
) -> None:
    topic = avro_topic("with-bad", partitions=1)  # one partition: offsets follow the produce order
    with Registry(stack.registry) as registry:
        encoder = AvroEncoder(registry, value_subject(topic.name), topic_value_schema(stack.schemas_path, topic))

        def click(event_id: str) -> bytes:
            return encoder.encode(Click(event_id, "u1", "/p", None, 1767225600000, "DESKTOP").as_avro())

        good = click("e-good")
        records = [Outgoing(f"g{i}".encode(), click(f"g{i}")) for i in range(10)]  # keyed by their event ids
    bad: dict[bytes, bytes | None] = {
        b"random": b"\x17\x99\x03",
        b"truncated": good[: len(good) // 2],
        b"wrong-magic": b"\x05" + good[1:],
        b"unknown-id": frame(987654, good[5:]),
        b"not-its-event-id": good,  # a decodable click under another key: compaction would keep a wrong identity
        b"null-value": None,  # a tombstone on a topic that declares no deletes
    }
    stamps = {k: 1767225600000 + 1000 * n for n, k in enumerate(bad)}  # record times a replay must keep
    records += [Outgoing(k, v, timestamp_ms=stamps[k]) for k, v in bad.items()]
    produce_all(stack, topic.name, records)

    # The platform's own path: a job's one query, its dead letters sent by the runtime beside its output.
    batches: list[int] = []

    def plan(ctx: JobContext) -> JobPlan:
        def write(records: DataFrame, batch_id: int) -> None:
            batches.append(records.count())

        return JobPlan(ctx.read(topic).rows, write)

    spec = JobSpec("dlq_test", 3, "counts its records", (topic,), DeltaTable("dlq_test"), plan)
    apply(admin_client(stack), deployment_topics(spec, spec.version))
    run = run_job(spec, stack.model_copy(update={"checkpoint_root": str(tmp_path / "cp")}), available_now=True)
    assert run.input_rows == {"dlq_test_v3": len(records)}  # one query, each input record read once
    decoded_count = sum(batches)

    report = dlq.inspect(stack, topic.name, samples=5)
    # Reconciliation: records in = records out + records dead-lettered.
    assert decoded_count + report.total == len(records)
    assert decoded_count == 10
    assert dict(report.by_kind) == {
        DeadLetterKind.NOT_CONFLUENT_FRAMED: 2,
        DeadLetterKind.UNDECODABLE: 1,
        DeadLetterKind.UNKNOWN_SCHEMA_ID: 1,
        DeadLetterKind.KEY_MISMATCH: 1,
        DeadLetterKind.TOMBSTONE_ON_SOURCE: 1,
    }
    letters = {d.key: d for samples in report.samples.values() for d in samples}
    assert {k: letters[k].value for k in bad} == bad  # original bytes, untouched
    unknown = letters[b"unknown-id"]
    assert unknown.headers[H_SOURCE_TOPIC] == topic.name
    assert unknown.headers[H_JOB] == "dlq_test"
    assert unknown.headers[H_JOB_VERSION] == "3"
    assert int(unknown.headers[H_SOURCE_OFFSET]) == 13
    assert "schema id 987654" in dlq.describe(unknown)

    wrong_key = dlq.describe(letters[b"not-its-event-id"])
    assert wrong_key.endswith("key 'not-its-event-id' is not the record's event_id 'e-good'")

    # Replay re-injects into the source topic, each dead letter once.
    assert dlq.replay(stack, topic.name, kind=DeadLetterKind.UNKNOWN_SCHEMA_ID) == (1, 5)
    assert dlq.replay(stack, topic.name, kind=DeadLetterKind.UNKNOWN_SCHEMA_ID) == (0, 0)
    assert dlq.replay(stack, topic.name) == (6, 0)
    assert dlq.replay(stack, topic.name) == (0, 0)
    again = read_topic(spark, stack, topic, job="dlq_test", job_version=3, streaming=False)
    assert again.records.count() == 10
    assert again.dead_letters.count() == 6 + 1 + 6  # the originals, plus what the two replays re-injected
    replayed = kafka_source(spark, stack, topic, streaming=False).where(F.col("offset") >= len(records)).collect()
    assert sorted((r.key, round(r.timestamp.astimezone(UTC).timestamp() * 1000)) for r in replayed) == sorted(
        [(b"unknown-id", stamps[b"unknown-id"]), *stamps.items()]
    )


@pytest.mark.slow
def test_a_table_jobs_late_records_go_to_its_versions_late_topic_and_leave_with_the_version(
    stack: KappaSettings, avro_topic: Callable[..., Topic], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A job writing a Delta table sets records aside as late like a topic job does: to its version's own `.late`
    topic (before, a table's late record went to its input's dead letters), which prepare creates and a retire
    deletes with the table."""
    topic = avro_topic("late-in", partitions=1)
    with Registry(stack.registry) as registry:
        encoder = AvroEncoder(registry, value_subject(topic.name), topic_value_schema(stack.schemas_path, topic))
        sent = {
            f"{'late' if i % 3 == 0 else 'on-time'}-{i}": encoder.encode(
                Click(f"{'late' if i % 3 == 0 else 'on-time'}-{i}", "u1", "/p", None, 1767225600000 + i).as_avro()
            )
            for i in range(12)
        }
    produce_all(stack, topic.name, [Outgoing(k.encode(), v) for k, v in sent.items()])

    def plan(ctx: JobContext) -> TablePlan:  # the rule a stateful operator would apply: here, by the event id
        rows = ctx.read(topic, with_raw=True).rows
        late = F.col(SIDE_KIND).isNull() & F.col("event_id").startswith("late")
        aside = {
            SIDE_KIND: F.lit(DeadLetterKind.LATE_EVENT.value), "side_message": F.lit("beyond the test's lateness"),
            "side_key": F.col("key").cast("binary"), "side_value": F.col("raw_value"),
            "side_topic": F.col("kafka_topic"), "side_partition": F.col("kafka_partition"),
            "side_offset": F.col("kafka_offset"), "side_timestamp": F.col("kafka_timestamp"),
        }  # fmt: skip
        marked = rows.select(
            F.when(~late, F.col("event_id")).alias("event_id"),
            *[F.when(late, value).otherwise(F.col(name)).alias(name) for name, value in aside.items()],
            *[F.col(name) for name in SIDE_COLUMNS if name not in aside],
        )
        return TablePlan(marked)

    settings = stack.model_copy(update={"checkpoint_root": str(tmp_path / "cp"), "delta_root": str(tmp_path / "d")})
    name = f"late_table_{uuid.uuid4().hex[:8]}"  # a job's name is an identifier; the table's and topic's its own
    spec = JobSpec(name, 1, "sets every third click aside", (topic,), DeltaTable(name), plan)
    output, version = output_of(spec.output), 4
    late_topic = output.late_events(version).name
    assert late_topic == f"delta.{name}.v{version}.late"
    with pytest.raises(KappaError, match=f"{late_topic} does not exist; jobs never create topics"):
        run_job(spec, settings, version=version, available_now=True)
    apply(admin_client(stack), deployment_topics(spec, version))  # what a replay's prepare and topics apply do
    run_job(spec, settings, version=version, available_now=True)

    table = deltalake.DeltaTable(output.location(settings, version)).to_pyarrow_table(columns=["event_id"])
    assert sorted(table.column("event_id").to_pylist()) == sorted(k for k in sent if k.startswith("on-time"))
    aside_records = {r.key(): r for r in whole_topic(stack, late_topic)}
    assert {k.decode(): v.value() for k, v in aside_records.items()} == {
        k: v for k, v in sent.items() if k.startswith("late")
    }  # the original bytes
    assert {dict(r.headers())[H_KIND] for r in aside_records.values()} == {DeadLetterKind.LATE_EVENT.value.encode()}
    assert list(whole_topic(stack, dead_letters_of(topic).name)) == []  # none went to the input's dead letters
    # `kappa dlq inspect` reads a late topic as it reads dead letters; a replay refuses it (they would be late again)
    report = dlq.inspect(stack, late_topic)
    assert (report.topic, report.records, dict(report.by_kind)) == (late_topic, 4, {"late-event": 4})
    assert report.by_job == {name: 4}
    capsys.readouterr()  # what the runs printed
    cmd_dlq_inspect(stack, argparse.Namespace(topic=late_topic, samples=1))
    said = capsys.readouterr().out
    assert said.startswith(f"{late_topic}: 4 late record(s), 4 set aside, reported by {name} 4\n"), said
    with pytest.raises(KappaError, match="late again"):
        dlq.replay(stack, late_topic)

    deleted = output.delete(settings, version)  # what `kappa replay retire` does to the version's output
    assert deleted == [late_topic, output.location(settings, version)]
    assert late_topic not in admin_client(stack).list_topics(timeout=15).topics
    assert not output.exists(settings, version)


def test_python_decoder_names_each_failure(stack: KappaSettings, avro_topic: Callable[..., Topic]) -> None:
    topic = avro_topic("py-bad")
    schema = topic_value_schema(stack.schemas_path, topic)
    with Registry(stack.registry) as registry:
        encoder = AvroEncoder(registry, value_subject(topic.name), schema)
        good = encoder.encode(Click("e", "u", "/p", None, 0).as_avro())
        decoder = AvroDecoder(registry, schema)
        assert decoder.decode(good)["event_id"] == "e"
        cases = {
            b"\x01\x02": DeadLetterKind.NOT_CONFLUENT_FRAMED,
            b"\x07" + good[1:]: DeadLetterKind.NOT_CONFLUENT_FRAMED,
            frame(424242, good[5:]): DeadLetterKind.UNKNOWN_SCHEMA_ID,
            good[:-3]: DeadLetterKind.UNDECODABLE,
            good + b"\x00\x00": DeadLetterKind.UNDECODABLE,  # trailing bytes: not one record
        }
        for value, kind in cases.items():
            with pytest.raises(WireFormatError) as err:
                decoder.decode(value)
            assert err.value.kind is kind, value


def _delete_before(stack: KappaSettings, topic: str, offset: int) -> int:
    """What time retention does to a partition's oldest segments, now: the records before `offset` deleted (the log
    start offset advanced). Returns the new log start offset."""
    admin = admin_client(stack)  # held until answered: a collected client cancels its requests
    [future] = admin.delete_records([TopicPartition(topic, 0, offset)]).values()
    return int(future.result(timeout=30).low_watermark)


def _records(stack: KappaSettings, topic: str) -> list[tuple[bytes | None, bytes | None, int]]:
    """(key, value, timestamp) of every record of a one-partition topic, in offset order."""
    return [(m.key(), m.value(), m.timestamp()[1]) for m in whole_topic(stack, topic)]


def test_inspect_and_replay_show_what_retention_kept(
    stack: KappaSettings, unique_name: Callable[[str], str], capsys: pytest.CaptureFixture[str]
) -> None:
    source = Topic(unique_name("retained"), partitions=1, cleanup=Cleanup.DELETE)
    letters_topic = dead_letters_of(source)  # the declared side topic: 30 days, cleanup=delete
    apply(admin_client(stack), [source, letters_topic])

    def letter(i: int) -> Outgoing:  # the i-th bad record, at offset 100 + i of the source, as a job reports it
        headers = {
            H_KIND: DeadLetterKind.UNDECODABLE, H_MESSAGE: f"bad {i}", H_SOURCE_TOPIC: source.name,
            H_SOURCE_PARTITION: "0", H_SOURCE_OFFSET: str(100 + i), H_SOURCE_TIMESTAMP: str(1767225600000 + 1000 * i),
            H_JOB: "retention_test", H_JOB_VERSION: "1",
        }  # fmt: skip
        return Outgoing(f"k{i}".encode(), f"v{i}".encode(), headers=[(k, v.encode()) for k, v in headers.items()])

    produce_all(stack, letters_topic.name, [letter(i) for i in range(10)])  # at dlq offsets 0..9, in order
    assert _delete_before(stack, letters_topic.name, 4) == 4  # letters 0..3 gone, as retention would remove them

    report = dlq.inspect(stack, source.name, samples=10)
    assert (report.total, report.records) == (6, 6)
    kept = sorted(int(d.source[2]) for samples in report.samples.values() for d in samples)
    assert kept == [100 + i for i in range(4, 10)]  # exactly the letters produced after the deleted ones
    assert report.log_starts == {0: 4}
    assert report.retention_ms == SIDE_RETENTION_MS

    capsys.readouterr()
    cmd_dlq_inspect(stack, argparse.Namespace(topic=source.name, samples=3))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{letters_topic.name}: 6 bad record(s), 6 dead letter(s), reported by retention_test 6"
    assert lines[1] == (
        "older dead letters were deleted by the topic's retention (30 days): the log starts at offset 4 of partition 0"
    )

    # Replay re-injects what remains, with its original keys, values and timestamps, and nothing deleted.
    assert dlq.replay(stack, source.name) == (6, 0)
    assert _records(stack, source.name) == [
        (f"k{i}".encode(), f"v{i}".encode(), 1767225600000 + 1000 * i) for i in range(4, 10)
    ]

    # Two more letters, deleted before any replay read them: its progress (offset 10) is now before the log start.
    produce_all(stack, letters_topic.name, [letter(10), letter(11)])
    assert _delete_before(stack, letters_topic.name, 12) == 12  # the whole partition: nothing left to wait for
    assert dlq.replay(stack, source.name) == (0, 0)
    emptied = dlq.inspect(stack, source.name)
    assert (emptied.total, emptied.log_starts) == (0, {0: 12})
    assert len(_records(stack, source.name)) == 6
