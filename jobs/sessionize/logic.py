"""The sessionization rule, as a pure function of one user's events in log order.

Why per user and in log order: a user's events share one partition, so their offset order is the same in
every run (live with small batches, replay in one batch, restarts). Every decision below reads only that
order and the events' own times, never Spark's global watermark or batch boundaries, so the final sessions
are the same in every run.

Rules (gap G, allowed lateness A):
- An event is *late* when its time is more than A behind the latest event time already seen for the user;
  it goes to the `.late` side output and changes nothing.
- Otherwise it joins every session it is within G of: none -> a new session; one -> that session grows;
  several -> they merge into the one created first (in log order) and the others are retracted.
- A session id is the user id plus the event id that created it, so it never changes while the session grows.
- An event id counted before, at a time within A of the user's latest time, is a correction (enrich_clicks
  re-emits a click when a late profile changes its segment), never a second click: it only updates the segment
  of a session whose first click it is. Only other events advance the user's log position and latest time, and
  first sightings come in the same order in every run (enrich_clicks emits each click first in its own log
  order). A repeat of a click counted more than A behind the latest time is judged as a new event:
  late, like any event that far back, unless its own time moved within A (a source that moves a click from that
  far back publishes the move as a new click). enrich_clicks re-emits a click only while its user's frontier is
  within its L + D (30 minutes) of the click, inside A, so its corrections are never that old; the bound is what
  lets state forget the ids of a session that never ends (a user who clicks every 2 s for weeks).
- State may forget a session once it ends more than A + G before the latest time seen: no event that is
  not late can reach it any more. It may forget a counted click's time once that is more than A behind the
  latest time: a repeat of it is no correction any more. Forgetting either never changes an answer.
- A session forgotten is written once more, whole, as *final* (after the batch's other changes; instead of an
  upsert if the batch also changed it): readers may then forget what they keep for it, because no record of
  that session follows. Which sessions are final at the end of the log does not depend on batches: exactly
  those that end more than A + G before their user's latest time (a live run finalises them earlier, a replay
  at its one batch's end, with the same values).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from kappa.contracts.topic_declarations import MINUTE_MS


@dataclass(frozen=True)
class Event:
    event_id: str
    event_time_ms: int
    page: str
    segment: str = "UNKNOWN"


@dataclass(frozen=True)
class Session:
    session_id: str
    user_id: str
    start_ms: int
    end_ms: int
    clicks: int
    pages: frozenset[str]
    entry_page: str
    exit_page: str
    created_seq: int  # position in the user's log of the event that created it: merge order
    segment: str = "UNKNOWN"  # the user's segment at the session's first click
    first_event_id: str = ""  # the session's first click (by event time): its segment is the session's

    def absorb(self, event: Event) -> Session:
        return replace(
            self,
            start_ms=min(self.start_ms, event.event_time_ms),
            end_ms=max(self.end_ms, event.event_time_ms),
            clicks=self.clicks + 1,
            pages=self.pages | {event.page},
            entry_page=event.page if event.event_time_ms < self.start_ms else self.entry_page,
            segment=event.segment if event.event_time_ms < self.start_ms else self.segment,
            first_event_id=event.event_id if event.event_time_ms < self.start_ms else self.first_event_id,
            exit_page=event.page if event.event_time_ms >= self.end_ms else self.exit_page,
        )

    def merge(self, other: Session) -> Session:
        first = self if self.start_ms <= other.start_ms else other
        latest = self if self.end_ms >= other.end_ms else other
        return replace(
            self,
            start_ms=first.start_ms,
            end_ms=latest.end_ms,
            clicks=self.clicks + other.clicks,
            pages=self.pages | other.pages,
            entry_page=first.entry_page,
            exit_page=latest.exit_page,
            segment=first.segment,
            first_event_id=first.first_event_id,
        )


@dataclass
class UserState:
    """What the job keeps per user between micro-batches."""

    latest_ms: int | None = None
    seen: int = 0  # events of this user processed so far (log position)
    open_sessions: dict[str, Session] = field(default_factory=dict)
    click_times: dict[str, int] = field(default_factory=dict)  # counted clicks' times, while within A of latest


@dataclass(frozen=True)
class Changes:
    upserts: tuple[Session, ...]  # sessions created or changed (emit under their id)
    retractions: tuple[str, ...]  # session ids merged away (emit tombstones)
    late: tuple[Event, ...]  # events beyond the allowed lateness (to the .late topic)
    finals: tuple[Session, ...] = ()  # sessions forgotten: their last record, marked final


def sessionize(
    user_id: str,
    state: UserState,
    events: list[Event],
    gap_ms: int = 30 * MINUTE_MS,
    lateness_ms: int = 120 * MINUTE_MS,
) -> Changes:
    """Apply one user's next events (in log order) to its state; return what to emit. Mutates `state`."""
    changed: dict[str, Session] = {}
    retracted: list[str] = []
    late: list[Event] = []
    for event in events:
        counted_at = state.click_times.get(event.event_id)
        if counted_at is not None and state.latest_ms is not None and counted_at >= state.latest_ms - lateness_ms:
            for opened in [s for s in state.open_sessions.values() if s.first_event_id == event.event_id]:
                if opened.segment != event.segment:  # a correction of a click already counted
                    state.open_sessions[opened.session_id] = replace(opened, segment=event.segment)
                    changed[opened.session_id] = state.open_sessions[opened.session_id]
            continue
        seq = state.seen
        state.seen += 1
        if state.latest_ms is not None and event.event_time_ms < state.latest_ms - lateness_ms:
            late.append(event)
            continue
        state.latest_ms = event.event_time_ms if state.latest_ms is None else max(state.latest_ms, event.event_time_ms)
        touching = sorted(
            (
                s
                for s in state.open_sessions.values()
                if s.start_ms - gap_ms <= event.event_time_ms <= s.end_ms + gap_ms
            ),
            key=lambda s: s.created_seq,
        )
        if not touching:
            session = Session(
                session_id=f"{user_id}:{event.event_id}",
                user_id=user_id,
                start_ms=event.event_time_ms,
                end_ms=event.event_time_ms,
                clicks=1,
                pages=frozenset({event.page}),
                entry_page=event.page,
                exit_page=event.page,
                created_seq=seq,
                segment=event.segment,
                first_event_id=event.event_id,
            )
        else:
            session = touching[0].absorb(event)
            for other in touching[1:]:
                session = session.merge(other)
                del state.open_sessions[other.session_id]
                changed.pop(other.session_id, None)
                retracted.append(other.session_id)
        state.open_sessions[session.session_id] = session
        state.click_times[event.event_id] = event.event_time_ms
        changed[session.session_id] = session
    finals = _forget_settled(state, gap_ms, lateness_ms)
    retracted_final = tuple(r for r in retracted if r not in state.open_sessions)
    upserts = sorted((s for sid, s in changed.items() if sid in state.open_sessions), key=lambda s: s.created_seq)
    return Changes(tuple(upserts), retracted_final, tuple(late), finals)


