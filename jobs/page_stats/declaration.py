"""page_stats: `enriched_clicks` -> Delta `page_stats`, one row per (page, hour); clicks beyond the lateness ->
`delta.page_stats.v<n>.late`; undecodable input -> its dead letters.

Exact whatever the batch sizes (the rule: logic.py): the job keeps each user's clicks with their time on page and
each (page, hour)'s counts in Spark's state store (kappa.operators.page_stats), and each batch merges the rows it
changed into the table, once per batch id. A late click changes its predecessor's time on page, and so maybe
another hour's row. Lateness is judged against each click's partition stamp (enrich_clicks'
`partition_time_before`: the latest event time before it in its `clicks` partition), the same in every run; what
no record that counts can reach any more is forgotten, so the state holds the last L + 2 gaps of each user's clicks
(a user who left keeps theirs, and a small head, until they come back), the hours not settled yet and a marker per
settled (page, hour) (docs/bounded_view_state.md).

Settings (`Settings`): `gap_minutes` (a next click later than this is not time on the page, 30) and
`lateness_minutes` (L: a click more than this behind its partition's latest event time before it is late, 30).
"""

from __future__ import annotations

from pydantic import Field

from jobs.catalog import CLICKS, ENRICHED_CLICKS
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
    lateness_minutes: int = Field(ge=0, description="L: how far behind its partition's stamp a click may come")


def plan(ctx: JobContext) -> TablePlan:
    settings = ctx.spec.settings_as(Settings)
    enriched = ctx.read(ENRICHED_CLICKS, with_raw=True)  # late clicks keep their original bytes
    return TablePlan(
        page_stat_changes(
            enriched.rows,
            settings.gap_minutes * MINUTE_MS,
            settings.lateness_minutes * MINUTE_MS,
            stamp_partitions=CLICKS.partitions,  # the stamps are taken over the clicks partitions
            input_partitions=ctx.spec.topic(ENRICHED_CLICKS).partitions,
        )
    )


JOB = JobSpec(
    name="page_stats",
    # v2: lateness by the partition stamps, and the state bounded by them (its layout changed).
    version=2,
    description="Per page and event-time hour: views, distinct users, median time on page (Delta, exact MERGE).",
    inputs=(ENRICHED_CLICKS,),
    output=TABLE,
    plan=plan,
    # A table people query: fresh within a minute, a batch every 30 s.
    freshness="1 minute",
    max_batch_records=500_000,
    settings=Settings(gap_minutes=30, lateness_minutes=30),
    # A cascade's estimate until this cluster has replayed the job: make bench-pipeline, 1,000,000 clicks, 2 cores
    # (README, "Replay throughput").
    replay_events_per_s=22_026,
)
