"""sessionize's Spark side: the per-user rule (logic.py) run by Spark's state store, one user at a time.

Spark groups each micro-batch by user and hands the function that user's rows with its stored state; the
function sorts them into log order (partition, offset) and applies the rule. Rows out: one per session
change (upsert or retraction) and one per late event.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame

from jobs.sessionize.logic import Event, Session, UserState, sessionize, state_from_json, state_to_json
from kappa.deadletter import DeadLetterKind
from kappa.side_outputs import SIDE_SCHEMA, late_side_row, side_columns
from kappa.stateful import per_key

OUTPUT_SCHEMA = (
    "kind string, session_id string, user_id string, start_time timestamp, end_time timestamp, clicks int, "
    "distinct_pages int, entry_page string, exit_page string, segment string, "
    f"{SIDE_SCHEMA}"
)
STATE_SCHEMA = "state string"
INPUT_COLUMNS = ("user_id", "event_id", "event_time", "page", "segment", "kafka_topic", "kafka_partition",
                 "kafka_offset", "raw_value")  # fmt: skip
UPSERT, RETRACT, LATE = "upsert", "retract", "late"


def _session_row(kind: str, session: Session | None, session_id: str, user_id: str) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(pd.Index([c.split()[0] for c in OUTPUT_SCHEMA.split(", ")]))
    row.update(kind=kind, session_id=session_id, user_id=user_id)
    if session is not None:
        row.update(
            start_time=pd.Timestamp(session.start_ms, unit="ms", tz="UTC"),
            end_time=pd.Timestamp(session.end_ms, unit="ms", tz="UTC"),
            clicks=session.clicks,
            distinct_pages=len(session.pages),
            entry_page=session.entry_page,
            exit_page=session.exit_page,
            segment=session.segment,
        )
    return row


def sessionize_user(gap_ms: int, lateness_ms: int):  # type: ignore[no-untyped-def]
    """The function for applyInPandasWithState, with the job's gap and allowed lateness."""

    def apply(key: tuple[str], frames: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
        user_id = key[0]
        user_state = state_from_json(state.get[0]) if state.exists else UserState()
        rows = pd.concat(list(frames), ignore_index=True)
        # The user's log order (partition, offset); columns as plain lists: pandas per row costs ~100x more.
        order = np.lexsort((rows["kafka_offset"].to_numpy(), rows["kafka_partition"].to_numpy()))
        event_ids = rows["event_id"].to_numpy()[order].tolist()
        times = rows["event_time"].to_numpy().astype("datetime64[ms]").astype("int64")[order].tolist()
        events = [
            Event(event_id, event_time, page, segment)
            for event_id, event_time, page, segment in zip(
                event_ids, times, rows["page"].to_numpy()[order].tolist(),
                rows["segment"].to_numpy()[order].tolist(), strict=True,
            )
        ]  # fmt: skip
        changes = sessionize(user_id, user_state, events, gap_ms, lateness_ms)
        state.update((state_to_json(user_state),))
        out = [_session_row(UPSERT, s, s.session_id, user_id) for s in changes.upserts]
        out += [_session_row(RETRACT, None, sid, user_id) for sid in changes.retractions]
        late_ids = {e.event_id for e in changes.late}
        for i, event_id in zip(order, event_ids, strict=True):
            if event_id in late_ids:
                row = _session_row(LATE, None, "", user_id)
                row.update(late_side_row(rows, i, DeadLetterKind.LATE_EVENT))
                out.append(row)
        if out:
            yield pd.DataFrame(out)

    return apply


def session_changes(clicks: DataFrame, gap_ms: int, lateness_ms: int) -> DataFrame:
    """Decoded (enriched) clicks with their raw value and Kafka position -> session changes and late events."""
    inputs = clicks.select(*INPUT_COLUMNS, *side_columns(clicks))  # what the rule reads, dead letters riding along
    # one row per session change or late event (or dead letter)
    return per_key(inputs, "user_id", sessionize_user(gap_ms, lateness_ms), OUTPUT_SCHEMA, STATE_SCHEMA)
