"""sessions_table: compacted `sessions` -> Delta `sessions`, the topic's current state; undecodable -> dead letters.

One row per live session id: an upsert replaces the row, a tombstone (a session merged away) deletes it. Each
batch is one MERGE of the latest change per key, at most once per batch id.
"""

from __future__ import annotations

from pyspark.sql import DataFrame

from jobs.catalog import SESSIONS
from jobs.sessions_table.transforms import session_changes
from kappa.runtime import DeltaTable, JobContext, JobPlan, JobSpec
from kappa.spark.delta_merge import DeltaMerge
from kappa.spark.delta_views import changes_with_key
from kappa.spark.topic_io import DELETED

TABLE = DeltaTable(
    "sessions", doc="Every live session, one row each (tombstoned sessions deleted).", keys=("session_id",)
)


def sink(output_path: str, app_id: str) -> DeltaMerge:
    return DeltaMerge(output_path, keys=TABLE.keys, app_id=app_id, deleted=DELETED)


def plan(ctx: JobContext) -> JobPlan:
    [source] = ctx.spec.inputs
    merge = sink(ctx.output_path(), f"{ctx.spec.name}.v{ctx.version}")

    def write(batch: DataFrame, batch_id: int) -> None:
        merge.write(session_changes(changes_with_key(batch, "session_id")), batch_id)

    return JobPlan(ctx.read(source).rows, write)


JOB = JobSpec(
    name="sessions_table",
    version=1,
    description="The sessions topic's current state as a Delta table: upserts replace, tombstones delete.",
    inputs=(SESSIONS,),
    output=TABLE,
    plan=plan,
)
