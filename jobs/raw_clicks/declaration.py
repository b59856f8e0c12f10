"""raw_clicks: Kafka `clicks` (Confluent Avro) -> Delta `raw_clicks`; undecodable records and records breaking
the clicks contract (schemas/expectations/clicks.json) -> `clicks.dlq`.

Two streaming queries over the same topic, each with its own checkpoint: the table append (the job's one
output) and the dead-letter sink. Every input record lands in exactly one of them.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql.streaming.query import StreamingQuery

from jobs.catalog import CLICKS
from jobs.raw_clicks.transforms import click_rows
from kappa.runtime import DeltaTable, JobContext, JobSpec

TABLE = DeltaTable("raw_clicks", doc="Every decodable click, one row each, with its Kafka position.")


def start(ctx: JobContext) -> Sequence[StreamingQuery]:
    [source] = ctx.spec.inputs  # CLICKS, or the topic a bound spec names
    clicks = ctx.read(source)
    table = (
        click_rows(clicks.records)
        .writeStream.format("delta")
        .queryName(ctx.query_name())
        .option("checkpointLocation", ctx.checkpoint())
        .outputMode("append")
        .trigger(**ctx.trigger())
        .start(ctx.output_path())
    )
    dead = ctx.start_dead_letters(clicks, source)
    return [table, dead]


JOB = JobSpec(
    name="raw_clicks",
    version=1,
    description="The clicks topic as a Delta table (append), dead letters to clicks.dlq.",
    inputs=(CLICKS,),
    output=TABLE,
    start=start,
)
