"""raw_clicks: Kafka `clicks` (Confluent Avro) -> Delta `raw_clicks`; undecodable records and records breaking
the clicks contract (schemas/expectations/clicks.json) -> `clicks.dlq`.

One streaming query: each batch appends its records to the table (at most once per batch id) and the runtime
sends its dead letters to `clicks.dlq`. Every input record lands in exactly one of them.
"""

from __future__ import annotations

from pyspark.sql import DataFrame

from jobs.catalog import CLICKS
from jobs.raw_clicks.transforms import click_rows
from kappa.runtime import DeltaTable, JobContext, JobPlan, JobSpec
from kappa.spark.delta_merge import append_once

TABLE = DeltaTable("raw_clicks", doc="Every decodable click, one row each, with its Kafka position.")


def plan(ctx: JobContext) -> JobPlan:
    [source] = ctx.spec.inputs  # CLICKS, or the topic a bound spec names
    path, app_id = ctx.output_path(), f"{ctx.spec.name}.v{ctx.version}"

    def write(records: DataFrame, batch_id: int) -> None:
        append_once(click_rows(records), path, app_id, batch_id)

    return JobPlan(ctx.read(source).rows, write)


JOB = JobSpec(
    name="raw_clicks",
    version=1,
    description="The clicks topic as a Delta table (append), dead letters to clicks.dlq.",
    inputs=(CLICKS,),
    output=TABLE,
    plan=plan,
)
