"""Data contracts: one Great Expectations 1.x suite per dataset, kept in `schemas/expectations/<dataset>.json`.

The suite file is the single source of truth, reviewed like code next to the Avro schemas. It is used twice:

- **Row-level, inside the jobs, per micro-batch.** The expectations that judge one row on its own (not null,
  in a set, between, regex, length, a column pair compared) become ONE Spark Column, evaluated in the JVM: no
  Python per record and no Great Expectations import in a job. `read_topic` applies the suite of the topic's
  dataset while decoding, so a decoded record that breaks it goes to `<topic>.dlq` as a dead letter of kind
  `contract-violation`, its header `kappa.contract.broken` naming the broken expectations.
- **Dataset-level, on a whole table or topic.** Every expectation of the suite (the row-level ones too, plus
  uniqueness, row counts, aggregates) runs through Great Expectations itself, in an ephemeral context that
  writes no files: Dagster's asset checks on the Delta tables, and the replay engine before a cutover.

The API (what the replay engine and Dagster call):

    suite = suite_for(settings, "page_stats")           # Suite | None: schemas/expectations/page_stats.json
    report = validate_table("<delta_root>/page_stats/v2", suite)          # delta-rs + pandas, no JVM
    report = validate_table("<delta_root>/page_stats/v2", suite, spark)   # the same table through Spark
    report = validate_dataframe(frame, suite)           # a Spark or pandas DataFrame, e.g. a topic's
                                                        # latest value per key (kappa.spark.compacted)
    report.success, report.failed, report.as_dict()     # QualityReport: per-expectation results, counts, samples

    contract = row_contract(suite)                      # the row-level part, as Spark Columns
    passing, failing = split_rows(frame, suite)         # failing has `contract_violations` (array<string>)

An expectation's name is `meta.name` when the suite gives one, else `<type>(<columns>)`, e.g.
`expect_column_values_to_be_in_set(segment)`; names are unique within a suite. An expectation with `mostly`
below 1 or a `row_condition` is a statement about a share of rows or a subset, so it runs dataset-level only.
Regexes run as Java regexes in the jobs (`rlike`, a search like Python's `re.search` as GX uses it): keep them
to the syntax both share.
"""

from __future__ import annotations

import json
import math
import os
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from functools import reduce
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kappa.core.errors import KappaError
from kappa.core.settings import KappaSettings

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import Column, DataFrame, SparkSession

EXPECTATIONS_DIR = "expectations"  # below the schemas folder
VIOLATIONS = "contract_violations"  # split_rows' column on failing rows: names of the broken expectations
SAMPLES = 5  # unexpected values kept per expectation in a report


@dataclass(frozen=True)
class Expectation:
    """One expectation of a suite, as its JSON has it."""

    type: str
    kwargs: Mapping[str, Any]
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def columns(self) -> tuple[str, ...]:
        k = self.kwargs
        if "column" in k:
            return (str(k["column"]),)
        if "column_A" in k:
            return (str(k["column_A"]), str(k["column_B"]))
        return tuple(str(c) for c in k.get("column_list", ()))

    @property
    def name(self) -> str:
        return str(self.meta.get("name") or f"{self.type}({', '.join(self.columns)})")

    @property
    def row_level(self) -> bool:
        """Judged on each row alone, for every row: what a job can enforce record by record."""
        return (
            self.type in _ROW_RULES
            and float(self.kwargs.get("mostly", 1)) >= 1
            and not self.kwargs.get("row_condition")
        )


