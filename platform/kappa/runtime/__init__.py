"""The job runtime: typed job declarations, discovery of jobs/, and the runner behind `kappa jobs`."""

from kappa.runtime.declaration import (
    DeltaTable,
    JobContext,
    JobPlan,
    JobSpec,
    RealTimePlan,
    Starting,
    TablePlan,
    TableWrite,
    TopicPlan,
)

__all__ = [
    "DeltaTable",
    "JobContext",
    "JobPlan",
    "JobSpec",
    "RealTimePlan",
    "Starting",
    "TablePlan",
    "TableWrite",
    "TopicPlan",
]
