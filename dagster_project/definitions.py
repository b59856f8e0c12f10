"""The code location: `dagster dev -m dagster_project.definitions` (or `make dagster`).

Everything here is generated from `discover()` (the jobs in jobs/) and `jobs.catalog.TOPICS`: a new job folder
appears as a new asset with nothing else to wire. Loading reads no settings; a run reads them (KappaResource).
"""

from collections.abc import Iterable, Mapping

from dagster import Definitions, PipesSubprocessClient

from dagster_project.assets import build_assets
from dagster_project.checks import quality_checks
from dagster_project.maintenance import maintenance_definitions
from dagster_project.operations import operations_definitions
from dagster_project.replay import replay_definitions
from dagster_project.replay_checks import replay_asset_checks
from dagster_project.resources import KappaResource
from kappa.contracts.topic_declarations import Topic
from kappa.runtime.declaration import JobSpec


def build_definitions(
    jobs: Mapping[str, JobSpec] | None = None,
    topics: Iterable[Topic] | None = None,
    kappa: KappaResource | None = None,
) -> Definitions:
    """The Definitions for these jobs and topics (default: every discovered job, the catalog's topics)."""
    if jobs is None:
        from kappa.runtime.discovery import discover

        jobs = discover()
    if topics is None:
        from kappa.runtime.discovery import find_catalog

        topics = find_catalog(jobs).topics
    job_assets, sources = build_assets(jobs, topics)
    op_jobs, sensors = operations_definitions(jobs)
    maintain_jobs, schedules = maintenance_definitions(jobs)
    return Definitions(
        assets=[*job_assets, *sources],
        # data_contract on Delta outputs; replay_quality and replay_reconciliation on every output
        asset_checks=[*quality_checks(jobs), *replay_asset_checks(jobs)],
        # stop_/restart_ and replay_/rollback_/retire_<job>; maintain_<table> on its schedule
        jobs=[*op_jobs, *replay_definitions(jobs), *maintain_jobs],
        schedules=schedules,
        sensors=sensors,
        resources={
            "kappa": kappa or KappaResource(),
            # The job's log lines stay on the subprocess's stdout/stderr; progress comes back through Pipes.
            "pipes_subprocess_client": PipesSubprocessClient(),
        },
    )


defs = build_definitions()
