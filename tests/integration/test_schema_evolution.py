"""A topic holding two writer versions (a field added with a default) decodes in one Spark batch."""

import copy
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import SparkSession

from kappa.contracts.avro_serde import AvroDecoder, AvroEncoder
from kappa.contracts.registry import Registry, value_subject
from kappa.contracts.schema_files import topic_value_schema
from kappa.contracts.topic_declarations import Cleanup, Topic
from kappa.core.settings import KappaSettings
from kappa.kafka.clients import Outgoing, admin_client, produce_all
from kappa.kafka.topic_admin import apply
from kappa.spark.topic_io import decode_topic, kafka_source, writer_schemas


def test_old_and_new_writers_in_one_batch(
    stack: KappaSettings, spark: SparkSession, unique_name: Callable[[str], str]
) -> None:
    topic = Topic(unique_name("evolving"), partitions=1, cleanup=Cleanup.COMPACT, value_schema="clicks.avsc")
    apply(admin_client(stack), [topic])
    v2: dict[str, Any] = topic_value_schema(stack.schemas_path, topic)
    v1 = copy.deepcopy(v2)
    v1["fields"] = [f for f in v1["fields"] if f["name"] != "device"]  # the field v2 added, with a default

    def click(i: int) -> dict[str, Any]:
        return {
            "event_id": f"e{i}",
            "user_id": "u",
            "page": "/p",
            "referrer": None,
            "event_time": datetime(2026, 1, 1, tzinfo=UTC),
        }

    subject = value_subject(topic.name)
    with Registry(stack.registry) as registry:
        old = AvroEncoder(registry, subject, v1)  # version 1 registered, then producers write with it
        new = AvroEncoder(registry, subject, v2)  # version 2: BACKWARD compatible (default UNKNOWN)
        assert old.schema_id != new.schema_id
        values = [old.encode(click(i)) for i in range(5)] + [
            new.encode(click(i) | {"device": "TABLET"}) for i in range(5, 10)
        ]
        produce_all(stack, topic.name, (Outgoing(f"e{i}".encode(), v) for i, v in enumerate(values)))
        writers = writer_schemas(registry, topic)
        python_decoded = [AvroDecoder(registry, v2).decode(v)["device"] for v in values]

    assert set(writers) == {old.schema_id, new.schema_id}
    raw = kafka_source(spark, stack, topic, streaming=False)  # one batch holding both versions
    decoded = decode_topic(raw, v2, writers, "test", 1)
    rows = decoded.records.orderBy("kafka_offset").select("event_id", "device").collect()
    assert [(r.event_id, r.device) for r in rows] == [(f"e{i}", "UNKNOWN") for i in range(5)] + [
        (f"e{i}", "TABLET") for i in range(5, 10)
    ]
    assert decoded.dead_letters.count() == 0
    # The Python decoder resolves the same way.
    assert python_decoded == ["UNKNOWN"] * 5 + ["TABLET"] * 5
