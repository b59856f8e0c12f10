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
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from kappa.contracts.topic_declarations import HOUR_MS


@dataclass(frozen=True)
class Click:
    user_id: str
    event_id: str
    page: str | None
    event_time_ms: int


@dataclass(frozen=True)
class PageHour:
    """One row of the view."""

    views: int
    distinct_users: int
    median_time_on_page_ms: int | None


def times_on_page(log: Iterable[Click], gap_ms: int) -> dict[tuple[str, str], tuple[Click, int | None]]:
    """(user, event id) -> the latest record of the click and its time on page."""
    latest: dict[tuple[str, str], Click] = {}
    for click in log:  # in log order: a later record of a click replaces it
        latest[(click.user_id, click.event_id)] = click
    by_user: dict[str, list[Click]] = defaultdict(list)
    for click in latest.values():
        by_user[click.user_id].append(click)
    result: dict[tuple[str, str], tuple[Click, int | None]] = {}
    for clicks in by_user.values():
        clicks.sort(key=lambda c: (c.event_time_ms, c.event_id.encode()))  # Spark orders strings by UTF-8 bytes
        for click, following in zip(clicks, [*clicks[1:], None], strict=True):
            gap = None if following is None else following.event_time_ms - click.event_time_ms
            result[(click.user_id, click.event_id)] = (click, gap if gap is not None and gap <= gap_ms else None)
    return result


def page_stats(log: Iterable[Click], gap_ms: int) -> dict[tuple[str | None, int], PageHour]:
    """The view over the whole log: (page, hour start in epoch ms) -> its row."""
    views: dict[tuple[str | None, int], int] = defaultdict(int)
    users: dict[tuple[str | None, int], set[str]] = defaultdict(set)
    gaps: dict[tuple[str | None, int], list[int]] = defaultdict(list)
    for click, gap in times_on_page(log, gap_ms).values():
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
