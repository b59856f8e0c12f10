"""Pure DataFrame transforms of raw_clicks (no sources, no sinks)."""

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

CLICK_JSON = StructType(
    [
        StructField("event_id", StringType(), nullable=False),
        StructField("user_id", StringType(), nullable=False),
        StructField("page", StringType(), nullable=False),
        StructField("referrer", StringType(), nullable=True),
        StructField("event_time_ms", LongType(), nullable=False),
    ]
)


def _event_time(ms: Column) -> Column:
    return F.timestamp_millis(ms)


def parse_clicks(kafka_rows: DataFrame) -> DataFrame:
    """Kafka rows (key, value, topic, partition, offset, timestamp) -> one row per click."""
    parsed = kafka_rows.select(
        F.from_json(F.col("value").cast("string"), CLICK_JSON).alias("click"),
        F.col("partition").alias("kafka_partition"),
        F.col("offset").alias("kafka_offset"),
    )
    # one row per click event
    return parsed.select(
        "click.event_id",
        "click.user_id",
        "click.page",
        "click.referrer",
        _event_time(F.col("click.event_time_ms")).alias("event_time"),
        "kafka_partition",
        "kafka_offset",
    )
