"""Independent answers for the stateful jobs: the rules of jobs/*/logic.py restated as set-based SQL (DuckDB), so
an integration test compares a job's output with something that shares no code with the job.

The restatements follow from the rules' documented semantics:

- As-of enrichment: a click's answer is the version with the greatest (valid_from, profile_version) among the
  user's versions with `valid_from <= event_time` and `log_time <= event_time + L`; none: UNKNOWN. (That holds
  for the final value per click whenever no version breaks the lateness contract, which the tests check.)
- Partition stamps: a click's stamp is the latest event time among the clicks before it in its `clicks` partition,
  in offset order (none for the first); the latest value of a click re-delivered is its last copy's.
- Page statistics with a lateness bound: a record is late when its time is more than L behind its stamp, and a
  repeat (counts for nothing) when its stamp is below the largest stamp of its click's earlier records that were
  not late (a running max: counted records' stamps never go down, so that is the stamp of the latest counted one).
  The click's previous counted record (by log order, a window's `lag`) starts a new life of the click when its
  time is more than L + G behind the new record's stamp; the lives are a running count, and each life's last
  record counts (case 2 of jobs/page_stats/logic.py, restated).
- Sessionization, per user in log order: an event is late when its time is more than A behind the greatest
  earlier time (a late event never raises that maximum, so the maximum over every earlier event is the same
  as over the accepted ones). The accepted events form sessions by gap: sorted by time, a gap over G starts a
  new session (an arriving event merges every session it is within G of, so no two final sessions are within
  G of each other, and within a session no gap exceeds G). A session's id is the user and the event that
  created it: its cluster's first event in log order. Entry page and segment are those of its earliest event,
  exit page that of its latest; among events of equal time, the entry is the first in log order and the exit
  the last (the rule's `<` and `>=`: a later event of the same time does not move the entry, and does move the
  exit). A producer that stamps clicks with its clock gives one user two clicks in a millisecond when it sends
  in a burst (the soak's does, when it falls behind). At the log's end a session's last record is `final` when
  it ends more than A + G before its user's greatest time (a late event is below that greatest time, so every
  event counts for it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import duckdb
import pandas as pd

from jobs.clickstream.generator import Emission, ProfileVersion

# (event_id, user_id, page, event_time_ms, segment): one user's events in log order, any users interleaved.
SessionEvent = tuple[str, str, str, int, str]


def enrichment_sql(clicks: str, profiles: str, lateness_ms: int) -> str:
    """Every row of `clicks` (event_id, user_id, event_time, any others) with the rule's answer: profile_version,
    segment (UNKNOWN without a visible version) and country of the visible version with the greatest
    (valid_from, profile_version), from `profiles` (user_id, profile_version, valid_from, log_time, segment,
    country)."""
    return f"""
        WITH visible AS (
            SELECT c.event_id, p.profile_version, p.segment, p.country,
                   row_number() OVER (PARTITION BY c.event_id
                                      ORDER BY p.valid_from DESC, p.profile_version DESC) AS rank
            FROM {clicks} c JOIN {profiles} p ON p.user_id = c.user_id
             AND p.valid_from <= c.event_time
             AND p.log_time <= c.event_time + {int(lateness_ms)}
        )
        SELECT c.*, v.profile_version, coalesce(v.segment, 'UNKNOWN') AS segment, v.country
        FROM {clicks} c LEFT JOIN visible v ON v.event_id = c.event_id AND v.rank = 1
    """


def enrichment(
    clicks: Iterable[tuple[str, str, str, int]],
    profiles: Iterable[tuple[str, int, int, int, str, str]],
    lateness_ms: int,
) -> dict[str, tuple[int | None, str, str | None, str]]:
    """clicks (event_id, user_id, page, event_time_ms), profiles (user_id, profile_version, valid_from_ms,
    log_time_ms, segment, country) -> event_id -> (profile_version, segment, country, page)."""
    con = duckdb.connect()
    con.register("c", pd.DataFrame(list(clicks), columns=["event_id", "user_id", "page", "event_time"]))
    con.register("p", pd.DataFrame(
        list(profiles), columns=["user_id", "profile_version", "valid_from", "log_time", "segment", "country"]
    ))  # fmt: skip
    rows = con.sql(
        f"SELECT event_id, profile_version, segment, country, page FROM ({enrichment_sql('c', 'p', lateness_ms)})"
    ).fetchall()
    return {e: (None if version is None else int(version), segment, country, page)
            for e, version, segment, country, page in rows}  # fmt: skip


def partition_stamps_sql(clicks: str) -> str:
    """The stamps over a table `clicks` (event_id, partition, event_time, seq), seq its log order -> rows
    (event_id, partition, stamp): the latest event time among the partition's clicks before it, or NULL."""
    return f"""
        WITH stamped AS (
            SELECT event_id, partition, seq,
                   max(event_time) OVER (PARTITION BY partition ORDER BY seq
                                         ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS stamp
            FROM {clicks}
        )
        SELECT event_id, partition, stamp FROM stamped
        QUALIFY row_number() OVER (PARTITION BY event_id ORDER BY seq DESC) = 1
    """


