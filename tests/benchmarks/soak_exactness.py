"""The soak's last check: after hours of live batches, compactions and vacuums, is every answer still exact?

Once the deployed pipeline has drained, its input topics are read back whole, the answers are computed from them
independently of the jobs (`tests.oracles`, in DuckDB, as the Kappa-promise test computes them), and each output
is compared with them, key for key: enriched_clicks (the latest record per event id, with its user's profile),
the sessions table, page_stats and user_activity (the Delta tables' current versions, read by delta-rs, another
engine than the writers').
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

import pandas as pd
from deltalake import DeltaTable as DeltaRsTable

from jobs.catalog import CLICKS, ENRICHED_CLICKS, USER_PROFILES
from jobs.page_stats.declaration import JOB as PAGE_STATS
from jobs.page_stats.declaration import Settings as PageStatsSettings
from jobs.sessionize.declaration import JOB as SESSIONIZE
from jobs.sessionize.declaration import Settings as SessionizeSettings
from kappa.contracts.avro_serde import AvroDecoder
from kappa.contracts.registry import Registry
from kappa.contracts.schema_files import topic_value_schema
from kappa.contracts.topic_declarations import MINUTE_MS, Topic
from kappa.core.settings import KappaSettings
from kappa.kafka.partitioning import partition_for
from kappa.kafka.reading import whole_topic
from kappa.runtime.binding import deployed_job, physical_output
from tests import oracles


def _records(settings: KappaSettings, topic: str) -> Iterator[tuple[bytes | None, bytes | None]]:
    """(key, value) of every record of a physical topic up to its end as it is now, each partition in offset
    order (so each user's records in their log order)."""
    for m in whole_topic(settings, topic):
        yield m.key(), m.value()


def _decoded(settings: KappaSettings, registry: Registry, logical: Topic, physical: str) -> Iterator[dict[str, Any]]:
    decoder = AvroDecoder(registry, topic_value_schema(settings.schemas_path, logical))
    for _key, value in _records(settings, physical):
        if value is not None:  # a tombstone: nothing to decode
            yield decoder.decode(value)


def _ms(t: datetime | pd.Timestamp | None) -> int | None:
    """Epoch milliseconds, in integers (a float's seconds times 1,000 can land a millisecond short)."""
    if t is None or pd.isna(t):
        return None
    return int(pd.Timestamp(t).as_unit("ns").value // 1_000_000)


def _table(settings: KappaSettings, job: str) -> pd.DataFrame:
    spec = deployed_job(settings, job)
    return DeltaRsTable(physical_output(spec, settings, spec.version)[1]).to_pandas()


def _wrong(actual: Mapping[Any, Any], expected: Mapping[Any, Any]) -> list[Any]:
    return [k for k, v in expected.items() if actual.get(k, KeyError) != v]


def _differences(what: str, actual: Mapping[Any, Any], expected: Mapping[Any, Any]) -> dict[str, Any]:
    wrong = _wrong(actual, expected)
    extra = [k for k in actual if k not in expected]
    return {
        "output": what,
        "expected": len(expected),
        "found": len(actual),
        "missing_or_different": len(wrong),
        "unexpected": len(extra),
        "exact": "yes" if not wrong and not extra else "NO",
        "e.g.": "" if not wrong else f"{wrong[0]}: expected {expected[wrong[0]]}, found {actual.get(wrong[0])}",
    }


def check(settings: KappaSettings, say: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """One row per output: how many keys the independent answer has, how many the output has, and how many
    differ. Reads the live versions the deployments run."""
    sessionize = SESSIONIZE.settings_as(SessionizeSettings)
    with Registry(settings.registry) as registry:
        say("exactness: reading the inputs back ...")
        read = [(c["event_id"], c["user_id"], c["page"], _ms(c["event_time"]))
                for c in _decoded(settings, registry, CLICKS, CLICKS.name)]  # fmt: skip
        # One per event id (the producer is idempotent, so a repeat would be a bug of its own: said, not hidden).
        clicks = list({c[0]: c for c in read}.values())
        if len(clicks) != len(read):
            say(f"exactness: the clicks topic holds {len(read) - len(clicks):,} repeated event ids")
        profiles: dict[str, tuple[int, str, str]] = {}
        for p in _decoded(settings, registry, USER_PROFILES, USER_PROFILES.name):
            if p["profile_version"] >= profiles.get(p["user_id"], (-1, "", ""))[0]:
                profiles[p["user_id"]] = (p["profile_version"], p["segment"], p["country"])
        say(f"exactness: {len(clicks):,} clicks of {len(profiles):,} users; reading the outputs ...")
        enrich = deployed_job(settings, "enrich_clicks")
        enriched = {e["event_id"]: (e["user_id"], e["page"], _ms(e["event_time"]), e["profile_version"], e["segment"])
                    for e in _decoded(settings, registry, ENRICHED_CLICKS,
                                      physical_output(enrich, settings, enrich.version)[1])}  # fmt: skip
    # Every profile is valid before the soak's first click (bench_live.produce_profiles): each click gets its
    # user's one version. The as-of rule's own answer for other logs is the promise test's.
    expected_enriched = {e: (u, page, t, profiles[u][0], profiles[u][1]) for e, u, page, t in clicks}
    events = [(e, u, page, t, profiles[u][1]) for e, u, page, t in clicks]  # in each user's log order
    found, _late = oracles.sessions(events, sessionize.gap_minutes * MINUTE_MS,
                                    sessionize.allowed_lateness_minutes * MINUTE_MS)  # fmt: skip
    sessions = {sid: (sid.split(":", 1)[0], *row) for sid, row in found.items()}
    page = PAGE_STATS.settings_as(PageStatsSettings)
    # each click's partition stamp, over its partition's offset order (read in it: a partition after another)
    stamps = oracles.partition_stamps((e, partition_for(u, CLICKS.partitions), t) for e, u, _page, t in clicks)
    expected_pages, _late, _copies = oracles.bounded_page_stats(
        ((u, e, pg, t, stamps[e][1]) for e, u, pg, t in clicks),
        page.gap_minutes * MINUTE_MS,
        page.lateness_minutes * MINUTE_MS,
    )
    expected_activity = oracles.user_activity(
        (sid, user, start, end, n, seg) for sid, (user, start, end, n, _pages, _entry, _exit, seg) in sessions.items()
    )

    pages = _table(settings, "page_stats")
    medians = pages["median_time_on_page_ms"].astype(object).where(pages["median_time_on_page_ms"].notna(), None)
    found_pages = {(r.page, _ms(r.hour_start)): (r.views, r.distinct_users, None if m is None else int(m))
                   for r, m in zip(pages.itertuples(), medians, strict=True)}  # fmt: skip
    found_sessions = {r.session_id: (r.user_id, _ms(r.start_time), _ms(r.end_time), r.clicks, r.distinct_pages,
                                     r.entry_page, r.exit_page, r.segment)
                      for r in _table(settings, "sessions_table").itertuples()}  # fmt: skip
    found_activity = {r.user_id: (r.sessions, r.clicks, _ms(r.first_seen), _ms(r.last_seen), r.segment)
                      for r in _table(settings, "user_activity").itertuples()}  # fmt: skip
    compared: dict[str, tuple[Mapping[Any, Any], Mapping[Any, Any]]] = {
        "enriched_clicks": (enriched, expected_enriched),
        "sessions table": (found_sessions, sessions),
        "page_stats": (found_pages, expected_pages),
        "user_activity": (found_activity, expected_activity),
    }
    _keep_evidence(settings, compared, events, say)
    return [
        _differences("enriched_clicks", enriched, expected_enriched),
        _differences("sessions table", found_sessions, sessions),
        _differences("page_stats", found_pages, expected_pages),
        _differences("user_activity", found_activity, expected_activity),
    ]


EVIDENCE_FILE = "soak-differences.json"  # beside the bench's tables and checkpoints: the stack goes, this stays


def evidence(
    compared: Mapping[str, tuple[Mapping[Any, Any], Mapping[Any, Any]]], events: Sequence[tuple[Any, ...]]
) -> dict[str, Any]:
    """What to read once the stack is gone: each output's differing keys (expected, found; a key only found
    too), and the events, in log order with their positions, of every user a differing key names (a session
    id, a user id, or an event id's user)."""
    user_of_event = {e[0]: e[1] for e in events}
    users = set(user_of_event.values())
    out: dict[str, Any] = {"outputs": {}, "events_of": {}}
    named: set[str] = set()
    for what, (actual, expected) in compared.items():
        keys = _wrong(actual, expected) + [k for k in actual if k not in expected]
        out["outputs"][what] = [{"key": repr(k), "expected": expected.get(k), "found": actual.get(k)} for k in keys]
        for key in keys:
            if isinstance(key, str):
                head = key.split(":", 1)[0]
                named.add(head if head in users else user_of_event.get(key, ""))
    for position, (event_id, user, page, time_ms, segment) in enumerate(events):
        if user in named:
            out["events_of"].setdefault(user, []).append(
                {"position": position, "event_id": event_id, "page": page, "time_ms": time_ms, "segment": segment}
            )
    return out


def _keep_evidence(
    settings: KappaSettings,
    compared: Mapping[str, tuple[Mapping[Any, Any], Mapping[Any, Any]]],
    events: Sequence[tuple[Any, ...]],
    say: Callable[[str], None],
) -> None:
    path = settings.state_dir / "bench" / EVIDENCE_FILE
    path.unlink(missing_ok=True)  # an earlier run's differences are not this run's
    kept = evidence(compared, events)
    if not any(kept["outputs"].values()):
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(kept, indent=1, default=str))
    say(f"exactness: the differences and the events of the users they name are kept in {path}")
