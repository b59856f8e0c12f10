"""raw_clicks: Kafka `clicks` (Confluent Avro) -> Delta `raw_clicks`; undecodable records and records breaking
the clicks contract (schemas/expectations/clicks.json) -> `clicks.dlq`.

One streaming query: each batch appends its records to the table (at most once per batch id) and the runtime
sends its dead letters to `clicks.dlq`. Every input record lands in exactly one of them.
"""

from __future__ import annotations

from jobs.catalog import CLICKS
from jobs.raw_clicks.transforms import click_rows
from kappa.job import DeltaTable, JobContext, JobSpec, TablePlan

# Appended (the declaration's default), each batch at most once.
TABLE = DeltaTable("raw_clicks", doc="Every decodable click, one row each, with its Kafka position.")


def plan(ctx: JobContext) -> TablePlan:
    return TablePlan(ctx.read(CLICKS).rows, batch=click_rows)  # CLICKS, or the topic a bound spec reads for it


JOB = JobSpec(
    name="raw_clicks",
    version=1,
    description="The clicks topic as a Delta table (append), dead letters to clicks.dlq.",
    inputs=(CLICKS,),
    output=TABLE,
    plan=plan,
    # A table people query: fresh within a minute, a batch every 30 s. 500,000 clicks per catch-up batch: about
    # 5 s of one core at the replay rate (92,084 per core).
    freshness="1 minute",
    max_batch_records=500_000,
    # A cascade's estimate until this cluster has replayed the job: make bench-pipeline, 1,000,000 clicks, 2 cores
    # (README, "Replay throughput").
    replay_events_per_s=110_576,
)