def partition_stamps(clicks: Iterable[tuple[str, int, int]]) -> dict[str, tuple[int, int | None]]:
    """clicks (event_id, partition, event_time_ms), each partition's in its offset order -> event_id ->
    (partition, the latest event time among the partition's clicks before it, or None)."""
    con = duckdb.connect()
    frame = pd.DataFrame(list(clicks), columns=["event_id", "partition", "event_time"])
    con.register("c", frame.assign(seq=range(len(frame))))
    rows = con.sql(partition_stamps_sql("c")).fetchall()
    return {e: (int(p), None if stamp is None else int(stamp)) for e, p, stamp in rows}


def _judged_sql(events: str, lateness_ms: int) -> str:
    return f"""
        SELECT *, event_time < max(event_time) OVER (
                      PARTITION BY user_id ORDER BY position ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
                  ) - {int(lateness_ms)} AS late
        FROM {events}
    """


def sessions_sql(events: str, gap_ms: int, lateness_ms: int) -> str:
    """The sessions over a table `events` (event_id, user_id, page, event_time, segment, position), position its
    log order -> rows (session_id, start, end, clicks, distinct_pages, entry_page, exit_page, segment)."""
    return f"""
        WITH accepted AS (SELECT * FROM ({_judged_sql(events, lateness_ms)}) WHERE late IS NOT TRUE),
        starts AS (
            SELECT *, CASE WHEN event_time - lag(event_time) OVER (PARTITION BY user_id ORDER BY event_time)
                               <= {int(gap_ms)} THEN 0 ELSE 1 END AS starts_session
            FROM accepted
        ),
        numbered AS (
            SELECT *, sum(starts_session) OVER (PARTITION BY user_id ORDER BY event_time) AS session_no FROM starts
        )
        SELECT user_id || ':' || arg_min(event_id, position) AS session_id, min(event_time) AS start_time,
               max(event_time) AS end_time, count(*) AS clicks, count(DISTINCT page) AS distinct_pages,
               arg_min(page, (event_time, position)) AS entry_page, arg_max(page, (event_time, position)) AS exit_page,
               arg_min(segment, (event_time, position)) AS segment
        FROM numbered GROUP BY user_id, session_no
    """


def sessions(
    events: Sequence[SessionEvent], gap_ms: int, lateness_ms: int
) -> tuple[dict[str, tuple[int, int, int, int, str, str, str]], set[str]]:
    """-> (session_id -> (start_ms, end_ms, clicks, distinct_pages, entry_page, exit_page, segment), late ids)."""
    frame = pd.DataFrame(list(events), columns=["event_id", "user_id", "page", "event_time", "segment"])
    frame["position"] = range(len(frame))  # log order (a user's events keep their relative order)
    con = duckdb.connect()
    con.register("e", frame)
    late = {row[0] for row in con.sql(f"SELECT event_id FROM ({_judged_sql('e', lateness_ms)}) WHERE late").fetchall()}
    rows = con.sql(sessions_sql("e", gap_ms, lateness_ms)).fetchall()
    found = {sid: (int(start), int(end), int(n), int(pages), entry, exit_, segment)
             for sid, start, end, n, pages, entry, exit_, segment in rows}  # fmt: skip
    return found, late


