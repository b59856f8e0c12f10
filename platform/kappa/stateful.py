"""Per-key stateful transforms that run the same in a stream and in a plain batch.

A job's rule is a function of one key's new rows and its stored state. In a stream Spark keeps the state
between micro-batches (`applyInPandasWithState`); over a batch DataFrame, which Spark refuses for that API,
the same function runs once per key with an empty state and sees all of the key's rows in one call. So the
Kappa promise (live run, replay and plain batch give the same outputs) is tested on the job's own code.

A job's one query carries its input's dead letters through the same operator: rows with the SIDE columns of
kappa.side_outputs set and every field null, so they share the null key, and leave again unchanged. The rule
never sees them; a rule's output schema ends with SIDE_SCHEMA, which it fills for records it sets aside.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame

from kappa.side_outputs import SIDE_COLUMNS, SIDE_KIND

# fn(key, frames of the key's new rows, state) -> frames of output rows (Spark's applyInPandasWithState shape)
StatefulFunction = Callable[[tuple[Any, ...], Iterator[pd.DataFrame], Any], Iterator[pd.DataFrame]]


class FreshState:
    """The part of Spark's GroupState a rule uses, for a batch run: empty at the start, dropped at the end."""

    def __init__(self) -> None:
        self._value: tuple[Any, ...] | None = None

    @property
    def exists(self) -> bool:
        return self._value is not None

    @property
    def get(self) -> tuple[Any, ...]:
        if self._value is None:
            raise ValueError("no state for this key")
        return self._value

    def update(self, value: tuple[Any, ...]) -> None:
        self._value = value

    def remove(self) -> None:
        self._value = None


def passing_side_rows(fn: StatefulFunction, columns: list[str]) -> StatefulFunction:
    """`fn`, with the null key's side rows (dead letters) passed through as output rows: only that key pays."""

    def apply(key: tuple[Any, ...], frames: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
        if key[0] is not None:
            yield from fn(key, frames, state)
            return
        rows = pd.concat(list(frames), ignore_index=True)
        side = rows[SIDE_KIND].notna()
        if side.any():
            aside = rows.loc[side].reset_index(drop=True)
            yield pd.DataFrame({c: aside[c] if c in SIDE_COLUMNS else None for c in columns}, index=aside.index)
        if not side.all():  # records whose key is null: the rule's to judge
            yield from fn(key, iter([rows.loc[~side].reset_index(drop=True)]), state)

    return apply


def per_key(df: DataFrame, key: str, fn: StatefulFunction, output_schema: str, state_schema: str) -> DataFrame:
    """Run `fn` per value of `key`: with Spark's state store when `df` streams, in one call per key otherwise.
    `output_schema` ends with SIDE_SCHEMA; `df` has the SIDE columns (kappa.side_outputs.side_columns)."""
    columns = [c.split()[0] for c in output_schema.split(", ")]
    missing = [c for c in SIDE_COLUMNS if c not in columns or c not in df.columns]
    if missing:
        raise ValueError(f"a per-key rule's input and output schema need the side columns; missing {missing}")
    fn = passing_side_rows(fn, columns)
    if df.isStreaming:
        return df.groupBy(key).applyInPandasWithState(fn, output_schema, state_schema, "update", "NoTimeout")

    def once(group_key: tuple[Any, ...], rows: pd.DataFrame) -> pd.DataFrame:
        frames = list(fn(group_key, iter([rows]), FreshState()))
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)

    return df.groupBy(key).applyInPandas(once, output_schema)
