"""Data contracts: the suites in schemas/expectations, their row-level rules as one Spark Column, and Great
Expectations itself agreeing with that Column; dataset-level validation of a Delta table."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from pyspark.sql import SparkSession

from jobs.catalog import CLICKS
from kappa.contracts.dead_letter_format import H_CONTRACT_BROKEN, H_CONTRACT_SUITE, H_KIND, DeadLetterKind
from kappa.contracts.expectations import (
    VIOLATIONS,
    Suite,
    row_contract,
    split_rows,
    suite_for,
    suites_dir,
    validate_dataframe,
    validate_table,
)
from kappa.contracts.schema_files import topic_value_schema
from kappa.contracts.wire_format import frame
from kappa.core.settings import KappaSettings, load_settings
from kappa.runtime.discovery import find_catalog
from kappa.spark.topic_io import decode_topic
from tests.unit.test_raw_clicks_transforms import CLICK, avro, kafka_rows

SETTINGS = load_settings()
T0 = datetime(2026, 1, 1, 12, tzinfo=UTC)
CLOCK_RESET = datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)

# Columns of each Delta table a suite is kept for (what the view jobs write).
TABLE_COLUMNS = {
    "page_stats": {"page", "hour_start", "views", "distinct_users", "median_time_on_page_ms"},
    "raw_clicks": {
        "event_id", "user_id", "page", "referrer", "event_time", "device", "kafka_partition", "kafka_offset",
    },
    "user_activity": {"user_id", "sessions", "clicks", "first_seen", "last_seen", "segment"},
    "sessions": {
        "session_id", "user_id", "start_time", "end_time", "clicks", "distinct_pages", "entry_page", "exit_page",
        "segment",
    },
}  # fmt: skip


def test_every_suite_is_valid_gx_and_reads_only_columns_its_dataset_has() -> None:
    import great_expectations as gx  # noqa: F401  (the suites must load in GX itself)
    from great_expectations.core import ExpectationSuite

    datasets = find_catalog().datasets
    files = sorted(p.stem for p in suites_dir(SETTINGS).glob("*.json"))
    assert files == sorted({t.name for t in datasets} | set(TABLE_COLUMNS))
    for name in files:
        suite = suite_for(SETTINGS, name)
        assert suite is not None
        assert suite.name == name
        gx_suite = ExpectationSuite(**json.loads((suites_dir(SETTINGS) / f"{name}.json").read_text()))
        assert len(gx_suite.expectations) == len(suite.expectations)
        columns = set(TABLE_COLUMNS.get(name, set()))
        topic = next((t for t in datasets if t.name == name), None)
        if topic is not None:
            columns |= {f["name"] for f in topic_value_schema(SETTINGS.schemas_path, topic)["fields"]}
        for e in suite.expectations:
            assert set(e.columns) <= columns, (name, e.name)
        if topic is not None:
            assert suite.row_level, f"{name}: a topic's suite must have row-level rules for its jobs"


CLICKS_SCHEMA = "event_id string, user_id string, page string, referrer string, event_time timestamp, device string"
CLICK_ROWS: list[dict[str, Any]] = [
    {"event_id": "e0", "user_id": "u1", "page": "/a", "referrer": None, "event_time": T0, "device": "MOBILE"},
    {"event_id": "e1", "user_id": "u1", "page": "/b", "referrer": "/a", "event_time": T0, "device": "UNKNOWN"},
    {"event_id": "e2", "user_id": "u2", "page": "products", "referrer": None, "event_time": T0, "device": "DESKTOP"},
    {"event_id": "e3", "user_id": "u2", "page": "/c", "referrer": "http://x", "event_time": CLOCK_RESET,
     "device": "TABLET"},
    {"event_id": "e4", "user_id": "", "page": "/d", "referrer": None, "event_time": T0, "device": "PHONE"},
    {"event_id": "", "user_id": "u3", "page": "/e", "referrer": "/d", "event_time": T0, "device": "DESKTOP"},
]  # fmt: skip


def test_row_contract_splits_clicks_with_the_names_of_what_each_row_breaks(spark: SparkSession) -> None:
    suite = suite_for(SETTINGS, "clicks")
    assert suite is not None
    passing, failing = split_rows(spark.createDataFrame(CLICK_ROWS, CLICKS_SCHEMA), suite)
    assert sorted(r.event_id for r in passing.collect()) == ["e0", "e1"]
    broken = {r.event_id: r[VIOLATIONS] for r in failing.collect()}
    assert broken == {
        "e2": ["expect_column_values_to_match_regex(page)"],
        "e3": ["expect_column_values_to_match_regex(referrer)", "expect_column_values_to_be_between(event_time)"],
        "e4": ["expect_column_value_lengths_to_be_between(user_id)", "expect_column_values_to_be_in_set(device)"],
        "": ["expect_column_value_lengths_to_be_between(event_id)"],
    }


def test_rules_that_are_not_per_row_stay_out_of_the_row_contract() -> None:
    suite = Suite.from_dict(
        {
            "name": "s",
            "expectations": [
                {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "a"}},
                {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "b", "mostly": 0.9}},
                {"type": "expect_column_values_to_be_unique", "kwargs": {"column": "a"}},
                {"type": "expect_table_row_count_to_be_between", "kwargs": {"min_value": 1}},
            ],
        }
    )
    assert [e.name for e in row_contract(suite).expectations] == ["expect_column_values_to_not_be_null(a)"]
    with pytest.raises(Exception, match="unique"):
        Suite.from_dict({"name": "s", "expectations": [suite.document["expectations"][0]] * 2})


SESSION_ROWS: list[dict[str, Any]] = [
    {"session_id": "u1:e1", "user_id": "u1", "start_time": T0, "end_time": T0, "clicks": 1,
     "distinct_pages": 1, "entry_page": "/a", "exit_page": "/a", "segment": "UNKNOWN"},
    {"session_id": "u1-e2", "user_id": "u1", "start_time": T0, "end_time": CLOCK_RESET, "clicks": 2,
     "distinct_pages": 3, "entry_page": "/a", "exit_page": "b", "segment": "PRO"},
    {"session_id": "u2:e3", "user_id": "", "start_time": T0, "end_time": T0, "clicks": 0,
     "distinct_pages": 0, "entry_page": "a", "exit_page": "/b", "segment": "GOLD"},
]  # fmt: skip

SAMPLES: dict[str, tuple[str, list[dict[str, Any]]]] = {
    "clicks": (CLICKS_SCHEMA, CLICK_ROWS),
    "user_profiles": (
        "user_id string, profile_version long, segment string, country string, valid_from timestamp",
        [
            {"user_id": "u1", "profile_version": 1, "segment": "PRO", "country": "DE", "valid_from": T0},
            {"user_id": "u1", "profile_version": 0, "segment": "UNKNOWN", "country": "de", "valid_from": T0},
            {"user_id": "", "profile_version": 2, "segment": "FREE", "country": "DEU", "valid_from": CLOCK_RESET},
            {"user_id": "u2", "profile_version": 3, "segment": "TRIAL", "country": "FR", "valid_from": T0},
        ],
    ),
    "sessions": (
        "session_id string, user_id string, start_time timestamp, end_time timestamp, clicks int, "
        "distinct_pages int, entry_page string, exit_page string, segment string",
        SESSION_ROWS,
    ),
}


@pytest.mark.parametrize("dataset", sorted(SAMPLES))
def test_great_expectations_agrees_with_the_row_contract(spark: SparkSession, dataset: str) -> None:
    """GX's own validation (pandas) finds exactly the rows the Spark Column marks, expectation by expectation."""
    import great_expectations as gx
    from great_expectations.core import ExpectationSuite

    schema, rows = SAMPLES[dataset]
    suite = suite_for(SETTINGS, dataset)
    assert suite is not None
    contract = row_contract(suite)
    ours = [r[0] for r in spark.createDataFrame(rows, schema).select(contract.violations()).collect()]
    assert [] in ours, "the sample needs a row that keeps every rule"

    context = gx.get_context(mode="ephemeral")
    batch = (
        context.data_sources.add_pandas("p")
        .add_dataframe_asset("a")
        .add_batch_definition_whole_dataframe("b")
        .get_batch(batch_parameters={"dataframe": pd.DataFrame(rows)})
    )
    gx_suite = ExpectationSuite(
        name=dataset,
        expectations=[
            {"type": e.type, "kwargs": dict(e.kwargs), "meta": {"kappa_name": e.name}} for e in contract.expectations
        ],
    )
    outcome = batch.validate(gx_suite, result_format={"result_format": "COMPLETE"})
    assert len(outcome.results) == len(contract.expectations)
    for result in outcome.results:
        assert not (result.exception_info or {}).get("raised_exception"), result.exception_info
        name = result.expectation_config.meta["kappa_name"]
        gx_rows = sorted(result.result.get("unexpected_index_list") or [])
        spark_rows = [i for i, names in enumerate(ours) if name in names]
        assert gx_rows == spark_rows, name
        assert spark_rows, f"{dataset}: the sample should break {name} at least once"