def _forget_settled(state: UserState, gap_ms: int, lateness_ms: int) -> tuple[Session, ...]:
    """Forget the sessions no event that counts can reach any more, and the clicks' times no repeat corrects
    any more; -> the sessions, by creation."""
    if state.latest_ms is None:
        return ()
    correctable = state.latest_ms - lateness_ms
    state.click_times = {i: t for i, t in state.click_times.items() if t >= correctable}
    horizon = state.latest_ms - lateness_ms - gap_ms
    forgotten = [s for s in state.open_sessions.values() if s.end_ms < horizon]
    for session in forgotten:
        del state.open_sessions[session.session_id]
    return tuple(sorted(forgotten, key=lambda s: s.created_seq))


def state_to_json(state: UserState) -> str:
    """The state as one string column (what Spark's state store keeps per user)."""
    import json

    sessions = [
        {**s.__dict__, "pages": sorted(s.pages)}
        for s in sorted(state.open_sessions.values(), key=lambda s: s.created_seq)
    ]
    return json.dumps(
        {"latest_ms": state.latest_ms, "seen": state.seen, "sessions": sessions, "click_times": state.click_times}
    )


def state_from_json(text: str) -> UserState:
    import json

    raw = json.loads(text)
    sessions = {s["session_id"]: Session(**{**s, "pages": frozenset(s["pages"])}) for s in raw["sessions"]}
    return UserState(
        latest_ms=raw["latest_ms"], seen=raw["seen"], open_sessions=sessions, click_times=raw["click_times"]
    )
