"""A per-key rule never sees its input's dead letters: they share the null key and pass through unchanged."""

from collections.abc import Iterator
from typing import Any

import pandas as pd

from kappa.side_outputs import SIDE_COLUMNS, SIDE_KIND
from kappa.stateful import FreshState, passing_side_rows

COLUMNS = ["kind", "user_id", "n", *SIDE_COLUMNS]


def _rule(key: tuple[Any, ...], frames: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
    """Counts the key's rows: one output row per call, and remembers that it was called."""
    rows = pd.concat(list(frames), ignore_index=True)
    assert rows[SIDE_KIND].isna().all(), "the rule saw a side row"
    calls.append(key)
    yield pd.DataFrame({c: [None] for c in COLUMNS}).assign(kind="counted", user_id=key[0], n=len(rows))


calls: list[tuple[Any, ...]] = []


def _input(users: list[str | None], sides: list[str | None]) -> pd.DataFrame:
    frame = pd.DataFrame({"user_id": users, "event": range(len(users))})
    for c in SIDE_COLUMNS:
        frame[c] = None
    frame[SIDE_KIND] = sides
    frame["side_value"] = [b"raw" if s else None for s in sides]
    return frame


def test_a_real_key_goes_to_the_rule_untouched() -> None:
    calls.clear()
    [out] = passing_side_rows(_rule, COLUMNS)(("u1",), iter([_input(["u1", "u1"], [None, None])]), FreshState())
    assert calls == [("u1",)]
    assert (out["kind"].tolist(), out["n"].tolist()) == (["counted"], [2])


def test_dead_letters_pass_through_and_null_key_records_still_reach_the_rule() -> None:
    calls.clear()
    rows = _input([None, None, None], ["undecodable", None, "contract-violation"])
    out = list(passing_side_rows(_rule, COLUMNS)((None,), iter([rows]), FreshState()))
    side, counted = out
    assert side[SIDE_KIND].tolist() == ["undecodable", "contract-violation"]
    assert side["side_value"].tolist() == [b"raw", b"raw"]
    assert list(side.columns) == COLUMNS
    assert side["kind"].isna().all()  # the rule's own columns stay empty
    assert calls == [(None,)]
    assert counted["n"].tolist() == [1]  # the one record of a null key, judged by the rule


def test_only_dead_letters_never_call_the_rule() -> None:
    calls.clear()
    out = list(passing_side_rows(_rule, COLUMNS)((None,), iter([_input([None], ["undecodable"])]), FreshState()))
    assert calls == []
    assert [len(f) for f in out] == [1]
