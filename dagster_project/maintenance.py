"""The Delta tables' upkeep, scheduled where an operator looks for it: a `maintain_<table>` job and an hourly
schedule of it (running by default) for each table a job writes, each at its own minute (one maintenance JVM at a
time beside the pipeline).

A run is `kappa tables maintain <table> --json` in a subprocess (Spark never runs in Dagster's process): every
version of the table on disk compacted, unless its writer runs and compacts it itself, and vacuumed after the
table's retention (kappa.lifecycle.maintenance). Each version's figures after it go on the table's asset as an
AssetObservation (data files, bytes, log files, what was compacted), plotted over time on the asset's page.
"""

import json
import subprocess
from collections.abc import Mapping

from dagster import (
    AssetObservation,
    DefaultScheduleStatus,
    Failure,
    JobDefinition,
    OpExecutionContext,
    ScheduleDefinition,
    job,
    op,
)

from dagster_project.assets import kappa_command, output_key
from dagster_project.resources import KappaResource
from kappa.runtime.declaration import JobSpec
from kappa.runtime.outputs import output_of

FIRST_MINUTE, MINUTES_APART = 23, 11  # off the hour, when other schedules start; tables' runs apart


def hourly_at(index: int) -> str:
    """The cron of the index-th table's schedule: hourly, each table at its own minute."""
    return f"{(FIRST_MINUTE + MINUTES_APART * index) % 60} * * * *"


def maintain_job_name(table: str) -> str:
    return f"maintain_{table}"


def _maintain_job(spec: JobSpec) -> JobDefinition:
    table = output_of(spec.output).name

    @op(name=f"maintain_{table}_table", description=f"`kappa tables maintain {table}`: compact and vacuum")
    def _maintain(context: OpExecutionContext, kappa: KappaResource) -> None:
        kappa.settings()  # a bad setting fails here, with its name, before a JVM starts
        done = subprocess.run(
            kappa_command("tables", "maintain", table, "--json"),
            env=kappa.subprocess_env(),
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise Failure(f"kappa tables maintain {table} failed: {done.stderr.strip()[-2000:]}")
        lines = done.stdout.strip().splitlines()
        if not lines or not lines[-1].startswith("["):
            raise Failure(f"kappa tables maintain {table} printed no report: {done.stdout.strip()[-2000:]!r}")
        for version in json.loads(lines[-1]):
            after = version["after"]
            context.log.info(
                f"{table} v{version['version']}: {after['data_files']} data files, {after['log_files']} log files"
                + (f"; its writer compacts ({version['writer']})" if version["writer"] else "")
            )
            metadata = {
                "version": version["version"],
                "data_files": after["data_files"],
                "data_bytes": after["data_bytes"],
                "log_files": after["log_files"],
                "data_files_before": version["before"]["data_files"],
                "compacted_files": version["compacted_files"],
            }
            context.log_event(
                AssetObservation(asset_key=output_key(spec), description="table maintenance", metadata=metadata)
            )

    @job(name=maintain_job_name(table), description=f"Compact and vacuum every version of the {table} table.")
    def _job() -> None:
        _maintain()

    return _job


def maintenance_definitions(jobs: Mapping[str, JobSpec]) -> tuple[list[JobDefinition], list[ScheduleDefinition]]:
    """(maintain_<table> for every Delta table a job writes, an hourly schedule of each at its own minute)."""
    writers = [spec for spec in jobs.values() if output_of(spec.output).storage == "delta"]
    op_jobs = [_maintain_job(spec) for spec in writers]
    schedules = [
        ScheduleDefinition(job=j, cron_schedule=hourly_at(i), default_status=DefaultScheduleStatus.RUNNING)
        for i, j in enumerate(op_jobs)
    ]
    return op_jobs, schedules