@dataclass(frozen=True)
class Suite:
    """An expectation suite (Great Expectations 1.x JSON: name, expectations[type, kwargs, meta], meta)."""

    name: str
    expectations: tuple[Expectation, ...]
    document: Mapping[str, Any]  # the file as written: what Great Expectations itself is given
    path: Path | None = None

    @classmethod
    def from_dict(cls, document: Mapping[str, Any], path: Path | None = None) -> Suite:
        where = str(path) if path else "suite"
        if not isinstance(document.get("name"), str) or not isinstance(document.get("expectations"), list):
            raise KappaError(f"{where}: a suite needs a `name` and a list of `expectations`")
        expectations = []
        for i, e in enumerate(document["expectations"]):
            if not isinstance(e, dict) or not isinstance(e.get("type"), str):
                raise KappaError(f"{where}: expectation #{i} needs a `type`")
            expectations.append(Expectation(e["type"], dict(e.get("kwargs", {})), dict(e.get("meta") or {})))
        names = [e.name for e in expectations]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise KappaError(f"{where}: expectation names must be unique, give these a meta.name: {twice}")
        return cls(document["name"], tuple(expectations), document, path)

    @classmethod
    def load(cls, path: Path) -> Suite:
        try:
            document = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise KappaError(f"expectation suite {path}: {exc}") from None
        return cls.from_dict(document, path)

    @property
    def row_level(self) -> tuple[Expectation, ...]:
        return tuple(e for e in self.expectations if e.row_level)


def suites_dir(settings: KappaSettings) -> Path:
    return settings.schemas_path / EXPECTATIONS_DIR


def suite_for(settings: KappaSettings, dataset: str) -> Suite | None:
    """The suite kept for a dataset (a topic's dataset name or a Delta table's name), or None if none is."""
    path = suites_dir(settings) / f"{dataset}.json"
    return Suite.load(path) if path.exists() else None


# ---------------------------------------------------------------------------------------------- row level

Field = Callable[[str], "Column"]  # column name -> the Column holding it (F.col, or a struct's field)


def _literal(value: Any) -> Column:
    # Lazy: pyspark, only where a Spark session runs (this module is imported without one).
    from pyspark.sql import functions as F

    return F.lit(value)


def _between(value: Column, k: Mapping[str, Any]) -> Column:
    lo, hi = k.get("min_value"), k.get("max_value")
    checks = []
    if lo is not None:
        checks.append(value > _literal(lo) if k.get("strict_min") else value >= _literal(lo))
    if hi is not None:
        checks.append(value < _literal(hi) if k.get("strict_max") else value <= _literal(hi))
    if not checks:
        raise KappaError("expect_..._to_be_between needs min_value or max_value")
    return reduce(lambda a, b: a & b, checks)


def _pair(col: Field, k: Mapping[str, Any], compare: Callable[[Column, Column], Column]) -> Column:
    a, b = col(str(k["column_A"])), col(str(k["column_B"]))
    ignore = k.get("ignore_row_if", "both_values_are_missing")
    ok = compare(a, b)
    if ignore == "both_values_are_missing":
        return (a.isNull() & b.isNull()) | ok
    if ignore == "either_value_is_missing":
        return a.isNull() | b.isNull() | ok
    return ok


def _values(rule: Callable[[Column, Mapping[str, Any]], Column]) -> Callable[[Field, Mapping[str, Any]], Column]:
    """A column-map rule: Great Expectations leaves null values out of it (they pass)."""

    def judge(col: Field, k: Mapping[str, Any]) -> Column:
        value = col(str(k["column"]))
        return value.isNull() | rule(value, k)

    return judge


def _length(value: Column) -> Column:
    # Lazy: pyspark, only where a Spark session runs (this module is imported without one).
    from pyspark.sql import functions as F

    return F.length(value)


