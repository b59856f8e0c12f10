"""Interoperability with Avro clients we did not write: confluent-kafka's serde and Apache Avro."""

import io
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import avro.io
import avro.schema
import pytest
from confluent_kafka import Consumer
from confluent_kafka.schema_registry import SchemaRegistryClient, topic_subject_name_strategy
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from kappa.contracts.schema_files import topic_value_schema
from kappa.contracts.topic_declarations import Topic
from kappa.contracts.wire_format import unframe
from kappa.core.settings import KappaSettings
from kappa.kafka.clients import Outgoing, produce_all
from kappa.kafka.partitioning import partition_for
from kappa.spark.topic_io import encode_for_topic, kafka_options, read_topic

CLICKS = [
    {
        "event_id": f"e{i}",
        "user_id": f"u{i % 3}",
        "page": f"/p/{i}",
        "referrer": None if i % 2 else "/home",
        "event_time": datetime(2026, 3, 1, 12, 0, i, tzinfo=UTC),
        "device": ["DESKTOP", "MOBILE", "TABLET"][i % 3],
    }
    for i in range(20)
]


def _consume_all(stack: KappaSettings, topic: str, count: int, group: str) -> list[Any]:
    consumer = Consumer({"bootstrap.servers": stack.bootstrap, "group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[Any] = []
    try:
        for _ in range(60):
            got += [m for m in consumer.consume(100, timeout=1.0) if m.error() is None]
            if len(got) >= count:
                break
    finally:
        consumer.close()
    return got


@pytest.mark.slow
def test_spark_encoder_is_read_by_confluent_and_apache_avro(
    stack: KappaSettings, spark: SparkSession, avro_topic: Callable[..., Topic], unique_name: Callable[[str], str]
) -> None:
    topic = avro_topic("spark-written")
    rows = spark.createDataFrame(
        [(c["event_id"], c["user_id"], c["page"], c["referrer"], c["event_time"], c["device"]) for c in CLICKS],
        "event_id string, user_id string, page string, referrer string, event_time timestamp, device string",
    )
    encoded = encode_for_topic(rows, stack, topic, key=F.col("event_id"))
    encoded.write.format("kafka").options(**kafka_options(stack)).option("topic", topic.name).save()

    messages = _consume_all(stack, topic.name, len(CLICKS), unique_name("g"))
    # topic_subject_name_strategy: the Confluent default, named explicitly; confluent-kafka 2.16 otherwise first
    # asks the registry for topic "associations", an API Apicurio's ccompat does not have.
    registry_client = SchemaRegistryClient({"url": stack.registry, "timeout": 10})
    deserializer = AvroDeserializer(registry_client, conf={"subject.name.strategy": topic_subject_name_strategy})
    context = SerializationContext(topic.name, MessageField.VALUE)
    by_confluent = sorted((deserializer(m.value(), context) for m in messages), key=lambda r: r["event_id"])
    assert by_confluent == sorted(CLICKS, key=lambda r: r["event_id"])

    # Apache Avro (the reference implementation) decodes the body after the 5-byte header.
    schema = avro.schema.parse(json.dumps(topic_value_schema(stack.schemas_path, topic)))
    _, body = unframe(messages[0].value())
    decoded = avro.io.DatumReader(schema).read(avro.io.BinaryDecoder(io.BytesIO(body)))
    assert decoded["event_id"] == messages[0].key().decode()
    assert decoded["event_time"] == next(c["event_time"] for c in CLICKS if c["event_id"] == decoded["event_id"])


def test_confluent_serializer_is_read_by_the_spark_decoder(
    stack: KappaSettings, spark: SparkSession, avro_topic: Callable[..., Topic]
) -> None:
    topic = avro_topic("confluent-written")
    schema = topic_value_schema(stack.schemas_path, topic)
    serializer = AvroSerializer(
        SchemaRegistryClient({"url": stack.registry, "timeout": 10}),
        json.dumps(schema),
        conf={
            "auto.register.schemas": False,
            "use.latest.version": True,
            "subject.name.strategy": topic_subject_name_strategy,
        },
    )
    ctx = SerializationContext(topic.name, MessageField.VALUE)
    records = (  # each click in its user's partition, as the topic declares
        Outgoing(c["event_id"].encode(), serializer(c, ctx), partition_for(c["user_id"], topic.partitions))
        for c in CLICKS
    )
    produce_all(stack, topic.name, records)

    decoded = read_topic(spark, stack, topic, job="test", job_version=1, streaming=False)
    assert decoded.dead_letters.count() == 0
    got = [
        r.asDict() for r in decoded.records.drop("key", "kafka_partition", "kafka_offset", "kafka_timestamp").collect()
    ]
    for row in got:
        row["event_time"] = row["event_time"].astimezone(UTC)
    assert sorted(got, key=lambda r: r["event_id"]) == sorted(CLICKS, key=lambda r: r["event_id"])
