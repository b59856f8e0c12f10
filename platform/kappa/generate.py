"""A seeded clickstream generator: users, Zipf-popular pages, sessions with think times and gaps.

Deterministic for a seed: the same seed gives the same events in the same order, so tests and benchmarks can
compare runs. Event times are UTC milliseconds.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

START = datetime(2026, 1, 1, tzinfo=UTC)
_MINUTE_MS = 60_000


@dataclass(frozen=True)
class Click:
    event_id: str
    user_id: str
    page: str
    referrer: str | None
    event_time_ms: int

    def as_json_dict(self) -> dict[str, object]:
        return {
            "event_id": self.event_id,
            "user_id": self.user_id,
            "page": self.page,
            "referrer": self.referrer,
            "event_time_ms": self.event_time_ms,
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
        )
        last_page[user] = page