# expectation type -> (field resolver, kwargs) -> a Column that is true when the row keeps the rule (or null)
_ROW_RULES: dict[str, Callable[[Field, Mapping[str, Any]], Column]] = {
    "expect_column_values_to_not_be_null": lambda col, k: col(str(k["column"])).isNotNull(),
    "expect_column_values_to_be_null": lambda col, k: col(str(k["column"])).isNull(),
    "expect_column_values_to_be_in_set": _values(lambda v, k: v.isin(list(k["value_set"]))),
    "expect_column_values_to_not_be_in_set": _values(lambda v, k: ~v.isin(list(k["value_set"]))),
    "expect_column_values_to_be_between": _values(_between),
    "expect_column_value_lengths_to_be_between": _values(lambda v, k: _between(_length(v), k)),
    "expect_column_value_lengths_to_equal": _values(lambda v, k: _length(v) == _literal(k["value"])),
    "expect_column_values_to_match_regex": _values(lambda v, k: v.rlike(str(k["regex"]))),
    "expect_column_values_to_not_match_regex": _values(lambda v, k: ~v.rlike(str(k["regex"]))),
    "expect_column_pair_values_a_to_be_greater_than_b": lambda col, k: _pair(
        col, k, lambda a, b: a >= b if k.get("or_equal") else a > b
    ),
    "expect_column_pair_values_to_be_equal": lambda col, k: _pair(col, k, lambda a, b: a == b),
}


@dataclass(frozen=True)
class RowContract:
    """The row-level expectations of a suite as Spark Columns (built lazily, so no session is needed)."""

    suite: str
    expectations: tuple[Expectation, ...]

    @property
    def columns(self) -> frozenset[str]:
        return frozenset(c for e in self.expectations for c in e.columns)

    def require(self, available: Sequence[str]) -> None:
        """Fail at start-up, naming the suite and column, when a rule reads a column the data does not have."""
        missing = sorted(self.columns - set(available))
        if missing:
            raise KappaError(f"expectation suite {self.suite} reads column(s) {missing} the data does not have")

    def checks(self, col: Field) -> list[tuple[str, Column]]:
        """(expectation name, a Column true when the row keeps it: never null)."""
        # Lazy: pyspark, only where a Spark session runs (this module is imported without one).
        from pyspark.sql import functions as F

        return [(e.name, F.coalesce(_ROW_RULES[e.type](col, e.kwargs), F.lit(False))) for e in self.expectations]

    def passes(self, col: Field | None = None) -> Column:
        """True when the row keeps every row-level expectation (one boolean Column, evaluated in the JVM)."""
        # Lazy: pyspark, only where a Spark session runs (this module is imported without one).
        from pyspark.sql import functions as F

        checks = self.checks(col or F.col)
        return reduce(lambda a, b: a & b, (ok for _, ok in checks), F.lit(True))

    def violations(self, col: Field | None = None) -> Column:
        """array<string>: the names of the expectations the row breaks, in suite order (empty when none)."""
        # Lazy: pyspark, only where a Spark session runs (this module is imported without one).
        from pyspark.sql import functions as F

        return kept_in_order([(~ok, F.lit(name)) for name, ok in self.checks(col or F.col)], "string")


def kept_in_order(items: Sequence[tuple[Column, Column]], element_type: str) -> Column:
    """array<element_type>: each (keep, element)'s element where `keep` holds, in their order.

    A concat of one-element arrays, not `array_compact`/`filter`: a lambda is an expression Spark cannot compile
    into its whole-stage code, so its whole projection ran row by row and every task generated that projection's
    code again (29 % of a live batch's task time in enrich_clicks at 1,000 clicks/s)."""
    # Lazy: pyspark, only where a Spark session runs (this module is imported without one).
    from pyspark.sql import functions as F

    none = F.array().cast(f"array<{element_type}>")
    return F.concat(none, *[F.when(keep, F.array(element)).otherwise(none) for keep, element in items])


def row_contract(suite: Suite) -> RowContract:
    return RowContract(suite.name, suite.row_level)


def split_rows(df: DataFrame, suite: Suite | RowContract) -> tuple[DataFrame, DataFrame]:
    """(rows keeping every row-level expectation, rows breaking one or more + `contract_violations`)."""
    contract = suite if isinstance(suite, RowContract) else row_contract(suite)
    contract.require(df.columns)
    passing = df.where(contract.passes())
    failing = df.where(~contract.passes()).withColumn(VIOLATIONS, contract.violations())
    return passing, failing


# ---------------------------------------------------------------------------------------------- dataset level


