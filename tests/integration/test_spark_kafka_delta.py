"""Spark reads a Kafka topic and writes a Delta table; delta-rs and DuckDB read the same rows back."""

from collections.abc import Callable
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from jobs.clickstream.generator import click_messages, clicks
from jobs.raw_clicks.transforms import click_rows
from kappa.contracts.avro_serde import AvroEncoder
from kappa.contracts.registry import Registry, value_subject
from kappa.contracts.schema_files import topic_value_schema
from kappa.contracts.topic_declarations import Topic
from kappa.core.settings import KappaSettings
from kappa.kafka.clients import produce_all
from kappa.kafka.partitioning import partition_for
from kappa.ops.duckdb_delta import connect
from kappa.spark.topic_io import read_topic


@pytest.mark.slow
def test_kafka_to_delta_read_back_by_delta_rs_and_duckdb(
    stack: KappaSettings, spark: SparkSession, avro_topic: Callable[..., Topic], tmp_path: Path
) -> None:
    topic = avro_topic("clicks", partitions=3)
    events = list(clicks(3000, users=40, seed=11))
    with Registry(stack.registry) as registry:
        encoder = AvroEncoder(registry, value_subject(topic.name), topic_value_schema(stack.schemas_path, topic))
        produce_all(stack, topic.name, click_messages(events, encoder.encode, topic.partitions))

    table = str(tmp_path / "clicks_table")
    decoded = read_topic(spark, stack, topic, job="test", job_version=1, max_offsets_per_trigger=1000)
    query = (
        click_rows(decoded.records)
        .writeStream.format("delta")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start(table)
    )
    query.awaitTermination(300)
    assert query.exception() is None
    assert len(query.recentProgress) >= 3  # maxOffsetsPerTrigger split it into several micro-batches

    expected = sorted((e.event_id, e.user_id, e.page, e.device) for e in events)
    by_delta_rs = DeltaTable(table).to_pyarrow_table(columns=["event_id", "user_id", "page", "device"]).to_pylist()
    assert sorted((r["event_id"], r["user_id"], r["page"], r["device"]) for r in by_delta_rs) == expected

    by_spark = spark.read.format("delta").load(table).select("event_id", "user_id", "page", "device").collect()
    assert sorted(tuple(r) for r in by_spark) == expected

    # Every user's events landed in the one partition the producer chose for that user.
    partitions = spark.read.format("delta").load(table).groupBy("user_id").agg({"kafka_partition": "max"}).collect()
    assert all(r[1] == partition_for(r.user_id, topic.partitions) for r in partitions)

    with connect() as con:
        count = con.execute(f"select count(*), count(distinct user_id) from delta_scan('{table}')").fetchone()
    assert count == (3000, 40)
