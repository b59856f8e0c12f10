"""The job author's API, in one place: `from kappa.job import ...` is all a job folder imports from the platform.

A job declares `JOB = JobSpec(...)` with a `plan(ctx)` that reads its inputs by their catalog declarations
(`ctx.read(CLICKS)`), reads its knobs typed (`ctx.spec.settings_as(Settings)`) and returns a plan; the runtime
writes it. docs/job_api.md is this module's reference, generated from the docstrings.

Everything here is defined in the platform's layers (runtime, operators, spark, kafka, contracts) and only
re-exported: the platform's own code imports from those modules, never from this one. A job's catalog and its
pure rules (logic.py) import their constants from `kappa.contracts.topic_declarations` instead, which needs no
pyspark: Dagster's process and the rules' unit tests load them without it.
"""

from kappa.contracts.dead_letter_format import DeadLetterKind
from kappa.contracts.topic_declarations import DAY_MS, FOREVER, HOUR_MS, MINUTE_MS, Cleanup, Topic
from kappa.kafka.partitioning import partition_column
from kappa.operators import (
    AsOfJoinColumns,
    KeyedRule,
    as_of_join,
    as_of_rows,
    keyed_rule,
    page_stats,
    sessions,
    user_activity,
)
from kappa.operators.as_of_join import EVENT, LATE
from kappa.operators.sessions import FINAL, RETRACT, UPSERT
from kappa.runtime.declaration import (
    JobContext,
    JobPlan,
    JobSpec,
    NoSettings,
    RealTimePlan,
    TablePlan,
    TopicPlan,
)
from kappa.runtime.outputs import DeltaTable, TableWrite
from kappa.spark.changes import changes_with_key, last_per_key
from kappa.spark.side_outputs import SIDE_COLUMNS, SIDE_SCHEMA
from kappa.spark.topic_io import DELETED

__all__ = [
    "DAY_MS",
    "DELETED",
    "EVENT",
    "FINAL",
    "FOREVER",
    "HOUR_MS",
    "LATE",
    "MINUTE_MS",
    "RETRACT",
    "SIDE_COLUMNS",
    "SIDE_SCHEMA",
    "UPSERT",
    "AsOfJoinColumns",
    "Cleanup",
    "DeadLetterKind",
    "DeltaTable",
    "JobContext",
    "JobPlan",
    "JobSpec",
    "KeyedRule",
    "NoSettings",
    "RealTimePlan",
    "TablePlan",
    "TableWrite",
    "Topic",
    "TopicPlan",
    "as_of_join",
    "as_of_rows",
    "changes_with_key",
    "keyed_rule",
    "last_per_key",
    "page_stats",
    "partition_column",
    "sessions",
    "user_activity",
]
