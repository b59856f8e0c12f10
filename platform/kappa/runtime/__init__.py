"""The job runtime: typed job declarations, discovery of jobs/, and the runner behind `kappa jobs`."""

from kappa.runtime.declaration import (
    JobContext,
    JobPlan,
    JobSpec,
    RealTimePlan,
    Starting,
    TablePlan,
    TopicPlan,
)
from kappa.runtime.outputs import DeltaTable, TableWrite

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
