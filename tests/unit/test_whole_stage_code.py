"""The per-record projections every job runs (decode, data contract, side records) compile into Spark's
whole-stage code.

An expression Spark cannot compile into it (a lambda: `filter`, `array_compact`, `transform`) sends its whole
projection to the row-at-a-time path, where every task generates the projection's code again before its first
row: a quarter of a live batch's task time in enrich_clicks at 1,000 clicks/s, whatever the batch's size.
"""

import re
from datetime import UTC, datetime
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from jobs.catalog import CLICKS
from kappa.contracts.dead_letter_format import H_KIND, DeadLetterKind
from kappa.core.settings import load_settings
from kappa.spark.topic_io import decode_topic, topic_contract
from tests.unit.test_decoding_is_total import GOOD, SCHEMA, WRITER_ID

PER_ROW = re.compile(r"\b(Project|Filter|Generate)\b")


def not_compiled(df: DataFrame) -> list[str]:
    """The per-row operators of the physical plan that run outside whole-stage code (not marked `*(n)`)."""
    plan = df._jdf.queryExecution().executedPlan().treeString()  # type: ignore[operator]
    return [line.strip() for line in plan.splitlines() if PER_ROW.search(line) and "*(" not in line]


def test_decoding_the_contract_and_the_dead_letters_compile_into_whole_stage_code(
    spark: SparkSession, tmp_path: Path
) -> None:
    contract = topic_contract(load_settings(), CLICKS)
    assert contract is not None, "clicks have a data contract: the test needs one"
    assert contract.expectations
    rows = [(b"e1", GOOD, "clicks", 0, 0, datetime(2026, 1, 1, tzinfo=UTC)), (b"e2", b"junk", "clicks", 0, 1, None)]
    ddl = "key binary, value binary, topic string, partition int, offset long, timestamp timestamp"
    # Read from files, as a job reads its topic: over rows in memory Spark evaluates projections on the driver.
    spark.createDataFrame(rows, ddl).write.parquet(str(tmp_path / "raw"))
    raw = spark.read.schema(ddl).parquet(str(tmp_path / "raw"))
    decoded = decode_topic(raw, SCHEMA, {WRITER_ID: SCHEMA}, "codegen", 1, contract=contract, key_field="event_id")

    assert not_compiled(decoded.records) == []
    assert not_compiled(decoded.dead_letters) == []
    # What the plans compute is unchanged: one record, one dead letter with its headers.
    assert [r.event_id for r in decoded.records.collect()] == ["e1"]
    [dead] = decoded.dead_letters.collect()
    assert {h.key: h.value.decode() for h in dead.headers}[H_KIND] == DeadLetterKind.NOT_CONFLUENT_FRAMED
