"""user_activity: compacted `sessions` -> Delta `user_activity`, one row per user; undecodable -> dead letters.

Exact under session updates and merges (the rule: logic.py): the job keeps each session's latest value (a
tombstone names only its session: its user is known from there) and each user's live sessions in Spark's state
store (kappa.operators.user_activity), and each batch merges the rows it changed into the table, once per batch
id. A user whose last live session is tombstoned leaves the table.
"""

from __future__ import annotations

from jobs.catalog import SESSIONS
from jobs.user_activity.transforms import activity_changes
from kappa.job import DeltaTable, JobContext, JobSpec, TablePlan, TableWrite

TABLE = DeltaTable(
    "user_activity",
    doc="Sessions, clicks, first and last seen, latest segment, per user.",
    keys=("user_id",),
    write=TableWrite.UPSERT,
    deletes=True,  # a user whose last live session was taken away
)


def plan(ctx: JobContext) -> TablePlan:
    return TablePlan(activity_changes(ctx.read(SESSIONS).rows))


JOB = JobSpec(
    name="user_activity",
    version=1,
    description="Per user over their live sessions: sessions, clicks, first and last seen, latest segment (Delta).",
    inputs=(SESSIONS,),
    output=TABLE,
    plan=plan,
    # A table people query: fresh within a minute, a batch every 30 s.
    freshness="1 minute",
    max_batch_records=500_000,
    # A cascade's estimate until this cluster has replayed the job: make bench-pipeline, 1,000,000 clicks, 2 cores
    # (README, "Replay throughput").
    replay_events_per_s=8_205,
)
