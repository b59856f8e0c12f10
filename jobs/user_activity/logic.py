"""The user activity rule, as a pure function of the `sessions` log in log order: the specification.

`sessions` is compacted by session id: a record sets a session's value, a tombstone (its key alone) takes the
session away (a session merged into another). A record that names no user keeps the user the session had (the
schema requires one, so it never happens on the topic). A tombstone of a session never seen changes nothing.
A record marked `final` is its session's last (sessionize writes nothing of the session after it): the session
counts with that value for ever, and its id is forgotten, so that what the view keeps per session stays bounded
by the sessions still open. Per user, over their live sessions (the open ones and the final ones):

- sessions, clicks (the sum of the sessions' clicks);
- first_seen: the earliest start, last_seen: the latest end;
- segment: that of the latest session by start time, ties broken by the greater session id (Spark's
  `max_by(segment, struct(start_time, session_id))`: a missing start orders first, strings by UTF-8 bytes).

A user with no live session has no row. The operator kappa.operators.user_activity keeps the same answer
incrementally; the differential test holds the two equal after every batch.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class SessionChange:
    """One record of `sessions`: a value, or a tombstone (`deleted`, the values None)."""

    session_id: str
    user_id: str | None
    start_ms: int | None
    end_ms: int | None
    clicks: int | None
    segment: str | None
    deleted: bool = False
    final: bool = False  # the session's last record


@dataclass(frozen=True)
class Activity:
    """One row of the view."""

    sessions: int
    clicks: int
    first_seen_ms: int | None
    last_seen_ms: int | None
    segment: str | None


def live_sessions(log: Iterable[SessionChange]) -> list[SessionChange]:
    """The latest value of each session not taken away: the final ones, then the open ones."""
    open_: dict[str, SessionChange] = {}
    final: list[SessionChange] = []
    for change in log:
        if change.deleted:
            open_.pop(change.session_id, None)
            continue
        known = open_.get(change.session_id)
        user = change.user_id if change.user_id is not None else (known.user_id if known else None)
        if user is None:
            continue
        value = SessionChange(change.session_id, user, change.start_ms, change.end_ms, change.clicks, change.segment)
        if change.final:
            open_.pop(change.session_id, None)
            final.append(value)
        else:
            open_[change.session_id] = value
    return [*final, *open_.values()]


def user_activity(log: Iterable[SessionChange]) -> dict[str, Activity]:
    """The view over the whole log: user -> its row."""
    by_user: dict[str, list[SessionChange]] = defaultdict(list)
    for session in live_sessions(log):
        assert session.user_id is not None
        by_user[session.user_id].append(session)
    rows = {}
    for user, sessions in by_user.items():
        starts = [s.start_ms for s in sessions if s.start_ms is not None]
        ends = [s.end_ms for s in sessions if s.end_ms is not None]
        # max_by over struct(start, id): a missing start orders before every start
        latest = max(sessions, key=lambda s: (s.start_ms is not None, s.start_ms or 0, s.session_id.encode()))
        rows[user] = Activity(
            sessions=len(sessions),
            clicks=sum(s.clicks or 0 for s in sessions),
            first_seen_ms=min(starts) if starts else None,
            last_seen_ms=max(ends) if ends else None,
            segment=latest.segment,
        )
    return rows
