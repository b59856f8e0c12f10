"""raw_clicks' transform on hand-made Kafka rows, plus the Python/Spark partitioning agreement."""

import json
from datetime import UTC, datetime

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.raw_clicks.transforms import parse_clicks
from kappa.partitioning import partition_column, partition_for


def test_parse_clicks_gives_one_typed_row_per_event(spark: SparkSession) -> None:
    value = json.dumps(
        {"event_id": "e1", "user_id": "u1", "page": "/a", "referrer": None, "event_time_ms": 1767225600123}
    )
    kafka_rows = spark.createDataFrame(
        [(b"e1", value.encode(), 2, 17)], "key binary, value binary, partition int, offset long"
    )
    rows = parse_clicks(kafka_rows).collect()
    assert [r.asDict() for r in rows] == [
        {
            "event_id": "e1",
            "user_id": "u1",
            "page": "/a",
            "referrer": None,
            "event_time": datetime(2026, 1, 1, 0, 0, 0, 123000, tzinfo=UTC).replace(tzinfo=None),
            "kafka_partition": 2,
            "kafka_offset": 17,
        }
    ]


def test_spark_partitions_users_like_the_python_producer(spark: SparkSession) -> None:
    users = [f"user-{i:05d}" for i in range(200)]
    df = spark.createDataFrame([(u,) for u in users], "user_id string")
    got = {r.user_id: r.p for r in df.select("user_id", partition_column(F.col("user_id"), 4).alias("p")).collect()}
    assert got == {u: partition_for(u, 4) for u in users}