def final_sessions(
    ends: Iterable[tuple[str, str, int]], events: Iterable[SessionEvent], gap_ms: int, lateness_ms: int
) -> set[str]:
    """sessions (session_id, user_id, end_ms) and every event -> the sessions whose last record is final."""
    con = duckdb.connect()
    con.register("s", pd.DataFrame(list(ends), columns=["session_id", "user_id", "end_time"]))
    con.register("e", pd.DataFrame(list(events), columns=["event_id", "user_id", "page", "event_time", "segment"]))
    rows = con.sql(
        f"""
        SELECT s.session_id FROM s JOIN (SELECT user_id, max(event_time) AS latest FROM e GROUP BY user_id) u
          ON u.user_id = s.user_id
        WHERE s.end_time < u.latest - {int(lateness_ms)} - {int(gap_ms)}
        """
    ).fetchall()
    return {sid for (sid,) in rows}


def page_stats(
    clicks: Iterable[tuple[str, str, str, int]], gap_ms: int
) -> dict[tuple[str, int], tuple[int, int, int | None]]:
    """clicks (user_id, event_id, page, event_time_ms), one per click (its final value) -> (page, hour start ms)
    -> (views, distinct users, median time on page ms). A click's time on page: the gap to the same user's next
    click (by event time, then event id) when at most gap_ms; the median interpolates the two middle values and
    drops the fraction (Spark's percentile, cast to a long)."""
    con = duckdb.connect()
    con.register("c", pd.DataFrame(list(clicks), columns=["user_id", "event_id", "page", "event_time"]))
    rows = con.sql(
        f"""
        WITH timed AS (
            SELECT *, lead(event_time) OVER (PARTITION BY user_id ORDER BY event_time, event_id) - event_time AS dt
            FROM c
        )
        SELECT page, event_time // 3600000 * 3600000 AS hour, count(*), count(DISTINCT user_id),
               trunc(quantile_cont(CASE WHEN dt <= {int(gap_ms)} THEN dt END, 0.5))
        FROM timed GROUP BY page, hour
        """
    ).fetchall()
    return {(page, int(hour)): (int(views), int(users), None if median is None else int(median))
            for page, hour, views, users, median in rows}  # fmt: skip


def _late_record_sql(lateness_ms: int) -> str:
    return f"stamp IS NOT NULL AND event_time < stamp - {int(lateness_ms)}"


def _stamped_before_sql(records: str) -> str:
    return f"""
        SELECT *, max(stamp) OVER (PARTITION BY user_id ORDER BY seq
                                   ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS stamp_before
        FROM {records}
    """


_COPY_SQL = "stamp_before IS NOT NULL AND (stamp IS NULL OR stamp < stamp_before)"


def bounded_page_stats_sql(records: str, gap_ms: int, lateness_ms: int) -> str:
    """page_stats' view over a table `records` (seq, user_id, event_id, page, event_time, stamp), seq its log
    order -> rows (page, hour, views, users, median); the rule is `bounded_page_stats`'."""
    return f"""
        WITH counted AS (
            SELECT * FROM ({_stamped_before_sql(records)})
            WHERE NOT ({_late_record_sql(lateness_ms)}) AND NOT ({_COPY_SQL})
        ),
        chained AS (
            SELECT *, lag(event_time) OVER (PARTITION BY user_id, event_id ORDER BY seq) AS previous_time
            FROM counted
        ),
        lives AS (
            SELECT *, sum(CASE WHEN previous_time IS NULL
                                 OR (stamp IS NOT NULL AND previous_time < stamp - {int(lateness_ms)} - {int(gap_ms)})
                               THEN 1 ELSE 0 END)
                          OVER (PARTITION BY user_id, event_id ORDER BY seq) AS life
            FROM chained
        ),
        final AS (
            SELECT * FROM lives
            QUALIFY row_number() OVER (PARTITION BY user_id, event_id, life ORDER BY seq DESC) = 1
        ),
        timed AS (
            SELECT *, lead(event_time) OVER (PARTITION BY user_id ORDER BY event_time, event_id, life) - event_time
                      AS dt
            FROM final
        )
        SELECT page, event_time // 3600000 * 3600000 AS hour, count(*) AS views, count(DISTINCT user_id) AS users,
               trunc(quantile_cont(CASE WHEN dt <= {int(gap_ms)} THEN dt END, 0.5)) AS median
        FROM timed GROUP BY page, hour
    """


