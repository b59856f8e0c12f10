"""page_stats: `enriched_clicks` -> Delta `page_stats`, one row per (page, hour); undecodable input -> its dead letters.

Exact whatever the batch sizes (the rule: logic.py): the job keeps each user's clicks with their time on page and
each (page, hour)'s counts in Spark's state store (kappa.operators.page_stats), and each batch merges the rows it
changed into the table, once per batch id. A late click changes its predecessor's time on page, and so maybe
another hour's row.

Settings (`Settings`): `gap_minutes` (a next click later than this is not time on the page, 30).
"""

from __future__ import annotations

from pydantic import Field

from jobs.catalog import ENRICHED_CLICKS
from jobs.page_stats.transforms import KEYS, page_stat_changes
from kappa.job import MINUTE_MS, DeltaTable, JobContext, JobSpec, NoSettings, TablePlan, TableWrite

TABLE = DeltaTable(
    "page_stats",
    doc="Views, distinct users and median time on page per page and event-time hour.",
    keys=KEYS,
    write=TableWrite.UPSERT,
    deletes=True,  # a (page, hour) whose every click moved elsewhere
)


class Settings(NoSettings):
    gap_minutes: int = Field(gt=0, description="a next click later than this is not time on the page")


def plan(ctx: JobContext) -> TablePlan:
    gap_ms = ctx.spec.settings_as(Settings).gap_minutes * MINUTE_MS
    return TablePlan(page_stat_changes(ctx.read(ENRICHED_CLICKS).rows, gap_ms))


JOB = JobSpec(
    name="page_stats",
    version=1,
    description="Per page and event-time hour: views, distinct users, median time on page (Delta, exact MERGE).",
    inputs=(ENRICHED_CLICKS,),
    output=TABLE,
    plan=plan,
    # A table people query: fresh within a minute, a batch every 30 s.
    freshness="1 minute",
    max_batch_records=500_000,
    settings=Settings(gap_minutes=30),
    # A cascade's estimate until this cluster has replayed the job: make bench-pipeline, 1,000,000 clicks, 2 cores
    # (README, "Replay throughput").
    replay_events_per_s=22_026,
)
