"""Pure transforms on hand-made rows: Confluent Avro decoding in Spark, and raw_clicks' rows."""

import io
import json
import threading
from datetime import UTC, datetime
from typing import Any

from fastavro import parse_schema, schemaless_writer
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.catalog import CLICKS
from jobs.raw_clicks.transforms import TABLE_COLUMNS, click_rows
from kappa.contracts.schema_files import topic_value_schema
from kappa.contracts.wire_format import frame
from kappa.core.settings import load_settings
from kappa.kafka.partitioning import partition_column, partition_for
from kappa.spark.confluent_avro import decode_confluent
from kappa.spark.topic_io import decode_topic

SCHEMA = topic_value_schema(load_settings().schemas_path, CLICKS)
CLICK = {
    "event_id": "e1",
    "user_id": "u1",
    "page": "/a",
    "referrer": None,
    "event_time": datetime(2026, 1, 1, 0, 0, 0, 123000, tzinfo=UTC),
    "device": "MOBILE",
}


def avro(record: dict[str, Any], schema: dict[str, Any] = SCHEMA) -> bytes:
    buffer = io.BytesIO()
    schemaless_writer(buffer, parse_schema(schema), record)
    return buffer.getvalue()


def kafka_rows(spark: SparkSession, values: list[bytes | None]) -> Any:
    rows = [(f"k{i}".encode(), v, "clicks", 0, i, datetime(2026, 1, 1, tzinfo=UTC)) for i, v in enumerate(values)]
    return spark.createDataFrame(
        rows, "key binary, value binary, topic string, partition int, offset long, timestamp timestamp"
    )


def test_decoded_click_becomes_one_table_row(spark: SparkSession) -> None:
    decoded = decode_topic(kafka_rows(spark, [frame(7, avro(CLICK))]), SCHEMA, {7: SCHEMA}, "raw_clicks", 1)
    rows = [r.asDict() for r in click_rows(decoded.records).collect()]
    for row in rows:  # pyspark hands out naive datetimes in the local time zone
        row["event_time"] = row["event_time"].astimezone(UTC)
    assert rows == [
        {
            "event_id": "e1",
            "user_id": "u1",
            "page": "/a",
            "referrer": None,
            "event_time": CLICK["event_time"],
            "device": "MOBILE",
            "kafka_partition": 0,
            "kafka_offset": 0,
        }
    ]
    assert tuple(click_rows(decoded.records).columns) == TABLE_COLUMNS


def test_each_bad_value_is_a_dead_letter_with_its_reason(spark: SparkSession) -> None:
    good = frame(7, avro(CLICK))
    values: list[bytes | None] = [
        good,
        b"\x01" + good[1:],  # wrong magic byte
        b"\x00\x01",  # shorter than the header
        frame(99, avro(CLICK)),  # schema id nobody registered
        good[: len(good) // 2],  # truncated body
        frame(7, b"\xff\xff\xff\xff\xff\xff"),  # garbage body
        None,  # a tombstone: a delete where the topic declares deletes, a dead letter elsewhere
    ]
    with_deletes = decode_topic(kafka_rows(spark, values), SCHEMA, {7: SCHEMA}, "raw_clicks", 1, deletes=True)
    assert [r.kafka_offset for r in with_deletes.records.collect()] == [0]
    assert [r.kafka_offset for r in with_deletes.tombstones.collect()] == [6]
    assert with_deletes.dead_letters.count() == 5
    decoded = decode_topic(kafka_rows(spark, values), SCHEMA, {7: SCHEMA}, "raw_clicks", 1)
    assert [r.kafka_offset for r in decoded.records.collect()] == [0]
    assert decoded.tombstones.count() == 0
    dead = {
        r.offset: (r.kind, r.message)
        for r in decode_topic(kafka_rows(spark, values), SCHEMA, {7: SCHEMA}, "raw_clicks", 1)
        .dead_letters.select(
            F.col("headers")[0]["value"].cast("string").alias("kind"),
            F.col("headers")[1]["value"].cast("string").alias("message"),
            F.col("headers")[4]["value"].cast("string").cast("long").alias("offset"),
        )
        .collect()
    }
    assert {o: k for o, (k, _) in dead.items()} == {
        1: "not-confluent-framed",
        2: "not-confluent-framed",
        3: "unknown-schema-id",
        4: "undecodable",
        5: "undecodable",
        6: "tombstone-on-source",
    }
    assert dead[3][1] == "schema id 99 is not a registered version of this topic's subject (known: [7])"
    assert dead[1][1].startswith("value is ")
    assert "first byte 01" in dead[1][1]


def test_spark_partitions_users_like_the_python_producer(spark: SparkSession) -> None:
    users = [f"user-{i:05d}" for i in range(200)]
    df = spark.createDataFrame([(u,) for u in users], "user_id string")
    got = {r.user_id: r.p for r in df.select("user_id", partition_column(F.col("user_id"), 4).alias("p")).collect()}
    assert got == {u: partition_for(u, 4) for u in users}


def test_two_writer_versions_decode_into_the_reader_schema(spark: SparkSession) -> None:
    old = json.loads(json.dumps(SCHEMA))
    old["fields"] = [f for f in old["fields"] if f["name"] != "device"]  # v1: before `device` existed
    old_click = {k: v for k, v in CLICK.items() if k != "device"} | {"event_id": "old"}
    values = [frame(1, avro(old_click, old)), frame(2, avro(CLICK))]
    decoded = decode_topic(kafka_rows(spark, values), SCHEMA, {1: old, 2: SCHEMA}, "raw_clicks", 1)
    assert [(r.event_id, r.device) for r in decoded.records.orderBy("kafka_offset").collect()] == [
        ("old", "UNKNOWN"),  # defaulted from the reader schema
        ("e1", "MOBILE"),
    ]


def test_a_decoded_frame_plans_in_many_threads_at_once(spark: SparkSession) -> None:
    """A job's queries (output, dead letters) plan the same decoded frame in their own threads, at any batch.

    A self-join makes Spark copy the decoders in every plan, the copying a streaming batch does. Before the options
    became a literal, 4 threads x 50 plans failed 28 times with `DUPLICATED_MAP_KEY` (a shared map builder).
    """
    writers = {7: SCHEMA, 8: SCHEMA, 9: SCHEMA}
    decoded = decode_confluent(kafka_rows(spark, [frame(7, avro(CLICK))]), SCHEMA, writers)
    failures: list[str] = []

    def plan_repeatedly() -> None:
        for _ in range(50):
            try:
                decoded.crossJoin(decoded)._jdf.queryExecution().optimizedPlan()
            except Exception as error:  # every failure is the finding
                failures.append(str(error).splitlines()[0])

    threads = [threading.Thread(target=plan_repeatedly) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert [r.record.event_id for r in decoded.collect()] == ["e1"]
