"""A compacted topic as its readers see it: the latest value per key, a tombstone deleting the key (on a
topic that declares deletes; elsewhere a null value is a dead letter, as in every job).

What downstream teams compare and query: reprocessing is judged on the final value per key, not on the
sequence of updates that led there (a live run re-emits corrections a replay never needed).
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kappa.contracts.registry import registry_of
from kappa.contracts.topic_declarations import Topic
from kappa.core.settings import KappaSettings
from kappa.spark.changes import last_per_key
from kappa.spark.topic_io import DELETED, decode_topic, kafka_source, placement, value_schema, writer_schemas


def latest_per_key(
    spark: SparkSession, settings: KappaSettings, topic: Topic, *, written_until_ms: int | None = None
) -> DataFrame:
    """A batch read of the whole topic: one row per live key (the schema's fields, `key`, Kafka position).
    With `written_until_ms`, the topic as it was then: only records whose (create) time is not later count.

    Raises nothing for undecodable records, but they are not in the result: count them with
    `decode_topic(...).dead_letters` when it matters.
    """
    with registry_of(settings) as registry:
        writers = writer_schemas(registry, topic)
    raw = kafka_source(spark, settings, topic, streaming=False)
    decoded = decode_topic(
        raw, value_schema(settings, topic), writers, job="reader", job_version=0,
        key_field=topic.key_field, deletes=topic.deletes, placed_by=placement(topic),
    )  # fmt: skip
    changes = decoded.changes  # records and tombstones from one read of the topic
    if written_until_ms is not None:
        changes = changes.where(F.col("kafka_timestamp") <= F.timestamp_millis(F.lit(written_until_ms)))
    latest = last_per_key(changes, ["key"])  # a key lives in one partition; its last record in log order wins
    return latest.where(~F.col(DELETED)).drop(DELETED) if topic.deletes else latest
