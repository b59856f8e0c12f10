"""The page statistics rule, as a pure function of the enriched clicks in log order: the specification.

A click is identified by its user and event id: a later record of the same click (enrich_clicks re-emits a click
when a late profile version corrects it; a source may correct a click's page or time) replaces the earlier one,
and only the latest in log order counts. Time on page of a click: the event time of the same user's next click
(by event time, ties by event id) minus its own, when that is at most the gap; otherwise none (the user left, or
it was their last click). Per page and event-time hour (UTC):

- views: the clicks on the page in the hour;
- distinct_users: the users among them;
- median_time_on_page_ms: Spark's `percentile(time_on_page, 0.5)` over the clicks that have a time on page (the
  middle value, or the two middle values interpolated in double), truncated to a whole millisecond; none when
  no click of the group has one.

Nothing here depends on batch boundaries or on when a click arrived, only on the final log: a late click that
falls between two earlier ones changes its predecessor's time on page, and so its predecessor's group. The
operator kappa.operators.page_stats keeps the same answer incrementally; the differential test holds the two
equal after every batch.

With a lateness `L` (`lateness_ms`; None: the rule above, which keeps every click for ever), the rule is bounded
by each record's stamp `s` (enrich_clicks' `partition_time_before`: the latest event time before the click in its
`clicks` partition, in offset order; docs/bounded_view_state.md). A record without a stamp is never late and never
settles anything. A record `r`:

1. is **late** when `r.time < s(r) - L`: set aside (`late_records`), it changes nothing;
2. else is a **copy** (`copies`) when its stamp is below the largest stamp of the user's records before it (none:
   below every stamp), and changes nothing. A first emission's stamp is never below an earlier one's: all of a
   user's clicks come from one `clicks` partition, in offset order. So a record stamped lower was sent before: a
   re-emission of a click's last record (which would change nothing anyway), or a batch of enrich_clicks run again
   after a crash, whose records come again after newer ones (which would move a corrected click back);
3. else, if the click's latest counted record `e` has `e.time < s(r) - L - gap` (more than L + gap behind `r`'s
   stamp): `r` counts as a **new click**, and `e` stays counted where it was. A source that moves a click from
   that far back publishes the move as a new click; the rule says what happens if it does not;
4. else replaces `e`, as above.

Each case reads only the records' fields, so the answer is the same in every run, and an operator may forget a
click once its time is below its partition's largest stamp - L - 2 gap without changing it (a record that counts
can move the successor of a click up to 2 gaps before it away: docs/bounded_view_state.md, "The rule").
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import Enum

from kappa.contracts.topic_declarations import HOUR_MS


@dataclass(frozen=True)
class Click:
    user_id: str
    event_id: str
    page: str | None
    event_time_ms: int
    stamp_ms: int | None = None  # partition_time_before (enrich_clicks v2); None: never late


# (user, event id, life): a click, and which of its lives (a record in case 2 starts the next one)
ClickKey = tuple[str, str, int]


def is_late(record: Click, lateness_ms: int | None) -> bool:
    """Case 1: the record is beyond the lateness its stamp allows."""
    return (
        lateness_ms is not None and record.stamp_ms is not None and record.event_time_ms < record.stamp_ms - lateness_ms
    )


def is_copy(record: Click, largest_stamp_before: int | None, lateness_ms: int | None) -> bool:
    """Case 2: stamped below the largest stamp of the user's earlier records (no stamp: below every stamp)."""
    if lateness_ms is None or largest_stamp_before is None:
        return False
    return record.stamp_ms is None or record.stamp_ms < largest_stamp_before


def settled_before(earlier: Click, record: Click, gap_ms: int, lateness_ms: int | None) -> bool:
    """Case 3: the click's earlier record is older than what `record`'s partition has settled when it comes."""
    if lateness_ms is None or record.stamp_ms is None:
        return False
    return earlier.event_time_ms < record.stamp_ms - lateness_ms - gap_ms


class Case(Enum):
    LATE = 1
    COPY = 2
    COUNTS = 3  # case 3 or 4, decided against the click's latest counted record