def bounded_page_stats(
    records: Iterable[tuple[str, str, str, int, int | None]], gap_ms: int, lateness_ms: int
) -> tuple[dict[tuple[str, int], tuple[int, int, int | None]], list[int], list[int]]:
    """records (user_id, event_id, page, event_time_ms, stamp_ms) in log order -> (page_stats' view with the
    lateness bound, the positions of the late records, those of the copies). Late: time < stamp - L. A record
    stamped below the largest stamp of the user's earlier records (no stamp: below any) is a copy and counts for
    nothing. Each other record either replaces the click's previous counted record or, when that one's time is
    below stamp - L - gap, starts a new life of the click beside it; a life's last record counts."""
    con = duckdb.connect()
    rows = [(i, *r) for i, r in enumerate(records)]
    con.register("r", pd.DataFrame(rows, columns=["seq", "user_id", "event_id", "page", "event_time", "stamp"]))
    late_sql = _late_record_sql(lateness_ms)
    late = [int(seq) for (seq,) in con.sql(f"SELECT seq FROM r WHERE {late_sql} ORDER BY seq").fetchall()]
    copies = [
        int(seq)
        for (seq,) in con.sql(
            f"SELECT seq FROM ({_stamped_before_sql('r')}) WHERE NOT ({late_sql}) AND {_COPY_SQL} ORDER BY seq"
        ).fetchall()
    ]
    rows_out = con.sql(bounded_page_stats_sql("r", gap_ms, lateness_ms)).fetchall()
    view = {(page, int(hour)): (int(views), int(users), None if median is None else int(median))
            for page, hour, views, users, median in rows_out}  # fmt: skip
    return view, late, copies


def user_activity_sql(sessions: str) -> str:
    """The view over a table `sessions` (session_id, user_id, start_time, end_time, clicks, segment) -> rows
    (user_id, sessions, clicks, first_seen, last_seen, segment)."""
    return f"""
        SELECT user_id, count(*) AS sessions, sum(clicks) AS clicks, min(start_time) AS first_seen,
               max(end_time) AS last_seen, first(segment ORDER BY start_time DESC, session_id DESC) AS segment
        FROM {sessions} GROUP BY user_id
    """


def user_activity(
    live_sessions: Iterable[tuple[str, str, int, int, int, str]],
) -> dict[str, tuple[int, int, int, int, str]]:
    """live sessions (session_id, user_id, start_ms, end_ms, clicks, segment) -> user -> (sessions, clicks,
    first seen ms, last seen ms, segment of the latest session by start, then by session id)."""
    con = duckdb.connect()
    con.register("s", pd.DataFrame(
        list(live_sessions), columns=["session_id", "user_id", "start_time", "end_time", "clicks", "segment"]
    ))  # fmt: skip
    rows = con.sql(user_activity_sql("s")).fetchall()
    return {user: (int(n), int(clicks), int(first), int(last), segment)
            for user, n, clicks, first, last, segment in rows}  # fmt: skip


def late_profiles(
    log: Iterable[tuple[str, int, int | None, int | None]], lateness_ms: int, disorder_ms: int
) -> set[tuple[str, int]]:
    """The profile versions that break the as-of contract, from one log in order: items (user, time, version,
    valid_from) are clicks (version None, time its event time) and profile versions (time its log time).

    The contract: every version visible to a click (valid from at or before it, published at most L after it)
    has arrived once the user's data (click event times, profile log times) reaches L + D past the click. A
    version that arrives after that, for a click it is visible to, is late: -> {(user, version)}."""
    frontier: dict[str, int] = {}
    clicks: dict[str, list[int]] = {}
    late: set[tuple[str, int]] = set()
    for user, at, version, valid_from in log:
        if version is None:
            clicks.setdefault(user, []).append(at)
        else:
            assert valid_from is not None
            settled_until = frontier.get(user, -(2**62)) - lateness_ms - disorder_ms
            if any(valid_from <= t <= settled_until and at <= t + lateness_ms for t in clicks.get(user, [])):
                late.add((user, version))
        frontier[user] = max(frontier.get(user, at), at)
    return late


