"""The as-of enrichment rule, as a pure function of one user's clicks and profile versions.

Which profile version does a click get? The rule reads the data only, never arrival order or batch
boundaries, because clicks and profiles are two topics whose relative arrival differs between a live run
and a replay:

- Version v is *visible* to click c when `v.valid_from <= c.event_time` and `v.log_time <= c.event_time + L`.
  `log_time` is the profile record's Kafka timestamp (when the version was published) and L the contract's
  profile lateness (`profile_lateness_minutes`). A version published more than L after its valid_from is
  not dropped: it applies from `log_time - L` on, and it is reported on the `.late` side topic.
- A click gets the visible version with the greatest (valid_from, profile_version). A click with no visible
  version (the user has no profile yet at that time) is enriched with profile_version null, segment UNKNOWN
  and country null. That is the documented rule for a click before any profile.
- The job emits a click as soon as it sees it, with the best version known so far, and re-emits it under
  the same key (event_id) whenever a newly arrived version changes its answer. The final value per
  event_id is therefore the rule's answer, whatever the arrival order.

Stamps: each click is stamped with its `clicks` partition's clock just before it (`PartitionClock`: the latest
event time among the partition's earlier clicks, in offset order). The stamp is the click's: a function of the
log, the same in every run, kept by every re-emission. page_stats' bound reads it (docs/bounded_view_state.md).

Memory: a click stays correctable while the user's data frontier (the greatest click event time or profile
log time seen for the user) is within L + D of its event time, D being the disorder the contract allows
(`disorder_minutes`). Every version visible to the click was published by `event_time + L`; once the
frontier is D past that, the contract says each such version has arrived. A version that arrives later
than that for an already settled click breaks the contract: it is still applied to every click still held
or yet to come, and it goes to the `.late` side topic so the break is counted, never silent.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from kappa.contracts.topic_declarations import MINUTE_MS


@dataclass(frozen=True)
class Profile:
    profile_version: int
    valid_from_ms: int
    log_time_ms: int
    segment: str
    country: str

    @property
    def order(self) -> tuple[int, int]:
        return (self.valid_from_ms, self.profile_version)


@dataclass(frozen=True)
class Click:
    event_id: str
    event_time_ms: int
    payload: tuple[str | None, ...] = ()  # the click's other fields, kept to re-emit it (opaque here)
    stamp_ms: int | None = None  # its partition's clock just before it (PartitionClock); None: the first click


@dataclass
class Held:
    click: Click
    answer: int | None  # profile_version last emitted for the click


@dataclass
class UserState:
    """What the job keeps per user between micro-batches."""

    profiles: list[Profile] = field(default_factory=list)  # sorted by (valid_from, profile_version)
    held: dict[str, Held] = field(default_factory=dict)  # clicks that a late version may still correct
    frontier_ms: int | None = None  # greatest click event time or profile log time seen
    settled_through_ms: int | None = None  # greatest event time of a click no longer held


@dataclass
class PartitionClock:
    """What the job keeps per `clicks` partition: the latest event time among its clicks so far, in offset order.

    The job writes the clicks' first emissions in offset order, so along an `enriched_clicks` partition (fed by
    one `clicks` partition) their stamps never decrease; a re-emission keeps its older stamp.
    """

    latest_ms: int | None = None

    def stamp(self, clicks: Sequence[Click]) -> list[Click]:
        """A partition's next clicks, in offset order, each stamped with the clock just before it."""
        stamped = []
        for click in clicks:
            stamped.append(replace(click, stamp_ms=self.latest_ms))
            self.latest_ms = _max(self.latest_ms, click.event_time_ms)
        return stamped


@dataclass(frozen=True)
class Answer:
    click: Click
    profile: Profile | None


@dataclass(frozen=True)
class Changes:
    emit: tuple[Answer, ...]  # clicks to (re-)emit with their answer: new ones first, in input order
    late_profiles: tuple[Profile, ...]  # versions that arrived after a click they apply to was settled


