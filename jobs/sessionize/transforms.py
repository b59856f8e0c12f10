"""sessionize's Spark side: the per-user rule (logic.py) run by Spark's state store, one user at a time.

Spark groups each micro-batch by user and hands the function that user's rows with its stored state; the
function sorts them into log order (partition, offset) and applies the rule. Rows out: one per session
change (upsert or retraction) and one per late event.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame

from jobs.sessionize.logic import Event, Session, UserState, sessionize, state_from_json, state_to_json

OUTPUT_SCHEMA = (
    "kind string, session_id string, user_id string, start_time timestamp, end_time timestamp, clicks int, "
    "distinct_pages int, entry_page string, exit_page string, segment string, "
    "late_value binary, late_topic string, late_partition int, late_offset long"
)
STATE_SCHEMA = "state string"
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
        rows = pd.concat(list(frames)).sort_values(["kafka_partition", "kafka_offset"])  # the user's log order
        events = [
            Event(r.event_id, int(pd.Timestamp(r.event_time).value // 1_000_000), r.page, r.segment)
            for r in rows.itertuples()
        ]
        changes = sessionize(user_id, user_state, events, gap_ms, lateness_ms)
        state.update((state_to_json(user_state),))
        out = [_session_row(UPSERT, s, s.session_id, user_id) for s in changes.upserts]
        out += [_session_row(RETRACT, None, sid, user_id) for sid in changes.retractions]
        late_ids = {e.event_id for e in changes.late}
        for r in rows.itertuples():
            if r.event_id in late_ids:
                row = _session_row(LATE, None, "", user_id)
                row.update(late_value=r.raw_value, late_topic=r.kafka_topic, late_partition=r.kafka_partition,
                           late_offset=r.kafka_offset)  # fmt: skip
                out.append(row)
        if out:
            yield pd.DataFrame(out)

    return apply


def session_changes(clicks: DataFrame, gap_ms: int, lateness_ms: int) -> DataFrame:
    """Decoded (enriched) clicks with their raw value and Kafka position -> session changes and late events."""
    # one row per session change or late event
    return clicks.groupBy("user_id").applyInPandasWithState(
        sessionize_user(gap_ms, lateness_ms), OUTPUT_SCHEMA, STATE_SCHEMA, "update", "NoTimeout"
    )
