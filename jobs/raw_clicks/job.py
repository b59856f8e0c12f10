"""raw_clicks query: Kafka `clicks` -> Delta `raw_clicks`, append, exactly once through the checkpoint."""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from jobs.catalog import CLICKS
from jobs.raw_clicks.transforms import parse_clicks
from kappa.settings import KappaSettings

NAME = "raw_clicks"
VERSION = 1


def table_path(settings: KappaSettings) -> str:
    return f"{settings.delta_root}/{NAME}/v{VERSION}"


def checkpoint_path(settings: KappaSettings) -> str:
    return f"{settings.checkpoint_root}/{NAME}/v{VERSION}"


def start(spark: SparkSession, settings: KappaSettings, available_now: bool = True) -> StreamingQuery:
    source = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", settings.bootstrap)
        .option("subscribe", CLICKS.name)
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", "true")
        .load()
    )
    writer = (
        parse_clicks(source)
        .writeStream.format("delta")
        .queryName(f"{NAME}_v{VERSION}")
        .option("checkpointLocation", checkpoint_path(settings))
        .outputMode("append")
    )
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="5 seconds")
    return writer.start(table_path(settings))
