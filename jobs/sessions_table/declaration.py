"""sessions_table: compacted `sessions` -> Delta `sessions`, the topic's current state; undecodable -> dead letters.

One row per live session id: an upsert replaces the row, a tombstone (a session merged away) deletes it. Each
batch is one MERGE of the latest change per key, at most once per batch id.
"""

from __future__ import annotations

from jobs.catalog import SESSIONS
from jobs.sessions_table.transforms import session_changes
from kappa.job import DeltaTable, JobContext, JobSpec, TablePlan, TableWrite

TABLE = DeltaTable(
    "sessions",
    doc="Every live session, one row each (tombstoned sessions deleted).",
    keys=("session_id",),
    write=TableWrite.UPSERT,
    deletes=True,  # a tombstone: a session merged into another
)


def plan(ctx: JobContext) -> TablePlan:
    return TablePlan(ctx.read(SESSIONS).rows, batch=session_changes)


JOB = JobSpec(
    name="sessions_table",
    version=1,
    description="The sessions topic's current state as a Delta table: upserts replace, tombstones delete.",
    inputs=(SESSIONS,),
    output=TABLE,
    plan=plan,
    # A table people query: fresh within a minute, a batch every 30 s.
    freshness="1 minute",
    max_batch_records=500_000,
    # A cascade's estimate until this cluster has replayed the job: make bench-pipeline, 1,000,000 clicks, 2 cores
    # (README, "Replay throughput").
    replay_events_per_s=12_792,
)