def judged(log: Iterable[Click], lateness_ms: int | None) -> Iterator[tuple[Click, Case]]:
    """Each record in log order, with the case its stamp alone decides."""
    largest_stamp: dict[str, int] = {}  # user -> the largest stamp of their records so far
    for record in log:
        stamp_before = largest_stamp.get(record.user_id)
        if record.stamp_ms is not None and (stamp_before is None or record.stamp_ms > stamp_before):
            largest_stamp[record.user_id] = record.stamp_ms
        if is_late(record, lateness_ms):
            yield record, Case.LATE
        elif is_copy(record, stamp_before, lateness_ms):
            yield record, Case.COPY
        else:
            yield record, Case.COUNTS


def copies(log: Iterable[Click], lateness_ms: int | None) -> list[int]:
    """Case 2's records, by their positions in the log: what the job sets aside to `.late` as settled."""
    return [i for i, (_record, case) in enumerate(judged(log, lateness_ms)) if case is Case.COPY]


def counted_records(
    log: Iterable[Click], gap_ms: int, lateness_ms: int | None = None
) -> tuple[dict[ClickKey, Click], list[Click]]:
    """The latest record of each click's each life, and the late records (in log order)."""
    latest: dict[ClickKey, Click] = {}
    lives: dict[tuple[str, str], int] = {}
    late: list[Click] = []
    for record, case in judged(log, lateness_ms):  # in log order: a later record of a click replaces it
        if case is Case.LATE:
            late.append(record)
            continue
        if case is Case.COPY:
            continue  # changes nothing
        click = (record.user_id, record.event_id)
        life = lives.get(click)
        if life is None:
            life = 0
        elif settled_before(latest[(*click, life)], record, gap_ms, lateness_ms):
            life += 1
        lives[click] = life
        latest[(*click, life)] = record
    return latest, late


def late_records(log: Iterable[Click], lateness_ms: int | None) -> list[Click]:
    """Case 1's records, in log order: what the job sets aside to its `.late` topic."""
    return [record for record in log if is_late(record, lateness_ms)]


@dataclass(frozen=True)
class PageHour:
    """One row of the view."""

    views: int
    distinct_users: int
    median_time_on_page_ms: int | None


def times_on_page(
    log: Iterable[Click], gap_ms: int, lateness_ms: int | None = None
) -> dict[ClickKey, tuple[Click, int | None]]:
    """(user, event id, life) -> the latest record of the click and its time on page."""
    by_user: dict[str, list[tuple[ClickKey, Click]]] = defaultdict(list)
    for key, record in counted_records(log, gap_ms, lateness_ms)[0].items():
        by_user[record.user_id].append((key, record))
    result: dict[ClickKey, tuple[Click, int | None]] = {}
    for clicks in by_user.values():
        # Spark orders strings by UTF-8 bytes; two lives of a click never share a time (a new life is more than a gap
        # after the one before), so the life only makes the order total
        clicks.sort(key=lambda kc: (kc[1].event_time_ms, kc[1].event_id.encode(), kc[0][2]))
        for (key, click), following in zip(clicks, [*clicks[1:], None], strict=True):
            gap = None if following is None else following[1].event_time_ms - click.event_time_ms
            result[key] = (click, gap if gap is not None and gap <= gap_ms else None)
    return result


def page_stats(
    log: Iterable[Click], gap_ms: int, lateness_ms: int | None = None
) -> dict[tuple[str | None, int], PageHour]:
    """The view over the whole log: (page, hour start in epoch ms) -> its row."""
    views: dict[tuple[str | None, int], int] = defaultdict(int)
    users: dict[tuple[str | None, int], set[str]] = defaultdict(set)
    gaps: dict[tuple[str | None, int], list[int]] = defaultdict(list)
    for click, gap in times_on_page(log, gap_ms, lateness_ms).values():
        group = (click.page, click.event_time_ms // HOUR_MS * HOUR_MS)
        views[group] += 1
        users[group].add(click.user_id)
        if gap is not None:
            gaps[group].append(gap)
    return {g: PageHour(views[g], len(users[g]), spark_median(gaps.get(g, []))) for g in views}


def spark_median(values: list[int]) -> int | None:
    """Spark's `percentile(x, 0.5)` cast to a long: interpolated between the two middle values, in double."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * 0.5
    lower, higher = math.floor(position), math.ceil(position)
    if higher == lower or ordered[lower] == ordered[higher]:
        return int(float(ordered[lower]))
    return int((higher - position) * ordered[lower] + (position - lower) * ordered[higher])
