"""A seeded clickstream generator, the reference pipeline's sample data (schemas/clicks.avsc and
user_profiles.avsc): users with changing profiles, Zipf-popular pages, sessions with think times and gaps, events
out of order and late, and (on request) malformed records.

Deterministic for a seed: the same seed gives the same events in the same order, so tests and benchmarks can
compare runs. Event times are UTC milliseconds.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from kappa.contracts.topic_declarations import MINUTE_MS
from kappa.kafka.clients import Outgoing
from kappa.kafka.partitioning import partition_for

START = datetime(2026, 1, 1, tzinfo=UTC)


DEVICES = ("DESKTOP", "MOBILE", "TABLET", "UNKNOWN")
_DEVICE_WEIGHTS = (55, 38, 6, 1)


@dataclass(frozen=True)
class Click:
    event_id: str
    user_id: str
    page: str
    referrer: str | None
    event_time_ms: int
    device: str = "UNKNOWN"

    def as_avro(self) -> dict[str, object]:
        """The record as schemas/clicks.avsc has it (fastavro takes datetimes for timestamp-millis)."""
        return {
            "event_id": self.event_id,
            "user_id": self.user_id,
            "page": self.page,
            "referrer": self.referrer,
            "event_time": datetime.fromtimestamp(self.event_time_ms / 1000, tz=UTC),
            "device": self.device,
        }


def zipf_weights(n: int, exponent: float = 1.1) -> list[float]:
    return [1.0 / (rank**exponent) for rank in range(1, n + 1)]


def clicks(count: int, users: int = 500, pages: int = 200, seed: int = 7) -> Iterator[Click]:
    """`count` clicks in event-time order from `users` users browsing in sessions.

    Time-driven: the user whose next click is soonest acts next. Think times ~30 s (exponential); with
    probability 0.08 a session ends and the next click comes after a gap of 40-240 minutes.
    """
    rng = random.Random(seed)
    page_names = [f"/page/{i:04d}" for i in range(pages)]
    weights = zipf_weights(pages)
    start_ms = int(START.timestamp() * 1000)
    user_ids = [f"user-{u:05d}" for u in range(users)]
    device = {u: rng.choices(DEVICES, _DEVICE_WEIGHTS)[0] for u in user_ids}
    last_page: dict[str, str | None] = dict.fromkeys(user_ids)
    upcoming = [(start_ms + rng.randrange(60 * MINUTE_MS), u) for u in user_ids]  # (next click time, user)
    heapq.heapify(upcoming)
    for n in range(count):
        at, user = heapq.heappop(upcoming)
        page = rng.choices(page_names, weights)[0]
        yield Click(
            event_id=f"evt-{seed}-{n:09d}",
            user_id=user,
            page=page,
            referrer=last_page[user],
            event_time_ms=at,
            device=device[user],
        )
        if rng.random() < 0.08:  # end of a session: an inactivity gap longer than 30 minutes
            heapq.heappush(upcoming, (at + rng.randrange(40, 240) * MINUTE_MS, user))
            last_page[user] = None
        else:
            heapq.heappush(upcoming, (at + int(rng.expovariate(1 / 30_000)) + 1_000, user))
            last_page[user] = page


SEGMENTS = ("FREE", "TRIAL", "PRO", "ENTERPRISE")
COUNTRIES = ("DE", "FR", "US", "GB", "IN", "BR", "JP", "NL")


@dataclass(frozen=True)
class ProfileVersion:
    user_id: str
    profile_version: int
    segment: str
    country: str
    valid_from_ms: int

    def as_avro(self) -> dict[str, object]:
        return {
            "user_id": self.user_id,
            "profile_version": self.profile_version,
            "segment": self.segment,
            "country": self.country,
            "valid_from": datetime.fromtimestamp(self.valid_from_ms / 1000, tz=UTC),
        }


@dataclass(frozen=True)
class StreamConfig:
    """What `kappa generate` produces. Every share is a probability per event; times are milliseconds."""

    events: int = 10_000
    users: int = 500
    pages: int = 200
    seed: int = 7
    disorder_ms: int = 5_000  # every event reaches the log up to this long after it happened (out of order)
    late_share: float = 0.01  # ... and this share arrives `late_by_ms` (plus up to disorder_ms) late
    late_by_ms: int = 45 * MINUTE_MS
    no_profile_share: float = 0.05  # users whose first clicks come before any profile of theirs
    profile_change_share: float = 0.01  # per click: the user's profile changes shortly after it
    late_profile_share: float = 0.3  # profile changes that reach the log after later clicks of the user
    malformed_share: float = 0.0  # clicks broken on purpose (wire format), for the dead-letter path


@dataclass(frozen=True)
class Emission:
    """One record reaching the log at `log_time_ms` (the generator's log order)."""

    log_time_ms: int
    record: Click | ProfileVersion


def clickstream(config: StreamConfig) -> Iterator[Emission]:
    """Clicks and profile versions in the order they reach the log, deterministic for the seed.

    Out of order by design: events arrive after a random delay; a share arrives very late; some profile
    versions arrive after clicks that happened after the version became valid (the as-of join must correct).
    """
    rng = random.Random(config.seed * 104_729)
    pending: list[tuple[int, int, Click | ProfileVersion]] = []  # (log time, tie-breaker, record)
    sequence = 0
    versions: dict[str, int] = {}

    now = 0  # the generator's present: nothing reaches the log before it

    def emit(at: int, record: Click | ProfileVersion) -> None:
        nonlocal sequence
        heapq.heappush(pending, (max(at, now), sequence, record))
        sequence += 1

    def new_profile(user: str, valid_from: int, log_delay: int) -> None:
        versions[user] = versions.get(user, 0) + 1
        profile = ProfileVersion(user, versions[user], rng.choice(SEGMENTS), rng.choice(COUNTRIES), valid_from)
        emit(valid_from + log_delay, profile)

    start_ms = int(START.timestamp() * 1000)
    for click in clicks(config.events, config.users, config.pages, config.seed):
        now = click.event_time_ms
        if click.user_id not in versions:
            if rng.random() < config.no_profile_share:  # the profile comes after this first click
                new_profile(click.user_id, now + rng.randrange(1, 20 * MINUTE_MS), rng.randrange(1_000))
            else:
                new_profile(click.user_id, start_ms - MINUTE_MS, 0)
        delay = rng.randrange(config.disorder_ms + 1)
        if rng.random() < config.late_share:
            delay += config.late_by_ms
        emit(now + delay, click)
        if rng.random() < config.profile_change_share:
            valid_from = now + rng.randrange(1_000, 60_000)
            late = rng.random() < config.late_profile_share
            new_profile(click.user_id, valid_from, rng.randrange(2, 15) * MINUTE_MS if late else rng.randrange(1_000))
        while pending and pending[0][0] <= now:
            at, _, record = heapq.heappop(pending)
            yield Emission(at, record)
    while pending:
        at, _, record = heapq.heappop(pending)
        yield Emission(at, record)


def malformed_value(rng: random.Random, good: bytes) -> bytes:
    """A broken version of a good Confluent-framed value: what a buggy or foreign producer sends."""
    kind = rng.randrange(3)
    if kind == 0:
        return bytes([1]) + good[1:]  # wrong magic byte
    if kind == 1:
        return good[: max(6, len(good) // 2)]  # truncated body
    return bytes(rng.randrange(256) for _ in range(rng.randrange(0, 5)))  # a few random bytes, no header


def click_messages(
    events: Iterable[Click],
    encode: Callable[[dict[str, object]], bytes],
    partitions: int,
    malformed_share: float = 0.0,
    seed: int = 7,
) -> Iterator[Outgoing]:
    """Kafka records of the clicks: keyed by event id, partitioned by user, event time as the record time.

    A `malformed_share` of them is broken on purpose (deterministically for the seed) to exercise dead letters.
    """
    rng = random.Random(seed * 7919)
    for click in events:
        value = encode(click.as_avro())
        if malformed_share and rng.random() < malformed_share:
            value = malformed_value(rng, value)
        yield Outgoing(
            key=click.event_id.encode(),
            value=value,
            partition=partition_for(click.user_id, partitions),
            timestamp_ms=click.event_time_ms,
        )
