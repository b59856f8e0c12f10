"""Spark reads a Kafka topic and writes a Delta table; delta-rs and DuckDB read the same rows back."""

import json
from collections.abc import Callable
from pathlib import Path

from deltalake import DeltaTable
from pyspark.sql import SparkSession

from jobs.raw_clicks.transforms import parse_clicks
from kappa.duckdb_delta import connect
from kappa.generate import clicks
from kappa.kafka_client import Outgoing, admin_client, produce_all
from kappa.partitioning import partition_for
from kappa.settings import KappaSettings
from kappa.topics import Cleanup, Topic, apply


def test_kafka_to_delta_read_back_by_delta_rs_and_duckdb(
    stack: KappaSettings, spark: SparkSession, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    topic = Topic(unique_name("clicks"), partitions=3, cleanup=Cleanup.COMPACT)
    apply(admin_client(stack), [topic])
    events = list(clicks(3000, users=40, seed=11))
    produce_all(
        stack,
        topic.name,
        (
            Outgoing(
                key=e.event_id.encode(),
                value=json.dumps(e.as_json_dict()).encode(),
                partition=partition_for(e.user_id, topic.partitions),
            )
            for e in events
        ),
    )

    table = str(tmp_path / "clicks_table")
    source = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", stack.bootstrap)
        .option("subscribe", topic.name)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", 1000)  # several micro-batches
        .load()
    )
    query = (
        parse_clicks(source)
        .writeStream.format("delta")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start(table)
    )
    query.awaitTermination(300)
    assert query.exception() is None

    expected = sorted((e.event_id, e.user_id, e.page) for e in events)
    by_delta_rs = DeltaTable(table).to_pyarrow_table(columns=["event_id", "user_id", "page"]).to_pylist()
    assert sorted((r["event_id"], r["user_id"], r["page"]) for r in by_delta_rs) == expected

    by_spark = spark.read.format("delta").load(table).select("event_id", "user_id", "page").collect()
    assert sorted(tuple(r) for r in by_spark) == expected

    # Every user's events landed in the one partition the producer chose for that user.
    partitions = spark.read.format("delta").load(table).groupBy("user_id").agg({"kafka_partition": "max"}).collect()
    assert all(r[1] == partition_for(r.user_id, topic.partitions) for r in partitions)

    with connect() as con:
        count = con.execute(f"select count(*) from delta_scan('{table}')").fetchone()
    assert count == (3000,)
