"""The Dagster contract checks: one blocking check per Delta output, run on a real Delta table (delta-rs)."""

from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
from dagster import AssetCheckResult
from deltalake import write_deltalake

from dagster_project.assets import output_key
from dagster_project.checks import CHECK_NAME, quality_checks
from dagster_project.definitions import build_definitions
from dagster_project.resources import KappaResource
from kappa.runtime.discovery import discover
from kappa.runtime.outputs import DeltaTable

JOBS = discover()
T0 = datetime(2026, 1, 1, 12, tzinfo=UTC)


def test_one_blocking_check_per_delta_output_in_the_code_location() -> None:
    checks = quality_checks(JOBS)
    tables = {output_key(j) for j in JOBS.values() if isinstance(j.output, DeltaTable)}
    assert len(tables) >= 3
    keys = [key for check in checks for key in check.check_keys]
    assert {k.asset_key for k in keys} == tables
    assert {k.name for k in keys} == {CHECK_NAME}
    assert all(spec.blocking for check in checks for spec in check.check_specs)
    graph = build_definitions().resolve_asset_graph()
    assert {k for k in graph.asset_check_keys if k.name == CHECK_NAME} == set(keys)


def _page_stats_check(delta_root: Path, rows: list[tuple[object, ...]]) -> AssetCheckResult:
    job = JOBS["page_stats"]
    assert isinstance(job.output, DeltaTable)
    frame = pd.DataFrame(rows, columns=["page", "hour_start", "views", "distinct_users", "median_time_on_page_ms"])
    write_deltalake(f"{delta_root}/page_stats/v{job.version}", frame)
    [check] = quality_checks({"page_stats": job})
    result = check(kappa=KappaResource(overrides={"KAPPA_DELTA_ROOT": str(delta_root)}))  # type: ignore[call-arg]
    assert isinstance(result, AssetCheckResult)
    return result


def test_the_check_passes_on_a_table_that_keeps_its_contract(tmp_path: Path) -> None:
    result = _page_stats_check(tmp_path, [("/a", T0, 3, 2, 1000), ("/b", T0, 1, 1, None)])
    assert result.passed, result.description
    assert result.metadata["failed"].value == 0


def test_the_check_fails_naming_the_broken_expectations(tmp_path: Path) -> None:
    result = _page_stats_check(tmp_path, [("/a", T0, 3, 2, 1000), ("/a", T0, 1, 4, 10), ("b", T0, 1, 1, 5)])
    assert not result.passed
    assert result.metadata["failed_expectations"].value == [
        "expect_compound_columns_to_be_unique(page, hour_start)",
        "expect_column_values_to_match_regex(page)",
        "expect_column_pair_values_a_to_be_greater_than_b(views, distinct_users)",
    ]
    assert "FAILED" in result.metadata["results"].value


def test_the_check_fails_clearly_without_a_table(tmp_path: Path) -> None:
    [check] = quality_checks({"page_stats": JOBS["page_stats"]})
    result = check(kappa=KappaResource(overrides={"KAPPA_DELTA_ROOT": str(tmp_path)}))  # type: ignore[call-arg]
    assert isinstance(result, AssetCheckResult)
    assert not result.passed
    assert "no Delta table" in (result.description or "")
