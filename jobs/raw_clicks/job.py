"""raw_clicks: Kafka `clicks` (Confluent Avro) -> Delta `raw_clicks`; undecodable records -> `clicks.dlq`.

Two streaming queries over the same topic, each with its own checkpoint: the table append and the
dead-letter sink. Every input record lands in exactly one of them.
"""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from jobs.catalog import CLICKS
from jobs.raw_clicks.transforms import click_rows
from kappa.settings import KappaSettings
from kappa.topic_io import dead_letter_sink, read_topic

NAME = "raw_clicks"
VERSION = 1


def table_path(settings: KappaSettings) -> str:
    return f"{settings.delta_root}/{NAME}/v{VERSION}"


def checkpoint_path(settings: KappaSettings, query: str) -> str:
    return f"{settings.checkpoint_root}/{NAME}/v{VERSION}/{query}"


def start(spark: SparkSession, settings: KappaSettings, available_now: bool = True) -> list[StreamingQuery]:
    clicks = read_topic(spark, settings, CLICKS, job=NAME, job_version=VERSION)
    trigger = {"availableNow": True} if available_now else {"processingTime": "5 seconds"}
    table = (
        click_rows(clicks.records)
        .writeStream.format("delta")
        .queryName(f"{NAME}_v{VERSION}")
        .option("checkpointLocation", checkpoint_path(settings, "table"))
        .outputMode("append")
        .trigger(**trigger)
        .start(table_path(settings))
    )
    dead = (
        dead_letter_sink(clicks.dead_letters, settings, CLICKS)
        .queryName(f"{NAME}_v{VERSION}_dlq")
        .option("checkpointLocation", checkpoint_path(settings, "dlq"))
        .trigger(**trigger)
        .start()
    )
    return [table, dead]