@dataclass(frozen=True)
class PipelineAnswer:
    """Every output of the pipeline for one log, as the rules above compute it."""

    # event_id -> (user_id, page, referrer, event_time_ms, device, profile_version, segment, country)
    enriched: dict[str, tuple[str, str, str | None, int, str | None, int | None, str, str | None]]
    late_profiles: set[tuple[str, int]]  # (user_id, profile_version) on enriched_clicks' .late
    # session_id -> (user_id, start_ms, end_ms, clicks, distinct_pages, entry_page, exit_page, segment): the
    # sessions topic's latest values and the sessions table's rows
    sessions: dict[str, tuple[str, int, int, int, int, str, str, str]]
    late_clicks: set[str]  # event ids on sessions' .late
    final_sessions: set[str]  # session ids whose latest value on the sessions topic is marked final
    page_stats: dict[tuple[str, int], tuple[int, int, int | None]]
    late_page_clicks: set[str]  # event ids on page_stats' .late (beyond its lateness by their partition stamps)
    user_activity: dict[str, tuple[int, int, int, int, str]]


def pipeline(
    log: Sequence[Emission],
    *,
    lateness_ms: int,
    disorder_ms: int,
    gap_ms: int,
    allowed_lateness_ms: int,
    page_gap_ms: int,
    page_lateness_ms: int,
    stamps: Mapping[str, tuple[int, int | None]],
    segment: Callable[[str], str] = lambda s: s,
) -> PipelineAnswer:
    """The pipeline's outputs for the generator's records in log order (clicks and profile versions), with the
    jobs' settings; `stamps`: each click's partition stamp (`partition_stamps` over the order they were produced
    in); `segment` maps the as-of rule's segment to the one enrich_clicks writes (a logic change)."""
    clicks = [e.record for e in log if not isinstance(e.record, ProfileVersion)]
    profiles = [(r.user_id, r.profile_version, r.valid_from_ms, e.log_time_ms, r.segment, r.country)
                for e in log if isinstance(r := e.record, ProfileVersion)]  # fmt: skip
    as_of = enrichment(((c.event_id, c.user_id, c.page, c.event_time_ms) for c in clicks), profiles, lateness_ms)
    late_versions = late_profiles(
        (
            (r.user_id, e.log_time_ms, r.profile_version, r.valid_from_ms)
            if isinstance(r := e.record, ProfileVersion)
            else (r.user_id, r.event_time_ms, None, None)
            for e in log
        ),
        lateness_ms,
        disorder_ms,
    )
    enriched: dict[str, tuple[str, str, str | None, int, str | None, int | None, str, str | None]] = {}
    for c in clicks:
        version, seg, country, _page = as_of[c.event_id]
        enriched[c.event_id] = (c.user_id, c.page, c.referrer, c.event_time_ms, c.device, version, segment(seg),
                                country)  # fmt: skip
    events = [(c.event_id, c.user_id, c.page, c.event_time_ms, enriched[c.event_id][6]) for c in clicks]
    found, late_clicks = sessions(events, gap_ms, allowed_lateness_ms)
    by_session = {sid: (sid.split(":", 1)[0], *row) for sid, row in found.items()}
    # page_stats over the clicks as enrich_clicks stamps them (a re-emission keeps its click's stamp and fields,
    # so it changes nothing here and the clicks alone give the answer)
    page_view, page_late, _copies = bounded_page_stats(
        ((c.user_id, c.event_id, c.page, c.event_time_ms, stamps[c.event_id][1]) for c in clicks),
        page_gap_ms,
        page_lateness_ms,
    )
    return PipelineAnswer(
        enriched=enriched,
        late_profiles=late_versions,
        sessions=by_session,
        late_clicks=late_clicks,
        final_sessions=final_sessions(
            ((sid, user, end) for sid, (user, _start, end, *_rest) in by_session.items()),
            events,
            gap_ms,
            allowed_lateness_ms,
        ),
        page_stats=page_view,
        late_page_clicks={clicks[i].event_id for i in page_late},
        user_activity=user_activity(
            (sid, user, start, end, n, seg)
            for sid, (user, start, end, n, _pages, _entry, _exit, seg) in by_session.items()
        ),
    )
