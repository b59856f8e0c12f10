"""The soak's last check: after hours of live batches, compactions and vacuums, is every answer still exact?

Once the deployed pipeline has drained, its input topics are read back whole into DuckDB tables, the answers are
computed from them independently of the jobs (`tests.oracles`' SQL, as the Kappa-promise test computes them), and
each output is compared with them, key for key, in SQL: enriched_clicks (the latest record per event id, with
its user's profile), the sessions table, page_stats and user_activity (the Delta tables' current versions, read by
delta-rs, another engine than the writers'). Nothing holds the log in Python objects: an hour's soak reads over
twelve million clicks, and a check that built dicts of them ran out of memory at 17.5 GB.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import duckdb
import pyarrow as pa
from deltalake import DeltaTable as DeltaRsTable

from jobs.catalog import CLICKS, ENRICHED_CLICKS, USER_PROFILES
from jobs.enrich_clicks.declaration import JOB as ENRICH_CLICKS
from jobs.enrich_clicks.declaration import Settings as EnrichSettings
from jobs.page_stats.declaration import JOB as PAGE_STATS
from jobs.page_stats.declaration import Settings as PageStatsSettings
from jobs.sessionize.declaration import JOB as SESSIONIZE
from jobs.sessionize.declaration import Settings as SessionizeSettings
from kappa.contracts.avro_serde import AvroDecoder
from kappa.contracts.registry import Registry, registry_of
from kappa.contracts.schema_files import topic_value_schema
from kappa.contracts.topic_declarations import MINUTE_MS, Topic
from kappa.core.settings import KappaSettings
from kappa.kafka.reading import whole_topic
from kappa.runtime.binding import deployed_job, physical_output
from tests import oracles

_CHUNK = 200_000  # decoded records per insert: a chunk's Python objects, never the log's
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SAMPLE = 50  # differing keys kept per output, with their rows, for the evidence file


def _ms(t: datetime) -> int:
    """Epoch milliseconds, in integers (a float's seconds times 1,000 can land a millisecond short)."""
    return (t - _EPOCH) // timedelta(milliseconds=1)


def _load(
    con: duckdb.DuckDBPyConnection,
    table: str,
    columns: Mapping[str, pa.DataType],
    rows: Iterator[tuple[Any, ...]],
) -> int:
    """Insert `rows` (in `columns`' order) into a new table `table`, a chunk at a time. -> the rows loaded."""
    schema = pa.schema(list(columns.items()))
    con.register("empty", pa.Table.from_pylist([], schema=schema))
    con.execute(f"CREATE TABLE {table} AS SELECT * FROM empty")
    con.unregister("empty")
    loaded, chunk = 0, []
    for row in rows:
        chunk.append(row)
        if len(chunk) == _CHUNK:
            loaded += _insert(con, table, schema, chunk)
            chunk = []
    return loaded + _insert(con, table, schema, chunk)


def _insert(con: duckdb.DuckDBPyConnection, table: str, schema: pa.Schema, chunk: list[tuple[Any, ...]]) -> int:
    if not chunk:
        return 0
    arrays = [
        pa.array(list(column), type=field.type) for column, field in zip(zip(*chunk, strict=True), schema, strict=True)
    ]
    con.register("chunk", pa.Table.from_arrays(arrays, schema=schema))
    con.execute(f"INSERT INTO {table} SELECT * FROM chunk")
    con.unregister("chunk")
    return len(chunk)


def _log(
    settings: KappaSettings,
    registry: Registry,
    logical: Topic,
    physical: str,
    pick: Callable[[dict[str, Any]], tuple[Any, ...]],
) -> Iterator[tuple[Any, ...]]:
    """(seq, partition, log time, *pick(value)) of every record `physical` holds now, each partition in offset
    order and seq counting the records as read (so each user's records are in their log order); the log time is
    the record's Kafka timestamp (ms). Tombstones: nothing."""
    decoder = AvroDecoder(registry, topic_value_schema(settings.schemas_path, logical))
    for seq, m in enumerate(whole_topic(settings, physical)):
        value = m.value()
        if value is not None:
            yield (seq, int(m.partition() or 0), m.timestamp()[1], *pick(decoder.decode(value)))


def _delta(con: duckdb.DuckDBPyConnection, settings: KappaSettings, job: str, name: str) -> None:
    """The table a deployed job writes, at its current version, read by delta-rs, as DuckDB table `name`."""
    spec = deployed_job(settings, job)
    con.register(f"{name}_arrow", DeltaRsTable(physical_output(spec, settings, spec.version)[1]).to_pyarrow_table())
    con.execute(f"CREATE TABLE {name} AS SELECT * FROM {name}_arrow")
    con.unregister(f"{name}_arrow")


def _scalar(con: duckdb.DuckDBPyConnection, sql: str) -> int:
    (n,) = con.sql(sql).fetchone() or (0,)
    return int(n)


def _count(con: duckdb.DuckDBPyConnection, table: str) -> int:
    return _scalar(con, f"SELECT count(*) FROM {table}")


def compare(
    con: duckdb.DuckDBPyConnection, what: str, keys: Sequence[str], expected: str, found: str
) -> dict[str, Any]:
    """The rows of `expected` and `found` (the same columns, `keys` first) compared: missing or different rows,
    keys only found, and keys found twice (a doubled output). -> the report's row, with a sample of the
    differences under "compared" (key -> value columns) for the evidence file."""
    k = ", ".join(keys)

    def count(sql: str) -> int:
        return _scalar(con, sql)

    wrong_sql = f"SELECT * FROM {expected} EXCEPT SELECT * FROM {found}"
    extra_sql = f"SELECT {k} FROM {found} EXCEPT SELECT {k} FROM {expected}"
    wrong, extra = count(f"SELECT count(*) FROM ({wrong_sql})"), count(f"SELECT count(*) FROM ({extra_sql})")
    doubled = count(f"SELECT count(*) FROM (SELECT {k} FROM {found} GROUP BY {k} HAVING count(*) > 1)")

    def rows(table: str, of: str) -> dict[Any, tuple[Any, ...]]:
        sample = con.sql(f"SELECT t.* FROM {table} t SEMI JOIN ({of}) USING ({k})")
        return {(r[0] if len(keys) == 1 else r[: len(keys)]): r[len(keys) :] for r in sample.fetchall()}

    # Chosen once: a LIMIT without an order picks anew in each query, so the two sides could name other keys.
    con.execute(f"CREATE OR REPLACE TEMP TABLE sampled AS SELECT * FROM (SELECT {k} FROM ({wrong_sql}) "
                f"UNION ALL SELECT {k} FROM ({extra_sql})) LIMIT {_SAMPLE}")  # fmt: skip
    expected_rows, found_rows = rows(expected, "SELECT * FROM sampled"), rows(found, "SELECT * FROM sampled")
    first = next(iter(expected_rows), None)
    return {
        "output": what,
        "expected": _count(con, expected),
        "found": _count(con, found),
        "missing_or_different": wrong,
        "unexpected": extra,
        "doubled": doubled,
        "exact": "yes" if not wrong and not extra and not doubled else "NO",
        "e.g.": "" if first is None else f"{first}: expected {expected_rows[first]}, found {found_rows.get(first)}",
        "compared": (found_rows, expected_rows),
    }


def check(settings: KappaSettings, say: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """One row per output: how many rows the independent answer has, how many the output has, and how many
    differ. Reads the live versions the deployments run."""
    (settings.state_dir / "bench").mkdir(parents=True, exist_ok=True)
    # The spill folder outlives every query (the window functions over the whole log are what spills).
    with (
        tempfile.TemporaryDirectory(prefix="soak-exactness-", dir=settings.state_dir / "bench") as spill,
        duckdb.connect(config={"memory_limit": "6GB", "temp_directory": spill}) as con,
    ):
        return _check(con, settings, say)


def _check(con: duckdb.DuckDBPyConnection, settings: KappaSettings, say: Callable[[str], None]) -> list[dict[str, Any]]:
    sessionize = SESSIONIZE.settings_as(SessionizeSettings)
    page = PAGE_STATS.settings_as(PageStatsSettings)
    with registry_of(settings) as registry:
        say("exactness: reading the inputs back ...")
        text, long = pa.string(), pa.int64()
        log = {
            "seq": long,
            "partition": pa.int32(),
            "log_time": long,
            "event_id": text,
            "user_id": text,
            "page": text,
            "event_time": long,
        }
        read = _load(con, "clicks_log", log, _log(settings, registry, CLICKS, CLICKS.name,
                     lambda c: (c["event_id"], c["user_id"], c["page"], _ms(c["event_time"]))))  # fmt: skip
        # One per event id (the producer is idempotent, so a repeat would be a bug of its own: said, not hidden).
        con.execute("CREATE TABLE clicks AS SELECT * FROM clicks_log QUALIFY row_number() OVER "
                    "(PARTITION BY event_id ORDER BY seq) = 1")  # fmt: skip
        clicks = _count(con, "clicks")
        if clicks != read:
            say(f"exactness: the clicks topic holds {read - clicks:,} repeated event ids")
        profile = {"seq": long, "partition": pa.int32(), "log_time": long, "user_id": text, "profile_version": long,
                   "valid_from": long, "segment": text, "country": text}  # fmt: skip
        _load(con, "profiles", profile, _log(settings, registry, USER_PROFILES, USER_PROFILES.name,
              lambda p: (p["user_id"], p["profile_version"], _ms(p["valid_from"]), p["segment"],
                         p["country"])))  # fmt: skip
        users = _scalar(con, "SELECT count(DISTINCT user_id) FROM profiles")
        say(f"exactness: {clicks:,} clicks of {users:,} users; reading the outputs ...")
        enrich = deployed_job(settings, "enrich_clicks")
        enriched = {**log, "profile_version": long, "segment": text}
        _load(con, "enriched_log", enriched, _log(settings, registry, ENRICHED_CLICKS,
              physical_output(enrich, settings, enrich.version)[1],
              lambda e: (e["event_id"], e["user_id"], e["page"], _ms(e["event_time"]), e["profile_version"],
                         e["segment"])))  # fmt: skip
    for job, table in (("page_stats", "found_pages"), ("sessions_table", "found_sessions_delta"),
                       ("user_activity", "found_activity_delta")):  # fmt: skip
        _delta(con, settings, job, table)
    say("exactness: computing the answers ...")
    # The as-of rule over the whole profiles log, each version visible from its valid_from if published (its
    # Kafka timestamp) no more than L after the click: a version published late is the rule's business too.
    lateness = ENRICH_CLICKS.settings_as(EnrichSettings).profile_lateness_minutes * MINUTE_MS
    con.execute(f"""
        CREATE TABLE answers AS {oracles.enrichment_sql("clicks", "profiles", lateness)};
        CREATE TABLE expected_enriched AS
        SELECT event_id, user_id, page, event_time, profile_version, segment FROM answers;
        CREATE TABLE found_enriched AS
        SELECT event_id, user_id, page, event_time, profile_version, segment FROM enriched_log
        QUALIFY row_number() OVER (PARTITION BY event_id ORDER BY seq DESC) = 1;
        CREATE TABLE events AS
        SELECT event_id, user_id, page, event_time, segment, seq AS position FROM answers;
    """)  # fmt: skip
    gap, lateness = sessionize.gap_minutes * MINUTE_MS, sessionize.allowed_lateness_minutes * MINUTE_MS
    con.execute(f"""
        CREATE TABLE expected_sessions AS
        SELECT session_id, split_part(session_id, ':', 1) AS user_id, start_time, end_time, clicks, distinct_pages,
               entry_page, exit_page, segment
        FROM ({oracles.sessions_sql("events", gap, lateness)});
        CREATE TABLE stamps AS {oracles.partition_stamps_sql("clicks")};
        CREATE TABLE page_records AS
        SELECT c.seq, c.user_id, c.event_id, c.page, c.event_time, s.stamp
        FROM clicks c JOIN stamps s USING (event_id);
        CREATE TABLE expected_pages AS
        SELECT page, hour, views, users, CAST(median AS BIGINT) AS median
        FROM ({oracles.bounded_page_stats_sql("page_records", page.gap_minutes * MINUTE_MS,
                                              page.lateness_minutes * MINUTE_MS)});
        CREATE TABLE expected_activity AS {oracles.user_activity_sql("expected_sessions")};
        CREATE TABLE found_sessions AS
        SELECT session_id, user_id, epoch_ms(start_time) AS start_time, epoch_ms(end_time) AS end_time,
               CAST(clicks AS BIGINT) AS clicks, CAST(distinct_pages AS BIGINT) AS distinct_pages, entry_page,
               exit_page, segment
        FROM found_sessions_delta;
        CREATE TABLE found_page_stats AS
        SELECT page, epoch_ms(hour_start) AS hour, CAST(views AS BIGINT) AS views,
               CAST(distinct_users AS BIGINT) AS users, CAST(median_time_on_page_ms AS BIGINT) AS median
        FROM found_pages;
        CREATE TABLE found_activity AS
        SELECT user_id, CAST(sessions AS BIGINT) AS sessions, CAST(clicks AS BIGINT) AS clicks,
               epoch_ms(first_seen) AS first_seen, epoch_ms(last_seen) AS last_seen, segment
        FROM found_activity_delta;
    """)  # fmt: skip
    rows = [
        compare(con, "enriched_clicks", ["event_id"], "expected_enriched", "found_enriched"),
        compare(con, "sessions table", ["session_id"], "expected_sessions", "found_sessions"),
        compare(con, "page_stats", ["page", "hour"], "expected_pages", "found_page_stats"),
        compare(con, "user_activity", ["user_id"], "expected_activity", "found_activity"),
    ]
    compared = {row["output"]: row.pop("compared") for row in rows}
    _keep_evidence(settings, compared, _events_of_named(con, compared), say)
    return rows


def _events_of_named(
    con: duckdb.DuckDBPyConnection, compared: Mapping[str, tuple[Mapping[Any, Any], Mapping[Any, Any]]]
) -> list[tuple[Any, ...]]:
    """The events, in log order, of every user a differing key could name (a session id's or user id's head, an
    event id): `evidence` picks its users among them."""
    named = {str(k).split(":", 1)[0] for actual, expected in compared.values() for k in (*actual, *expected)
             if isinstance(k, str)}  # fmt: skip
    if not named:
        return []
    con.register("named", pa.table({"name": list(named)}))
    return con.sql("""
        SELECT position, event_id, user_id, page, event_time, segment FROM events
        WHERE user_id IN (SELECT name FROM named)
           OR user_id IN (SELECT user_id FROM clicks WHERE event_id IN (SELECT name FROM named))
        ORDER BY position
    """).fetchall()  # fmt: skip


EVIDENCE_FILE = "soak-differences.json"  # beside the bench's tables and checkpoints: the stack goes, this stays


def _wrong(actual: Mapping[Any, Any], expected: Mapping[Any, Any]) -> list[Any]:
    return [k for k, v in expected.items() if actual.get(k, KeyError) != v]


def evidence(
    compared: Mapping[str, tuple[Mapping[Any, Any], Mapping[Any, Any]]], events: Sequence[tuple[Any, ...]]
) -> dict[str, Any]:
    """What to read once the stack is gone: each output's differing keys (expected, found; a key only found
    too), and the events, in log order with their positions, of every user a differing key names (a session
    id, a user id, or an event id's user). `events`: (position, event_id, user, page, time_ms, segment)."""
    user_of_event = {e[1]: e[2] for e in events}
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
    for position, event_id, user, page, time_ms, segment in events:
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
