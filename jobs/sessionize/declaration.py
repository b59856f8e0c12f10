"""sessionize: enriched clicks -> `sessions` (upserts keyed by session id, tombstones for merged-away
sessions); events beyond the allowed lateness -> `sessions.late`; undecodable input -> its dead letters.

Settings: `gap_minutes` (inactivity that ends a session, 30) and `allowed_lateness_minutes` (how far behind a
user's latest event an event may arrive and still count, 120).
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from jobs.catalog import ENRICHED_CLICKS, SESSIONS
from jobs.sessionize.logic import MINUTE_MS
from jobs.sessionize.transforms import LATE, RETRACT, UPSERT, session_changes
from kappa.deadletter import (
    H_JOB,
    H_JOB_VERSION,
    H_KIND,
    H_SOURCE_OFFSET,
    H_SOURCE_PARTITION,
    H_SOURCE_TOPIC,
    DeadLetterKind,
)
from kappa.partitioning import partition_column
from kappa.runtime import JobContext, JobSpec
from kappa.topic_io import kafka_header, kafka_options, topic_encoder
from kappa.topics import Topic


def start(ctx: JobContext) -> Sequence[StreamingQuery]:
    [source] = ctx.spec.inputs
    output = ctx.spec.output
    assert isinstance(output, Topic), "sessionize writes a topic"
    late_topic = f"{output.name}.late"
    gap_ms = int(ctx.spec.settings["gap_minutes"] * MINUTE_MS)
    lateness_ms = int(ctx.spec.settings["allowed_lateness_minutes"] * MINUTE_MS)
    encode = topic_encoder(ctx.settings, output)
    partitions = output.partitions

    decoded = ctx.read(source, with_raw=True)  # late events keep their original bytes
    changes = session_changes(decoded.records, gap_ms, lateness_ms)

    def write(batch: DataFrame, batch_id: int) -> None:
        batch.persist()
        try:
            sessions = batch.where(F.col("kind") == UPSERT).withColumn(
                "segment", F.coalesce(F.col("segment"), F.lit("UNKNOWN"))
            )
            by_user = partition_column(F.col("user_id"), partitions)
            upserts = encode(sessions, F.col("session_id"), by_user)
            tombstones = batch.where(F.col("kind") == RETRACT).select(
                F.col("session_id").cast("binary").alias("key"), F.lit(None).cast("binary").alias("value"),
                by_user.alias("partition"),
            )  # fmt: skip
            _save(upserts.unionByName(tombstones), ctx, output.name)
            late = batch.where(F.col("kind") == LATE).select(
                F.lit(None).cast("binary").alias("key"),
                F.col("late_value").alias("value"),
                F.array(
                    kafka_header(H_KIND, F.lit(DeadLetterKind.LATE_EVENT.value)),
                    kafka_header(H_SOURCE_TOPIC, F.col("late_topic")),
                    kafka_header(H_SOURCE_PARTITION, F.col("late_partition")),
                    kafka_header(H_SOURCE_OFFSET, F.col("late_offset")),
                    kafka_header(H_JOB, F.lit(ctx.spec.name)),
                    kafka_header(H_JOB_VERSION, F.lit(str(ctx.version))),
                ).alias("headers"),
            )
            _save(late, ctx, late_topic)
        finally:
            batch.unpersist()

    sessions_query = (
        changes.writeStream.foreachBatch(write)
        .queryName(ctx.query_name())
        .option("checkpointLocation", ctx.checkpoint())
        .outputMode("update")
        .trigger(**ctx.trigger())
        .start()
    )
    dead = ctx.start_dead_letters(decoded, source)
    return [sessions_query, dead]


def _save(df: DataFrame, ctx: JobContext, topic: str) -> None:
    # At least once per batch: a re-run batch re-sends the same keys with the same values (compacted topics).
    df.write.format("kafka").options(**kafka_options(ctx.settings)).option("topic", topic).option(
        "kafka.acks", "all"
    ).save()


JOB = JobSpec(
    name="sessionize",
    version=1,
    description="Per-user event-time sessions from enriched clicks; updates, tombstones on merge, late side topic.",
    inputs=(ENRICHED_CLICKS,),
    output=SESSIONS,
    start=start,
    settings={"gap_minutes": 30, "allowed_lateness_minutes": 120},
)
