"""Writing a micro-batch's outputs from `foreachBatch`: the main topic and a `<topic>.late` side topic.

A job whose one output needs keyed updates, tombstones and a side topic writes them per batch. The batch
write is at least once (a re-run batch re-sends the same keys with the same values); the outputs are
compacted topics keyed by entity, so a re-send changes nothing for readers of the latest value per key.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kappa.deadletter import H_JOB, H_JOB_VERSION, H_KIND, H_SOURCE_OFFSET, H_SOURCE_PARTITION, H_SOURCE_TOPIC
from kappa.settings import KappaSettings
from kappa.topic_io import kafka_header, kafka_options

# The columns a transform fills for a late input record: its original bytes and where it came from.
LATE_COLUMNS = ("late_value", "late_topic", "late_partition", "late_offset")


def late_records(rows: DataFrame, kind: str, job: str, job_version: int) -> DataFrame:
    """Rows carrying LATE_COLUMNS -> Kafka records of the side topic: original bytes, headers naming why."""
    return rows.select(
        F.lit(None).cast("binary").alias("key"),
        F.col("late_value").alias("value"),
        F.array(
            kafka_header(H_KIND, F.lit(kind)),
            kafka_header(H_SOURCE_TOPIC, F.col("late_topic")),
            kafka_header(H_SOURCE_PARTITION, F.col("late_partition")),
            kafka_header(H_SOURCE_OFFSET, F.col("late_offset")),
            kafka_header(H_JOB, F.lit(job)),
            kafka_header(H_JOB_VERSION, F.lit(str(job_version))),
        ).alias("headers"),
    )


def publish(records: DataFrame, settings: KappaSettings, topic: str) -> None:
    """Write Kafka records (key, value[, partition, headers]) of one batch, durably (acks=all, idempotent)."""
    (
        records.write.format("kafka")
        .options(**kafka_options(settings))
        .option("topic", topic)
        .option("kafka.acks", "all")
        .option("kafka.enable.idempotence", "true")
        .option("kafka.compression.type", "lz4")
        .save()
    )
