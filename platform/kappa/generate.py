"""A seeded clickstream generator: users, Zipf-popular pages, sessions with think times and gaps.

Deterministic for a seed: the same seed gives the same events in the same order, so tests and benchmarks can
compare runs. Event times are UTC milliseconds.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from kappa.kafka_client import Outgoing
from kappa.partitioning import partition_for

START = datetime(2026, 1, 1, tzinfo=UTC)
_MINUTE_MS = 60_000


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

    def as_json_dict(self) -> dict[str, object]:
        return {
            "event_id": self.event_id,
            "user_id": self.user_id,
            "page": self.page,
            "referrer": self.referrer,
            "event_time_ms": self.event_time_ms,
        }

    def as_avro(self) -> dict[str, object]:
        """The record as schemas/click_event.avsc has it (fastavro takes datetimes for timestamp-millis)."""
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
    """`count` clicks from `users` users browsing in sessions (think time ~30 s, gaps of 40-240 minutes)."""
    rng = random.Random(seed)
    page_names = [f"/page/{i:04d}" for i in range(pages)]
    weights = zipf_weights(pages)
    start_ms = int(START.timestamp() * 1000)
    # Each user has a clock; the next user to act is drawn at random, so users interleave in the log.
    clock = {f"user-{u:05d}": start_ms + rng.randrange(60 * _MINUTE_MS) for u in range(users)}
    last_page: dict[str, str | None] = dict.fromkeys(clock)
    user_ids = list(clock)
    device = {u: rng.choices(DEVICES, _DEVICE_WEIGHTS)[0] for u in user_ids}
    for n in range(count):
        user = rng.choice(user_ids)
        if rng.random() < 0.08:  # end of a session: an inactivity gap longer than 30 minutes
            clock[user] += rng.randrange(40, 240) * _MINUTE_MS
            last_page[user] = None
        else:
            clock[user] += int(rng.expovariate(1 / 30_000)) + 1_000
        page = rng.choices(page_names, weights)[0]
        yield Click(
            event_id=f"evt-{seed}-{n:09d}",
            user_id=user,
            page=page,
            referrer=last_page[user],
            event_time_ms=clock[user],
            device=device[user],
        )
        last_page[user] = page


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
