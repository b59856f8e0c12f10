"""user_activity: compacted `sessions` -> Delta `user_activity`, one row per user; undecodable -> dead letters.

Exact under session updates and merges: the job keeps every session in a private facts table (a tombstone marks
it retired) and each batch recomputes the rows of the users whose sessions changed (kappa.spark.delta_views). A user
whose last live session is tombstoned leaves the table.
"""

from __future__ import annotations

from pyspark.sql import DataFrame

from jobs.catalog import SESSIONS
from jobs.user_activity.transforms import FACTS_SCHEMA, RETIRED, session_facts, touched_users, user_activity
from kappa.runtime import DeltaTable, JobContext, JobPlan, JobSpec
from kappa.spark.delta_merge import DeltaMerge
from kappa.spark.delta_views import FactsView, changes_with_key, facts_table
from kappa.spark.topic_io import DELETED

TABLE = DeltaTable(
    "user_activity", doc="Sessions, clicks, first and last seen, latest segment, per user.", keys=("user_id",)
)


def view(output_path: str, app_id: str) -> FactsView:
    """The view's tables and rules; `app_id` names the job version (each table adds its own suffix)."""
    return FactsView(
        facts=facts_table(output_path, ("session_id",), app_id),
        view=DeltaMerge(output_path, keys=TABLE.keys, app_id=app_id, deleted=DELETED),
        facts_schema=FACTS_SCHEMA,
        changes=session_facts,
        groups=touched_users,
        aggregate=user_activity,
        retired=RETIRED,
    )


def plan(ctx: JobContext) -> JobPlan:
    [source] = ctx.spec.inputs
    activity = view(ctx.output_path(), f"{ctx.spec.name}.v{ctx.version}")

    def write(batch: DataFrame, batch_id: int) -> None:
        activity.write(changes_with_key(batch, "session_id"), batch_id)

    return JobPlan(ctx.read(source).rows, write)


JOB = JobSpec(
    name="user_activity",
    version=1,
    description="Per user over their live sessions: sessions, clicks, first and last seen, latest segment (Delta).",
    inputs=(SESSIONS,),
    output=TABLE,
    plan=plan,
)
