"""enrich_clicks: clicks + the compacted `user_profiles` topic -> `enriched_clicks`, as of each click's time.

Each click gets the profile version valid at its event time (the rule and its determinism argument are in
logic.py). A click is emitted at once and re-emitted under the same key when a version that arrives later
changes its answer; `enriched_clicks` read as a compacted topic holds the rule's answer for every click.
Profile versions that broke the lateness contract -> `enriched_clicks.late`; undecodable input -> the dead
letters of each input.

Settings: `profile_lateness_minutes` (L: how long after its valid_from a version may be published and still
apply from valid_from, 20) and `disorder_minutes` (D: how far out of time order a user's clicks and profile
versions may reach the job, 10). A click stays correctable until its user's data is L + D past it.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from jobs.catalog import CLICKS, ENRICHED_CLICKS, USER_PROFILES
from jobs.enrich_clicks.logic import MINUTE_MS
from jobs.enrich_clicks.transforms import ENRICHED, LATE_PROFILE, enriched_changes, union_inputs
from kappa.deadletter import DeadLetterKind
from kappa.partitioning import partition_column
from kappa.runtime import JobContext, JobSpec
from kappa.side_outputs import late_records, publish
from kappa.topic_io import topic_encoder
from kappa.topics import Topic


def start(ctx: JobContext) -> Sequence[StreamingQuery]:
    clicks_topic, profiles_topic = ctx.spec.inputs
    output = ctx.spec.output
    assert isinstance(output, Topic), "enrich_clicks writes a topic"
    lateness_ms = int(ctx.spec.settings["profile_lateness_minutes"] * MINUTE_MS)
    disorder_ms = int(ctx.spec.settings["disorder_minutes"] * MINUTE_MS)
    encode = topic_encoder(ctx.settings, output)

    clicks = ctx.read(clicks_topic, with_raw=True)
    profiles = ctx.read(profiles_topic, with_raw=True)  # late versions keep their original bytes
    changes = enriched_changes(union_inputs(clicks.records, profiles.records), lateness_ms, disorder_ms)

    def write(batch: DataFrame, batch_id: int) -> None:
        batch.persist()
        try:
            enriched = batch.where(F.col("kind") == ENRICHED)
            by_user = partition_column(F.col("user_id"), output.partitions)
            publish(encode(enriched, F.col("event_id"), by_user), ctx.settings, output.name)
            late = batch.where(F.col("kind") == LATE_PROFILE)
            publish(
                late_records(late, DeadLetterKind.LATE_PROFILE, ctx.spec.name, ctx.version),
                ctx.settings,
                f"{output.name}.late",
            )
        finally:
            batch.unpersist()

    enriched_query = (
        changes.writeStream.foreachBatch(write)
        .queryName(ctx.query_name())
        .option("checkpointLocation", ctx.checkpoint())
        .outputMode("update")
        .trigger(**ctx.trigger())
        .start()
    )
    return [
        enriched_query,
        ctx.start_dead_letters(clicks, clicks_topic, part="clicks_dlq"),
        ctx.start_dead_letters(profiles, profiles_topic, part="profiles_dlq"),
    ]


JOB = JobSpec(
    name="enrich_clicks",
    version=1,
    description="Clicks joined as of their event time with the compacted user_profiles topic; corrections re-emitted.",
    inputs=(CLICKS, USER_PROFILES),
    output=ENRICHED_CLICKS,
    start=start,
    settings={"profile_lateness_minutes": 20, "disorder_minutes": 10},
)
