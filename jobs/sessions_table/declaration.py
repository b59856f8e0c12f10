"""sessions_table: compacted `sessions` -> Delta `sessions`, the topic's current state; undecodable -> dead letters.

One row per live session id: an upsert replaces the row, a tombstone (a session merged away) deletes it. Each
batch is one MERGE of the latest change per key, at most once per batch id.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame
from pyspark.sql.streaming.query import StreamingQuery

from jobs.catalog import SESSIONS
from jobs.sessions_table.transforms import session_changes
from kappa.delta_sink import DeltaMerge
from kappa.delta_views import DELETED, with_tombstones
from kappa.runtime import DeltaTable, JobContext, JobSpec

TABLE = DeltaTable("sessions", doc="Every live session, one row each (tombstoned sessions deleted).")


def sink(output_path: str, app_id: str) -> DeltaMerge:
    return DeltaMerge(output_path, keys=("session_id",), app_id=app_id, deleted=DELETED)


def start(ctx: JobContext) -> Sequence[StreamingQuery]:
    [source] = ctx.spec.inputs
    decoded = ctx.read(source)
    merge = sink(ctx.output_path(), f"{ctx.spec.name}.v{ctx.version}")

    def write(batch: DataFrame, batch_id: int) -> None:
        merge.write(session_changes(batch), batch_id)

    table = (
        with_tombstones(decoded, "session_id")
        .writeStream.foreachBatch(write)
        .queryName(ctx.query_name())
        .option("checkpointLocation", ctx.checkpoint())
        .trigger(**ctx.trigger())
        .start()
    )
    return [table, ctx.start_dead_letters(decoded, source)]


JOB = JobSpec(
    name="sessions_table",
    version=1,
    description="The sessions topic's current state as a Delta table: upserts replace, tombstones delete.",
    inputs=(SESSIONS,),
    output=TABLE,
    start=start,
)
