"""What a batch's progress event says of the job's place in its inputs: the offsets it read and left behind per
topic, and the end offsets seen over time, which date the oldest record not yet read (the lag in seconds)."""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any


def offsets_of(value: Any) -> dict[str, dict[str, int]]:
    """A source's offsets in a progress (a JSON object, or its text): topic -> partition -> offset."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return {}
    if not isinstance(value, dict):
        return {}
    return {t: {p: int(o) for p, o in parts.items()} for t, parts in value.items() if isinstance(parts, dict)}


@dataclass(frozen=True)
class SourceOffsets:
    """One source of a progress, its offsets parsed once: topic -> partition -> offset."""

    start: dict[str, dict[str, int]]
    end: dict[str, dict[str, int]]
    latest: dict[str, dict[str, int]]  # Kafka's, as Spark saw them when it planned the batch
    rows: int

    @classmethod
    def of(cls, source: dict[str, Any]) -> SourceOffsets:
        return cls(
            offsets_of(source.get("startOffset")),
            offsets_of(source.get("endOffset")),
            offsets_of(source.get("latestOffset")),
            int(source.get("numInputRows", 0)),
        )

    def read_and_behind(self) -> dict[str, tuple[int, int]]:
        """topic -> (offsets the batch read past, offsets it left behind: the latest minus the batch's end). A
        topic whose latest offsets the source did not report has no lag (0)."""
        found = {}
        for topic, ends in self.end.items():
            if topic not in self.start and len(self.end) == 1:  # a query's first batch has no start: its rows
                read = self.rows
            else:
                read = sum(max(0, offset - self.start.get(topic, {}).get(p, offset)) for p, offset in ends.items())
            behind = sum(max(0, offset - ends.get(p, 0)) for p, offset in self.latest.get(topic, {}).items())
            found[topic] = (read, behind)
        return found


END_OFFSETS_KEPT = 256  # per partition: the end offsets seen, to date the records not yet read


class EndOffsetsSeen:
    """One partition's end offsets as the job saw them over time (at its batches and at scrapes): when each record
    not yet read was appended, interpolated, and so the age of the oldest one."""

    def __init__(self) -> None:
        self._seen: list[tuple[float, int]] = []  # (when, end offset), in time order

    def saw(self, when: float, end: int) -> None:
        at = bisect.bisect_right(self._seen, (when, end))
        if at == len(self._seen) >= 2 and self._seen[-1][1] == self._seen[-2][1] == end:
            # Still that end: its first sight dates the records before it, its last sight the next one.
            self._seen[-1] = (when, end)
        else:
            self._seen.insert(at, (when, end))
        del self._seen[:-END_OFFSETS_KEPT]

    def read_up_to(self, offset: int) -> None:
        """The job has read every record before `offset`: only the last end at or before it still dates one."""
        for i in range(len(self._seen) - 1, 0, -1):  # the last end at or before it (ends grow with time)
            if self._seen[i][1] <= offset:
                del self._seen[:i]
                return

    def age_s(self, offset: int, now: float) -> float:
        """Seconds since the record at `offset` (the first the job has not read) was appended; 0 if the job had
        read everything at the last end seen. A record appended before the first end seen is dated there (its
        age is at least that)."""
        earlier: tuple[float, int] | None = None
        for when, end in self._seen:
            if end > offset:
                if earlier is None:
                    return max(0.0, now - when)
                then, was = earlier
                appended = then + (offset + 1 - was) / (end - was) * (when - then)
                return max(0.0, now - appended)
            earlier = (when, end)
        return 0.0


def unix_time(timestamp: Any) -> float | None:
    """A progress event's `timestamp` (ISO 8601, UTC: when its batch was triggered) as Unix time."""
    try:
        return datetime.fromisoformat(str(timestamp)).timestamp()
    except ValueError:
        return None