def test_decoding_sends_contract_violations_to_the_dead_letters(spark: SparkSession) -> None:
    schema = topic_value_schema(SETTINGS.schemas_path, CLICKS)
    suite = suite_for(SETTINGS, "clicks")
    assert suite is not None
    bad = {**CLICK, "event_id": "e2", "page": "products", "referrer": "http://x"}
    values = [frame(7, avro(CLICK)), frame(7, avro(bad)), b"\x01garbage"]
    contract = row_contract(suite)
    decoded = decode_topic(kafka_rows(spark, values), schema, {7: schema}, "raw_clicks", 4, contract=contract)
    assert [r.event_id for r in decoded.records.collect()] == ["e1"]
    letters = {
        bytes(r.key): ({h.key: bytes(h.value).decode() for h in r.headers}, bytes(r.value))
        for r in decoded.dead_letters.collect()
    }
    assert set(letters) == {b"k1", b"k2"}
    headers, value = letters[b"k1"]
    assert value == values[1]  # the original bytes
    assert headers[H_KIND] == DeadLetterKind.CONTRACT_VIOLATION
    assert headers[H_CONTRACT_BROKEN] == (
        "expect_column_values_to_match_regex(page), expect_column_values_to_match_regex(referrer)"
    )
    assert headers[H_CONTRACT_SUITE] == "clicks"
    assert H_CONTRACT_BROKEN not in letters[b"k2"][0]
    assert letters[b"k2"][0][H_KIND] == DeadLetterKind.NOT_CONFLUENT_FRAMED
    # Without the contract the same record is a record.
    plain = decode_topic(kafka_rows(spark, values), schema, {7: schema}, "raw_clicks", 4)
    assert plain.records.count() == 2