@dataclass(frozen=True)
class ExpectationResult:
    name: str
    type: str
    kwargs: Mapping[str, Any]
    success: bool
    unexpected_count: int | None = None  # rows (or values) breaking it; None for table-level expectations
    unexpected_percent: float | None = None
    observed_value: Any = None  # for aggregate expectations (row count, mean, ...)
    samples: tuple[Any, ...] = ()  # some unexpected values
    error: str | None = None  # the expectation could not be evaluated (e.g. a missing column)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "kwargs": _jsonable(dict(self.kwargs)),
            "success": self.success,
            "unexpected_count": self.unexpected_count,
            "unexpected_percent": self.unexpected_percent,
            "observed_value": _jsonable(self.observed_value),
            "samples": _jsonable(list(self.samples)),
            "error": self.error,
        }


@dataclass(frozen=True)
class QualityReport:
    suite: str
    success: bool
    results: tuple[ExpectationResult, ...]

    @property
    def failed(self) -> list[str]:
        return [r.name for r in self.results if not r.success]

    def result(self, name: str) -> ExpectationResult:
        return next(r for r in self.results if r.name == name)

    def as_dict(self) -> dict[str, Any]:
        return {
            "suite": self.suite,
            "success": self.success,
            "evaluated": len(self.results),
            "failed": self.failed,
            "results": [r.as_dict() for r in self.results],
        }

    def summary(self) -> str:
        if self.success:
            return f"{self.suite}: all {len(self.results)} expectations met"
        parts = [
            f"{r.name}" + (f" ({r.unexpected_count} unexpected)" if r.unexpected_count else "")
            for r in self.results
            if not r.success
        ]
        return f"{self.suite}: {len(parts)} of {len(self.results)} expectations failed: " + "; ".join(parts)


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v) for v in value]
    if hasattr(value, "isoformat"):  # pandas.Timestamp, numpy datetime64 wrappers
        return str(value.isoformat())
    if hasattr(value, "item"):  # numpy scalars
        return _jsonable(value.item())
    return str(value)


