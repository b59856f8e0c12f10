"""Data-contract checks: one blocking Dagster asset check per Delta table a job writes.

Each check runs the table's expectation suite (`schemas/expectations/<table>.json`, kappa.contracts.expectations)
through Great Expectations on the table version the asset's code version names (`<delta_root>/<table>/v<version>`),
read with delta-rs (no JVM in Dagster's process). The UI shows the outcome, a table of every expectation's result,
and the unexpected counts and samples. Blocking: a failed check fails the materialization's run, so nothing
downstream runs on a table that broke its contract."""

from collections.abc import Mapping
from typing import Any

from dagster import (
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    MetadataValue,
    asset_check,
)

from dagster_project.assets import output_key
from dagster_project.resources import KappaResource
from kappa.contracts.expectations import QualityReport, suite_for, suites_dir, validate_table
from kappa.core.errors import KappaError
from kappa.runtime.declaration import JobSpec
from kappa.runtime.outputs import output_of

CHECK_NAME = "data_contract"


def _markdown(report: QualityReport) -> str:
    lines = ["| expectation | result | unexpected | samples |", "| --- | --- | --- | --- |"]
    for r in report.results:
        outcome = "ok" if r.success else ("error: " + r.error if r.error else "FAILED")
        unexpected = "" if r.unexpected_count is None else str(r.unexpected_count)
        samples = ", ".join(str(s) for s in r.samples[:5]).replace("|", "\\|")
        lines.append(f"| `{r.name}` | {outcome} | {unexpected} | {samples} |")
    return "\n".join(lines)


def report_metadata(report: QualityReport, path: str) -> dict[str, Any]:
    """What the UI shows for one run of a check."""
    as_dict = report.as_dict()
    return {
        "path": MetadataValue.path(path),
        "suite": report.suite,
        "evaluated": len(report.results),
        "failed": len(report.failed),
        "failed_expectations": MetadataValue.json(report.failed),
        "results": MetadataValue.md(_markdown(report)),
        "details": MetadataValue.json(as_dict["results"]),
    }


def quality_check(job: JobSpec) -> AssetChecksDefinition:
    """The contract check of one job's Delta output."""
    output = output_of(job.output)
    table = output.delta_table
    if table is None:
        raise TypeError(f"job {job.name} writes a {output.kind}, not a Delta table")

    @asset_check(
        asset=output_key(job),
        name=CHECK_NAME,
        blocking=True,
        description=f"The expectation suite schemas/expectations/{table.name}.json on the table "
        f"(version {job.version}), through Great Expectations.",
    )
    def _check(kappa: KappaResource) -> AssetCheckResult:
        settings = kappa.settings()
        path = table.path(settings, job.version)
        suite = suite_for(settings, table.name)
        if suite is None:
            return AssetCheckResult(
                passed=False,
                severity=AssetCheckSeverity.WARN,
                description=f"no expectation suite kept for {table.name}",
                metadata={"expected_suite": MetadataValue.path(str(suites_dir(settings) / f"{table.name}.json"))},
            )
        try:
            report = validate_table(path, suite)
        except KappaError as exc:
            return AssetCheckResult(passed=False, description=str(exc), metadata={"path": MetadataValue.path(path)})
        return AssetCheckResult(
            passed=report.success, description=report.summary(), metadata=report_metadata(report, path)
        )

    return _check


def quality_checks(jobs: Mapping[str, JobSpec]) -> list[AssetChecksDefinition]:
    """One blocking contract check per Delta-table output of these jobs (topic outputs are checked by the
    replay engine before a cutover, and row by row by the jobs that read them)."""
    return [quality_check(job) for job in jobs.values() if output_of(job.output).delta_table is not None]