PAGE_STATS = "page string, hour_start timestamp, views long, distinct_users long, median_time_on_page_ms long"


@pytest.fixture
def page_stats_tables(spark: SparkSession, settings: KappaSettings) -> tuple[str, str]:
    good = [("/a", T0, 3, 2, 1000), ("/b", T0, 1, 1, None)]
    bad = [*good, ("/a", T0, 5, 9, -4)]  # a second (/a, T0) row, more users than views, negative time
    paths = []
    for name, rows in (("good", good), ("bad", bad)):
        path = str(Path(str(settings.delta_root)) / f"quality-page-stats-{name}")
        spark.createDataFrame(rows, PAGE_STATS).write.format("delta").mode("overwrite").save(path)
        paths.append(path)
    return paths[0], paths[1]


@pytest.mark.parametrize("engine", ["delta-rs", "spark"])
def test_validate_table_runs_the_page_stats_suite_on_delta(
    spark: SparkSession, page_stats_tables: tuple[str, str], engine: str
) -> None:
    suite = suite_for(SETTINGS, "page_stats")
    assert suite is not None
    good, bad = page_stats_tables
    session = spark if engine == "spark" else None
    passed = validate_table(good, suite, session)
    assert passed.success, passed.summary()
    assert len(passed.results) == len(suite.expectations)

    failed = validate_table(bad, suite, session)
    assert not failed.success
    assert failed.failed == [
        "expect_compound_columns_to_be_unique(page, hour_start)",
        "expect_column_pair_values_a_to_be_greater_than_b(views, distinct_users)",
        "expect_column_values_to_be_between(median_time_on_page_ms)",
    ]
    assert failed.result("expect_compound_columns_to_be_unique(page, hour_start)").unexpected_count == 2
    assert failed.result("expect_column_values_to_be_between(median_time_on_page_ms)").samples == (-4,)
    report = failed.as_dict()
    json.dumps(report)  # JSON as it is: Dagster metadata, the replay audit trail
    assert report["suite"] == "page_stats"
    assert report["failed"] == failed.failed


def test_validate_table_names_a_missing_table(tmp_path: Path) -> None:
    suite = suite_for(SETTINGS, "page_stats")
    assert suite is not None
    with pytest.raises(Exception, match="no Delta table"):
        validate_table(str(tmp_path / "nothing"), suite)


@pytest.mark.parametrize("engine", ["pandas", "spark"])
def test_results_keep_the_suite_names_of_expectations_that_differ_only_in_mostly(
    spark: SparkSession, engine: str
) -> None:
    """On Spark, GX judges every expectation without counts first, then counts and samples what failed or may fail
    on some rows (`mostly`): the report has the same failures, counts and samples as pandas' single pass."""
    between = {"column": "x", "min_value": 0, "max_value": 10}
    suite = Suite.from_dict({"name": "t", "expectations": [
        {"type": "expect_column_values_to_be_between", "kwargs": between, "meta": {"name": "x in range"}},
        {"type": "expect_column_values_to_be_between", "kwargs": between | {"mostly": 0.5},
         "meta": {"name": "x mostly in range"}},
        {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "x"}, "meta": {"name": "x given"}},
        {"type": "expect_table_row_count_to_be_between", "kwargs": {"min_value": 1}, "meta": {"name": "rows"}},
    ]})  # fmt: skip
    rows = pd.DataFrame({"x": [1, 2, 3, 50]})
    report = validate_dataframe(rows if engine == "pandas" else spark.createDataFrame(rows), suite)
    assert [r.name for r in report.results] == ["x in range", "x mostly in range", "x given", "rows"]  # suite order
    assert report.failed == ["x in range"]
    assert not report.success
    assert [r.name for r in report.results if r.success] == ["x mostly in range", "x given", "rows"]
    assert report.result("rows").observed_value == 4  # an aggregate: its observed value is what it reports
    assert (report.result("x in range").unexpected_count, report.result("x in range").samples) == (1, (50,))
    assert report.result("x mostly in range").unexpected_count == 1  # allowed to fail on some rows: counted
    assert report.result("x given").unexpected_count == (0 if engine == "pandas" else None)  # passed: not counted