def answer(event_time_ms: int, profiles: list[Profile], lateness_ms: int) -> Profile | None:
    """The visible version with the greatest (valid_from, profile_version), or None."""
    keys = [p.valid_from_ms for p in profiles]
    i = bisect.bisect_right(keys, event_time_ms) - 1  # last version valid at the click's time
    while i >= 0 and profiles[i].log_time_ms > event_time_ms + lateness_ms:
        i -= 1  # published too long after this click: not visible to it
    return profiles[i] if i >= 0 else None


def enrich(
    state: UserState,
    profiles: list[Profile],
    clicks: list[Click],
    lateness_ms: int = 20 * MINUTE_MS,
    disorder_ms: int = 10 * MINUTE_MS,
) -> Changes:
    """Apply one user's next profile versions and clicks (each in log order) to its state. Mutates `state`."""
    late: list[Profile] = []
    changed = False
    known = {p.profile_version for p in state.profiles}
    for profile in profiles:
        if profile.profile_version in known:
            continue  # a re-delivered version (at-least-once producer): nothing new
        known.add(profile.profile_version)
        settled = state.settled_through_ms
        if settled is not None and profile.valid_from_ms <= settled and profile.log_time_ms <= settled + lateness_ms:
            late.append(profile)
        bisect.insort(state.profiles, profile, key=lambda p: p.order)
        state.frontier_ms = _max(state.frontier_ms, profile.log_time_ms)
        changed = True

    emit: list[Answer] = []
    for click in clicks:
        best = answer(click.event_time_ms, state.profiles, lateness_ms)
        emit.append(Answer(click, best))
        state.held[click.event_id] = Held(click, best.profile_version if best else None)
        state.frontier_ms = _max(state.frontier_ms, click.event_time_ms)
    new_ids = {c.event_id for c in clicks}
    if changed:  # held clicks whose answer a new version changes
        for event_id, held in state.held.items():
            if event_id in new_ids:
                continue
            best = answer(held.click.event_time_ms, state.profiles, lateness_ms)
            version = best.profile_version if best else None
            if version != held.answer:
                held.answer = version
                emit.append(Answer(held.click, best))
    _settle(state, lateness_ms, disorder_ms)
    return Changes(tuple(emit), tuple(late))


def _settle(state: UserState, lateness_ms: int, disorder_ms: int) -> None:
    """Forget clicks no version can correct any more (by the contract); remember how far that reached."""
    if state.frontier_ms is None:
        return
    horizon = state.frontier_ms - lateness_ms - disorder_ms
    for event_id in [e for e, h in state.held.items() if h.click.event_time_ms < horizon]:
        held = state.held.pop(event_id)
        state.settled_through_ms = _max(state.settled_through_ms, held.click.event_time_ms)


def _max(a: int | None, b: int) -> int:
    return b if a is None else max(a, b)


def state_to_json(state: UserState) -> str:
    """The state as one string column (what Spark's state store keeps per user)."""
    return json.dumps(
        {
            "profiles": [
                [p.profile_version, p.valid_from_ms, p.log_time_ms, p.segment, p.country] for p in state.profiles
            ],
            "held": [
                [h.click.event_id, h.click.event_time_ms, list(h.click.payload), h.answer, h.click.stamp_ms]
                for h in state.held.values()
            ],
            "frontier_ms": state.frontier_ms,
            "settled_through_ms": state.settled_through_ms,
        }
    )


def state_from_json(text: str) -> UserState:
    raw = json.loads(text)
    return UserState(
        profiles=[Profile(*p) for p in raw["profiles"]],
        held={e: Held(Click(e, t, tuple(payload), stamp), a) for e, t, payload, a, stamp in raw["held"]},
        frontier_ms=raw["frontier_ms"],
        settled_through_ms=raw["settled_through_ms"],
    )