def _gx() -> Any:
    """Great Expectations, imported on first use (about 3 s) and never phoning home."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
    # Lazy: Great Expectations takes seconds to import; only a contract check needs it.
    import great_expectations as gx

    return gx


def import_in_background() -> threading.Thread:
    """Import Great Expectations on a thread, for a command that validates after minutes of Spark work (the
    replay's catch-up): its 4 s of imports then overlap the JVM's work instead of following it."""
    thread = threading.Thread(target=_gx, name="import-great-expectations", daemon=True)
    thread.start()
    return thread


# Each expectation's place in its suite, in the meta given to GX: results map back to the suite's names even
# when two expectations differ only in `mostly` or `row_condition`.
_POSITION = "kappa_position"


def validate_dataframe(frame: DataFrame | pd.DataFrame, suite: Suite) -> QualityReport:
    """Run the whole suite through Great Expectations on a Spark or pandas DataFrame (ephemeral context: no
    files written). A Spark frame is cached for the run (GX computes its metrics in several Spark jobs).

    On Spark, GX first judges the row-by-row (map) rules that must hold on every row with result format
    BOOLEAN_ONLY: a few bundled aggregations, where SUMMARY's counts and samples cost two Spark jobs more per rule.
    Those that failed run again with SUMMARY, with the rest of the suite (aggregates, `mostly` rules); a passing
    map rule's counts are not given (it had no unexpected row). Pandas runs once, with SUMMARY: no job to save."""
    every = list(range(len(suite.expectations)))
    if _is_pandas(frame):
        return _report(suite, _run_gx(frame, suite, every, "SUMMARY"))
    cache_here = not getattr(frame, "is_cached", False)  # a caller's cache is the caller's
    if cache_here:
        frame.persist()
    try:
        strict = [i for i in every if _strict_map_rule(suite.expectations[i])]
        results = _run_gx(frame, suite, strict, "BOOLEAN_ONLY") if strict else {}
        again = sorted({i for i in strict if not results[i].success} | (set(every) - set(strict)))
        if again:
            results |= _run_gx(frame, suite, again, "SUMMARY")
    finally:
        if cache_here:
            frame.unpersist()
    return _report(suite, results)


def _strict_map_rule(expectation: Expectation) -> bool:
    """A rule GX checks row by row (a map metric), which must hold on every row: it passes with no unexpected row."""
    # Lazy: Great Expectations takes seconds to import; only a contract check needs it.
    from great_expectations.expectations.registry import get_expectation_impl

    try:
        implementation = get_expectation_impl(expectation.type)
    except Exception:  # an unknown type: GX reports it in its result, with SUMMARY like any other
        return False
    return getattr(implementation, "map_metric", None) is not None and float(expectation.kwargs.get("mostly", 1)) >= 1


def _report(suite: Suite, results: Mapping[int, ExpectationResult]) -> QualityReport:
    """The results in suite order; the suite passes when each of its expectations does."""
    ordered = tuple(results[i] for i in sorted(results))
    return QualityReport(suite.name, all(r.success for r in ordered), ordered)


def _run_gx(
    frame: DataFrame | pd.DataFrame, suite: Suite, positions: Sequence[int], result_format: str
) -> dict[int, ExpectationResult]:
    """Some of the suite's expectations (by position) through GX, with this result format: results by position."""
    gx = _gx()
    # Lazy: Great Expectations takes seconds to import; only a contract check needs it.
    from great_expectations.core import ExpectationSuite
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    expectations = suite.expectations
    gx_suite = ExpectationSuite(
        name=suite.name,
        expectations=[
            {
                "type": expectations[i].type,
                "kwargs": dict(expectations[i].kwargs),
                "meta": {**expectations[i].meta, _POSITION: i},
            }
            for i in positions
        ],
    )
    label = f"kappa_{uuid.uuid4().hex[:8]}"
    source = context.data_sources.add_pandas(label) if _is_pandas(frame) else context.data_sources.add_spark(label)
    batch = (
        source.add_dataframe_asset(label)
        .add_batch_definition_whole_dataframe(label)
        .get_batch(batch_parameters={"dataframe": frame})
    )
    outcome = batch.validate(
        gx_suite, result_format={"result_format": result_format, "partial_unexpected_count": SAMPLES}
    )
    results = {}
    for r in outcome.results:
        config = r.expectation_config
        position = (config.meta or {}).get(_POSITION)  # GX reorders results; the meta comes back as given
        if not isinstance(position, int):
            raise KappaError(f"Great Expectations returned a result of suite {suite.name} that names no expectation")
        expectation = expectations[position]
        info = r.exception_info or {}
        detail = r.result or {}
        results[position] = ExpectationResult(
            name=expectation.name,
            type=config.type,
            kwargs=expectation.kwargs,
            success=bool(r.success),
            unexpected_count=detail.get("unexpected_count"),
            unexpected_percent=detail.get("unexpected_percent"),
            observed_value=detail.get("observed_value"),
            samples=tuple(detail.get("partial_unexpected_list") or ()),
            error=info.get("exception_message") if info.get("raised_exception") else None,
        )
    return results


def _is_pandas(frame: object) -> bool:
    return type(frame).__module__.startswith("pandas")


def validate_table(path: str, suite: Suite, spark: SparkSession | None = None) -> QualityReport:
    """Run the suite on a Delta table. With a Spark session the table is read by Spark; without one, by
    delta-rs into pandas (no JVM: what Dagster's checks use; only the columns the suite reads are loaded)."""
    if spark is not None:
        return validate_dataframe(spark.read.format("delta").load(path), suite)
    # Lazy: delta-rs, needed only to validate a table.
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        table = DeltaTable(path)
    except TableNotFoundError:
        raise KappaError(f"no Delta table at {path}: has the job that writes it run?") from None
    wanted = {c for e in suite.expectations for c in e.columns}
    present = [f.name for f in table.schema().fields]
    columns = [c for c in present if c in wanted] or present
    return validate_dataframe(table.to_pandas(columns=columns), suite)
