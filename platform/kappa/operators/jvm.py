"""What every operator shares: the JVM classes, the RocksDB requirement, the SIDE columns in both directions."""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from kappa.core.errors import SettingsError
from kappa.spark.side_outputs import SIDE_COLUMNS, SIDE_SCHEMA, side_columns

STATE_STORE_PROVIDER = "spark.sql.streaming.stateStore.providerClass"
_SIDE_TIMESTAMP = "side_timestamp"


def require_rocksdb(rows: DataFrame, operator: str) -> None:
    """A SettingsError unless the session can keep `operator`'s state for streaming `rows`: transformWithState
    (in the JVM or in Python) needs the RocksDB state store."""
    if rows.isStreaming and "RocksDB" not in (rows.sparkSession.conf.get(STATE_STORE_PROVIDER, "") or ""):
        raise SettingsError(
            f"{operator} keeps its state with transformWithState, which needs the RocksDB state store: "
            "set spark_state_store to rocksdb (KAPPA_SPARK_STATE_STORE=rocksdb)"
        )


def operators_jvm(rows: DataFrame, operator: str) -> Any:
    """The package io.kappa.operators in the driver's JVM, once the session can run `operator` on `rows`."""
    require_rocksdb(rows, operator)
    jvm = rows.sparkSession.sparkContext._jvm
    assert jvm is not None, "a classic Spark session (the operators need the driver's JVM)"
    return jvm.io.kappa.operators


def side_input(df: DataFrame) -> list[Column]:
    """The SIDE columns in their declared types (a reader may leave one untyped: all null), the timestamp as
    microseconds (the operator's rows carry no timestamp type)."""
    types = dict(c.split() for c in SIDE_SCHEMA.split(", "))
    return [
        F.unix_micros(c.cast("timestamp")).alias("side_timestamp_us") if name == _SIDE_TIMESTAMP
        else c.cast(types[name]).alias(name)
        for name, c in zip(SIDE_COLUMNS, side_columns(df), strict=True)
    ]  # fmt: skip


def side_output() -> list[Column]:
    """The operator's SIDE columns back as kappa.spark.side_outputs declares them."""
    return [
        F.timestamp_micros("side_timestamp_us").alias(c) if c == _SIDE_TIMESTAMP else F.col(c) for c in SIDE_COLUMNS
    ]
