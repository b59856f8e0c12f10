"""A logic change of enrich_clicks replayed through the five datasets below it, cut over and rolled back as one
set, as an operator runs it: the cascade runbooks as written, with the CLI around them. On a secured stack of
the module's own (`kappa up --secure`: TLS, SCRAM logins, the authorizer, the registry behind logins), where every
job version runs as its own principal, allowed only what its declaration reads and writes.

A copy of the pipeline (its own topics and Delta tables) runs its live set continuously: enrich_clicks,
sessionize and the three Delta views, v1. Then:

1. The change (a shorter profile lateness) is enrich_clicks v2, in a second copy of the code; `kappa replay
   plan` names the five datasets it reaches and the versions each gets. A cascade replay killed during its
   third member (sessionize), as that member's catch-up starts, is launched again by the runbook
   (`replays/cascade-replay.md`), which replays only the members the killed run had not verified, goes live and
   cuts the set over. Meanwhile a follower reads `enriched_clicks` through its alias (`AliasConsumer`), another
   reads the `page_stats` table through its alias, and a third reader polls the alias registry: none ever sees
   a new dataset beside an old one, each sees the set move once, and the page_stats reader reads, under each
   version, that version's whole table. The follower gets each changed key once, as the as-of rule computed
   independently (tests/oracles.py) says.
2. Every dataset of the new set equals the new logic's answer over the whole log, and every dataset of the old
   set the old logic's: computed from the generator's records by tests/oracles.py, which shares no code with the
   jobs (a member that read an old input, or part of its input, would differ).
3. Retiring the old `enriched_clicks` is refused while the old `sessionize` runs and reads it; a rollback with
   a version to return to stopped is refused; then `replays/cascade-rollback.md` moves the set back at once,
   and the follower gets each key's old value back once.
4. The defects the issue names: a cutover to a version that does not run is refused; a live downstream
   version whose input moved under it (enrich_clicks cut over alone) is refused a restart, with the command
   that replays it.
5. Least privilege (issue 38): the replay's version cannot write the live version's topic, a job can neither
   write the alias registry nor take the movers' transactional id, a job cannot read a topic it does not
   declare, and a job whose declaration asks for more than its ACLs allow is refused at start in one line.
   Kafka refuses a plaintext client, a wrong password, an unknown and a removed principal; the registry refuses
   anonymous requests and a reader's writes. Last, no secret is in any file the stack, the jobs, Spark's event
   logs or Dagster's storage wrote.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import fastavro
import httpx
import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from deltalake import DeltaTable

from jobs.catalog import CLICKS
from jobs.clickstream.generator import Click, clickstream
from jobs.enrich_clicks.declaration import JOB as ENRICH
from jobs.enrich_clicks.declaration import Settings as EnrichSettings
from jobs.page_stats.declaration import JOB as PAGE_STATS
from jobs.page_stats.declaration import Settings as PageStatsSettings
from jobs.sessionize.declaration import JOB as SESSIONIZE
from jobs.sessionize.declaration import Settings as SessionizeSettings
from kappa.contracts.registry import Registry, RegistryError, registry_of
from kappa.contracts.schema_files import load
from kappa.contracts.topic_declarations import MINUTE_MS, Cleanup, Topic
from kappa.core.errors import KappaError
from kappa.core.security import (
    known_secrets,
    librdkafka_config,
    registry_password_file,
    user_credential,
    user_password_file,
)
from kappa.core.settings import KappaSettings, Security, load_settings
from kappa.kafka.acls import remove_user, upsert_user
from kappa.kafka.aliases import ALIASES, MOVER_ID, AliasRegistry, AliasWatch
from kappa.kafka.clients import require_kafka
from kappa.kafka.partitioning import partition_for
from kappa.lifecycle import deployments, state_files
from kappa.lifecycle.state_files import Health
from kappa.runtime.readers import AliasConsumer, Change
from kappa.spark.session import SHORT_RUN_JVM
from tests import oracles
from tests.conftest import PORT_OFFSET
from tests.e2e.least_privilege import (
    end_offsets,
    produce_as,
    read_as,
    readable,
    secrets_in,
    take_transactional_id_as,
)
from tests.e2e.test_replay_lifecycle import run
from tests.environment import stack_env
from tests.integration.replay_pipeline import CONFIG, REPO, Deployment, deploy_copy, produce
from tests.waiting import wait_until

JOBS = ("enrich_clicks", "page_stats", "sessionize", "sessions_table", "user_activity")  # pipeline order
TOPICS = {"enrich_clicks": "enriched_clicks", "sessionize": "sessions"}
TABLES = {"page_stats": "page_stats", "sessions_table": "sessions", "user_activity": "user_activity"}
DECLARATION = "enrich_clicks/declaration.py"
DATA = CONFIG  # the lifecycle test's clickstream: 3,000 clicks of 30 users
ENV = {
    "KAPPA_SPARK_SHUFFLE_PARTITIONS": "1",  # one state store per stateful batch: the test's size
    "KAPPA_SPARK_DRIVER_JAVA_OPTIONS": SHORT_RUN_JVM,  # with the code cache a job host needs
}
# The module's secured stack: its own ports and folder (the session's stack is plaintext).
SECURED_PORTS = {"kafka_port": 20092 + PORT_OFFSET, "controller_port": 20192 + PORT_OFFSET,
                 "registry_port": 20081 + PORT_OFFSET}  # fmt: skip
WRITTEN: list[Path] = []  # every folder a copy of the pipeline wrote to, scanned for secrets at the end


def datasets(prefix: str) -> dict[str, str]:
    """Job -> the alias name of what it writes, in the copy with this prefix."""
    return {job: f"{prefix}{TOPICS[job]}" if job in TOPICS else f"delta:{prefix}{TABLES[job]}" for job in JOBS}


def change_logic(d: Deployment) -> None:
    """v2 counts trial users as free: every TRIAL click's segment changes, and with it the segment of sessions a
    trial click opened and of users whose latest session did (the profile lateness, the lifecycle test's change,
    never reaches a session's first click, which comes 30 minutes after the user's last one)."""
    d.edit(DECLARATION, "version=1,", "version=2,")
    d.edit(
        DECLARATION,
        "topics), lateness_ms, disorder_ms)",
        "topics), lateness_ms, disorder_ms).withColumn(\n"
        '        "segment", F.when(F.col("segment") == "TRIAL", "FREE").otherwise(F.col("segment"))\n'
        "    )",
    )


def run_set(stack: KappaSettings, d: Deployment) -> None:
    """Every job of the copy deployed continuously (the first versions go live), until all have read everything.
    The starts run at once, as an operator's five terminals would: each watches its deployment for a few seconds."""
    starts = {job: d.popen("jobs", "start", job) for job in JOBS}
    for job, start in starts.items():
        output, _ = start.communicate(timeout=600)
        assert start.returncode == 0, output
        assert f"{job} v1: started" in output, output
    caught_up(stack, d, dict.fromkeys(JOBS, 1))


def caught_up(stack: KappaSettings, d: Deployment, versions: dict[str, int]) -> None:
    """Each version has read its inputs to their ends and written its output (a view's table exists)."""
    settings = d.settings(stack)

    def written() -> bool:
        aliases = AliasRegistry(stack).all()
        for job, version in versions.items():
            if job in TABLES and not Path(str(settings.delta_root), f"{d.prefix}{TABLES[job]}", f"v{version}").is_dir():
                return False
            if version == 1 and datasets(d.prefix)[job] not in aliases:
                return False
        return True

    started = time.monotonic()
    wait_until(lambda: written() and d.caught_up(stack, versions), 600, f"{versions} to catch up", interval_s=2)
    print(f"{time.monotonic() - started:6.1f} s  {versions} caught up", flush=True)


def verified_before_kill(lines: list[str]) -> list[str]:
    """The members a killed `replay start --downstream` reported verified (`verification: PASSED` under its
    `[n/5] <job> v2` line), in its order."""
    member, passed = None, []
    for line in lines:
        started = re.match(r"\[\d+/\d+\] (\w+) v2: ", line)
        if started:
            member = started.group(1)
        elif line.startswith("verification: PASSED"):
            passed.append(member)
    return [m for m in passed if m is not None]


def moves(seen: list[Any]) -> list[Any]:
    """What a reader saw, each run of equal reads as one: [old, new] for a reader that saw one move."""
    return [x for n, x in enumerate(seen) if n == 0 or seen[n - 1] != x]


def stop_all(stack: KappaSettings, d: Deployment) -> None:
    settings = d.settings(stack)
    for state in deployments.status(settings):
        deployments.stop_if_running(settings, state.deployment.job, state.deployment.version, timeout_s=30)


# --- what readers see ----------------------------------------------------------------------------------------


def topic_table(stack: KappaSettings, topic: str, schema_file: Path) -> dict[str, Any]:
    """The latest decoded value per key of a physical topic (tombstones remove the key), read independently
    of the platform's readers: a plain consumer (logged in as the platform's admin) and fastavro on the schema
    file."""
    schema = fastavro.parse_schema(load(schema_file))
    consumer = Consumer({**librdkafka_config(stack), "group.id": f"t-{uuid.uuid4().hex}",
                         "enable.partition.eof": True, "log_level": 0})  # fmt: skip
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        latest: dict[str, Any] = {}
        ended: set[int] = set()
        deadline = time.monotonic() + 120
        while len(ended) < len(partitions) and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    ended.add(message.partition() or 0)
                continue
            key = bytes(message.key() or b"").decode()
            raw = message.value()
            if raw is None:
                latest.pop(key, None)
            else:
                latest[key] = fastavro.schemaless_reader(io.BytesIO(raw[5:]), schema)
        assert len(ended) == len(partitions), f"could not read {topic} to its end"
        return latest
    finally:
        consumer.close()


def delta_rows(path: str) -> list[dict[str, Any]]:
    """A Delta table's rows, in the order of their sorted JSON: equal tables give equal lists."""
    rows = DeltaTable(path.removeprefix("file:")).to_pyarrow_table().to_pylist()
    return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True, default=str))


def outputs(stack: KappaSettings, d: Deployment) -> dict[str, Any]:
    """Every live dataset of the copy, as its readers see it through the aliases."""
    aliases = AliasRegistry(stack).all()
    schemas = d.settings(stack).schemas_path
    found: dict[str, Any] = {}
    for job, dataset in datasets(d.prefix).items():
        physical = aliases[dataset].physical
        if job in TOPICS:
            found[job] = topic_table(stack, physical, schemas / f"{TOPICS[job]}.avsc")
        else:
            found[job] = delta_rows(physical)
    return found


# --- the independent answer --------------------------------------------------------------------------------------


def answer(segment: Callable[[str], str] = lambda s: s) -> dict[str, dict[Any, Any]]:
    """Every dataset of the set over the test's log, as the rules' restatements compute it (tests/oracles.py,
    which shares no code with jobs/), with the settings the jobs declare; `segment`: what enrich_clicks' logic
    makes of the as-of rule's segment (v2's change). Keyed and valued as `as_answered` reads the outputs."""
    enrich, sessionize = ENRICH.settings_as(EnrichSettings), SESSIONIZE.settings_as(SessionizeSettings)
    page = PAGE_STATS.settings_as(PageStatsSettings)
    log = list(clickstream(DATA))  # produced in this order
    clicks = [e.record for e in log if isinstance(e.record, Click)]
    found = oracles.pipeline(
        log,
        lateness_ms=enrich.profile_lateness_minutes * MINUTE_MS,  # in v1 and v2: the change is the segment
        disorder_ms=enrich.disorder_minutes * MINUTE_MS,
        gap_ms=sessionize.gap_minutes * MINUTE_MS,
        allowed_lateness_ms=sessionize.allowed_lateness_minutes * MINUTE_MS,
        page_gap_ms=page.gap_minutes * MINUTE_MS,
        page_lateness_ms=page.lateness_minutes * MINUTE_MS,
        stamps=oracles.partition_stamps(
            (c.event_id, partition_for(c.user_id, CLICKS.partitions), c.event_time_ms) for c in clicks
        ),
        segment=segment,
    )
    # The as-of answer holds when no profile version breaks the lateness contract (tests/oracles.py); one that
    # did would be set aside or applied depending on the batch it met.
    assert not found.late_profiles, f"versions that break the lateness contract: {sorted(found.late_profiles)[:3]}"
    return {"enrich_clicks": found.enriched, "page_stats": found.page_stats, "sessionize": found.sessions,
            "sessions_table": found.sessions, "user_activity": found.user_activity}  # fmt: skip


def _ms(t: datetime | None) -> int | None:
    return None if t is None else round((t if t.tzinfo else t.replace(tzinfo=UTC)).timestamp() * 1000)


def as_answered(found: dict[str, Any]) -> dict[str, dict[Any, Any]]:
    """What each dataset holds (`outputs`), keyed and valued as `answer` computes it."""

    def session(r: dict[str, Any]) -> tuple[Any, ...]:
        return (r["user_id"], _ms(r["start_time"]), _ms(r["end_time"]), r["clicks"], r["distinct_pages"],
                r["entry_page"], r["exit_page"], r["segment"])  # fmt: skip

    tables: dict[str, dict[Any, Any]] = {
        "enrich_clicks": {k: (r["user_id"], r["page"], r["referrer"], _ms(r["event_time"]), r["device"],
                              r["profile_version"], r["segment"], r["country"])
                          for k, r in found["enrich_clicks"].items()},
        "page_stats": {(r["page"], _ms(r["hour_start"])): (r["views"], r["distinct_users"],
                                                            r["median_time_on_page_ms"]) for r in found["page_stats"]},
        "sessionize": {k: session(r) for k, r in found["sessionize"].items()},
        "sessions_table": {r["session_id"]: session(r) for r in found["sessions_table"]},
        "user_activity": {r["user_id"]: (r["sessions"], r["clicks"], _ms(r["first_seen"]), _ms(r["last_seen"]),
                                         r["segment"]) for r in found["user_activity"]},
    }  # fmt: skip
    for job in TABLES:  # one row per key
        assert len(tables[job]) == len(found[job]), f"{job}: {len(found[job])} rows for {len(tables[job])} keys"
    return tables


def assert_answers(found: dict[str, Any], expected: dict[str, dict[Any, Any]], what: str) -> None:
    """Each dataset equals its answer; the differences named."""
    for job, rows in as_answered(found).items():
        wrong = {k: (rows.get(k), v) for k, v in expected[job].items() if rows.get(k) != v}
        extra = rows.keys() - expected[job].keys()
        said = (
            f"{what} {job}: {len(wrong)} keys missing or different (got, expected), e.g. {list(wrong.items())[:3]}; "
            f"{len(extra)} unexpected, e.g. {sorted(extra)[:3]}"
        )
        assert not wrong, said
        assert not extra, said


class Readers:
    """Three readers through the aliases while the set moves: a follower of enriched_clicks (every change,
    counted per key), a reader of the page_stats table, and a poller of the registry (every dataset's version
    as of one read). They record what they saw; the test asserts on it. A reader thread that fails fails the
    test: its exception is raised again by `alive()` and on leaving the `with`."""

    def __init__(self, stack: KappaSettings, prefix: str) -> None:
        self.stack = stack
        self.names = datasets(prefix)
        enriched = Topic(self.names["enrich_clicks"], 4, Cleanup.COMPACT, value_schema="enriched_clicks.avsc")
        self.follower = AliasConsumer(stack, enriched, group=f"follower-{uuid.uuid4().hex[:8]}", alias_poll_s=0.3)
        self.changes: list[Change] = []
        self.table: dict[str, Any] = {}
        self.polled: list[tuple[int, ...]] = []  # the five versions, per poll
        self.page_stats_reads: list[tuple[int, int, int]] = []  # (enriched version, page_stats version, rows)
        self._stop = threading.Event()
        self._errors: dict[str, BaseException] = {}
        self._threads = [
            threading.Thread(target=self._recorded, args=(f,), name=f.__name__, daemon=True)
            for f in (self._poll, self._read_page_stats)
        ]

    def _recorded(self, read: Callable[[], None]) -> None:
        try:
            read()
        except BaseException as exc:
            self._errors[read.__name__] = exc

    def alive(self) -> bool:
        """Both reader threads still read (a dead one raises its exception here)."""
        for name, error in self._errors.items():
            raise AssertionError(f"the reader thread {name} died") from error
        dead = [t.name for t in self._threads if not t.is_alive()]
        assert not dead, f"the reader threads {dead} ended while the test still reads"
        return True

    def saw(self, versions: int) -> bool:
        """Both threads have read the set at `versions` since the move (each reader's latest read)."""
        self.alive()
        polled = bool(self.polled) and self.polled[-1] == (versions,) * len(self.names)
        return polled and bool(self.page_stats_reads) and self.page_stats_reads[-1][:2] == (versions, versions)

    def follow(self) -> None:
        """The follower takes every change there is now (it runs between the steps, in this thread)."""
        for change in self.follower.changes(idle_timeout_s=3):
            self.changes.append(change)
            if change.value is None:
                self.table.pop(change.key, None)
            else:
                self.table[change.key] = change.value

    def _poll(self) -> None:
        watch = AliasWatch(self.stack)
        try:
            while not self._stop.is_set():
                live = watch.all()  # one read: a set moved together is seen moved together
                self.polled.append(tuple(live[d].version for d in self.names.values()))
        finally:
            watch.close()

    def _read_page_stats(self) -> None:
        watch = AliasWatch(self.stack)
        try:
            while not self._stop.is_set():
                live = watch.all()
                enriched, stats = live[self.names["enrich_clicks"]], live[self.names["page_stats"]]
                rows = len(DeltaTable(stats.physical.removeprefix("file:")).to_pyarrow_table())
                self.page_stats_reads.append((enriched.version, stats.version, rows))
                time.sleep(0.2)
        finally:
            watch.close()

    def __enter__(self) -> Readers:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)
        self.follower.close()
        for name, error in self._errors.items():
            raise AssertionError(f"the reader thread {name} died") from error
        running = [t.name for t in self._threads if t.is_alive()]
        assert not running, f"the reader threads {running} did not end within 60 s of being told to"


# --- the test --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stack(state_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KappaSettings]:
    """The module's own secured stack (`kappa up --secure`), stopped and purged (secrets too) at the end."""
    from kappa.stack import LocalStack

    base = tmp_path_factory.mktemp("secured")
    settings = load_settings(
        **SECURED_PORTS,
        stack_dir=state_dir / f"secured-stack-{PORT_OFFSET}",
        security=Security.SASL_SSL,
        delta_root=str(base / "delta"),
        checkpoint_root=str(base / "checkpoints"),
        spark_shuffle_partitions=2,
        spark_driver_java_options=SHORT_RUN_JVM,
    )
    local = LocalStack(settings)
    local.down(purge=True)  # whatever a killed earlier session left behind
    local.up()
    WRITTEN.append(settings.stack_path)
    try:
        yield settings
    finally:
        local.down(purge=True)


@pytest.fixture
def copies(stack: KappaSettings, tmp_path: Path) -> Iterator[Callable[[str], Deployment]]:
    """Copies of the pipeline for the test; every deployment they start is stopped at the end. Their Spark
    applications keep event logs (what Spark's UI and history server show), scanned for secrets at the end."""
    made: list[Deployment] = []

    def make(name: str) -> Deployment:
        env = {**ENV, "KAPPA_SPARK_EVENT_LOG_DIR": str(tmp_path / name / "spark-events")}
        d = deploy_copy(stack, tmp_path / name, f"cr{uuid.uuid4().hex[:6]}_", env=env, tables=True)
        made.append(d)
        WRITTEN.append(tmp_path / name)
        return d

    yield make
    for d in made:
        stop_all(stack, d)


@pytest.mark.timeout(2400)
def test_a_change_replays_through_everything_below_it_and_the_set_moves_at_once(
    stack: KappaSettings, tmp_path: Path, copies: Callable[[str], Deployment]
) -> None:
    v1 = copies("v1")
    produce(stack, v1, slice(0, None), DATA)
    run_set(stack, v1)
    registry = AliasRegistry(stack)
    names = datasets(v1.prefix)
    old = outputs(stack, v1)

    # The change, in a second copy of the code: the jobs below enrich_clicks are not edited.
    v2 = v1.copy(tmp_path / "v2")
    change_logic(v2)
    plan = json.loads(v2.kappa("replay", "plan", "enrich_clicks", "--json").stdout)
    assert [(m["job"], m["dataset"], m["live"], m["version"]) for m in plan["members"]] == [
        (job, names[job], 1, 2) for job in JOBS
    ]
    assert plan["members"][2]["reads"] == f"{names['enrich_clicks']} v2"  # sessionize
    assert plan["members"][0]["records"] >= DATA.events  # the clicks, and the profiles it joins
    assert all(m["estimate_s"] is not None for m in plan["members"])

    # Killed as the set's third member (sessionize) starts its catch-up, then resumed by the runbook's `start`.
    killed = v2.popen("replay", "start", "enrich_clicks", "--downstream")
    assert killed.stdout is not None
    said: list[str] = []
    member = None
    for line in killed.stdout:
        said.append(line)
        if re.match(r"\[\d+/\d+\] (\w+) v2: ", line):
            member = line.split("] ", 1)[1].split(" ", 1)[0]
        if member == "sessionize" and "catch-up sessionize v2: " in line:  # the catch-up's first progress line
            killed.send_signal(signal.SIGKILL)
            break
    else:
        pytest.fail("the replay ended before sessionize's catch-up started:\n" + "".join(said[-40:]))
    killed.wait(60)
    # What the killed run verified decides what the runbook's run replays: the two members before sessionize.
    verified = verified_before_kill(said)
    assert verified == ["enrich_clicks", "page_stats"], "".join(said[-60:])
    # Not everything is verified: the set cannot be cut over (and nothing went live).
    refused = v2.kappa("replay", "cutover", "enrich_clicks", "--downstream", check=False)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "has not passed verification" in refused.stderr
    assert {a.version for d, a in registry.all().items() if d in names.values()} == {1}

    with Readers(stack, v1.prefix) as readers:
        readers.follow()
        assert readers.table == old["enrich_clicks"]  # the follower reads the live v1
        started = time.monotonic()
        out = run(v2, "cascade-replay.md")
        wall = time.monotonic() - started
        for job in JOBS:  # the members the killed run verified are not replayed; every other one is, and passes
            skipped = f"{job} v2: verified already, not replayed again" in out
            assert skipped == (job in verified), f"{job}: {'not ' if job in verified else ''}skipped\n{out}"
        assert out.count("verification: PASSED") == len(JOBS) - len(verified), out
        assert "5 aliases in one transaction" in out
        readers.follow()
        wait_until(lambda: readers.saw(2), 60, "both reader threads to read the new set after the cutover")
    print(f"cascade runbook: {wall:.1f} s")
    assert {d: registry.all()[d].version for d in names.values()} == {d: 2 for d in names.values()}
    new = outputs(stack, v2)

    # The readers never saw a mix: each poll is the old set or the new set, and the set moved once.
    assert moves(readers.polled) == [(1,) * 5, (2,) * 5], moves(readers.polled)
    # The page_stats reader read each version's whole table, with enriched_clicks at the same version.
    rows = {1: len(old["page_stats"]), 2: len(new["page_stats"])}
    assert rows[1] > 0
    assert rows[2] > 0
    assert moves([(e, s) for e, s, _n in readers.page_stats_reads]) == [(1, 1), (2, 2)], moves(readers.page_stats_reads)
    assert all(n == rows[s] for _e, s, n in readers.page_stats_reads), (rows, moves(readers.page_stats_reads))
    # The follower got each TRIAL click once, now FREE (the as-of rule computed independently: answer()).
    changed = {key for key, row in answer()["enrich_clicks"].items() if row[6] == "TRIAL"}
    assert changed, "the logic change must change some answers, or the test proves nothing"
    after_cutover = [c for c in readers.changes if c.version == 2]
    assert sorted(c.key for c in after_cutover) == sorted(changed)
    assert {c.value["segment"] for c in after_cutover if c.value is not None} == {"FREE"}

    # 2. The new set equals the answer of the new logic over the whole log, computed independently (a member
    # that read an old input, or missed part of it, would differ); the old set, the old logic's answer.
    assert_answers(old, answer(), "the old set's")
    assert_answers(new, answer(lambda s: "FREE" if s == "TRIAL" else s), "the new set's")
    assert new["enrich_clicks"] == readers.table
    assert any(new[job] != old[job] for job in JOBS[1:]), "the change must reach below enrich_clicks"

    # 3. The old set still runs: its enriched_clicks cannot be retired while the old sessionize reads it.
    settings = v1.settings(stack)
    retire = v2.kappa("replay", "retire", "enrich_clicks", "--version", "1", check=False)
    assert retire.returncode == 2
    assert f"sessionize v1 read {names['enrich_clicks']}.v1 and run" in retire.stderr
    # A version to return to that does not run: the set's rollback is refused, nothing moves.
    v1.kappa("jobs", "stop", "sessions_table", "--version", "1")
    stopped = v2.kappa("replay", "rollback", "enrich_clicks", "--downstream", check=False)
    assert stopped.returncode == 2
    assert "sessions_table v1 is not running" in stopped.stderr
    v1.kappa("jobs", "start", "sessions_table", "--version", "1")
    caught_up(stack, v1, {"sessions_table": 1})

    with Readers(stack, v1.prefix) as readers:
        readers.follow()
        out = run(v2, "cascade-rollback.md")
        assert "rollback of the set of enrich_clicks: 5 aliases in one transaction" in out
        readers.follow()
        wait_until(lambda: readers.saw(1), 60, "both reader threads to read the old set after the rollback")
    assert moves(readers.polled) == [(2,) * 5, (1,) * 5], moves(readers.polled)
    assert moves([(e, s) for e, s, _n in readers.page_stats_reads]) == [(2, 2), (1, 1)], moves(readers.page_stats_reads)
    assert all(n == rows[s] for _e, s, n in readers.page_stats_reads), (rows, moves(readers.page_stats_reads))
    assert sorted(c.key for c in readers.changes if c.version == 1) == sorted(changed)
    assert outputs(stack, v1) == old

    # 4. A cutover to a version that does not run is refused.
    v2.kappa("jobs", "stop", "enrich_clicks", "--version", "2")
    down = v2.kappa("replay", "cutover", "enrich_clicks", "--version", "2", check=False)
    assert down.returncode == 2
    assert "enrich_clicks v2 is not running" in down.stderr
    v2.kappa("jobs", "start", "enrich_clicks", "--version", "2")
    caught_up(stack, v2, {"enrich_clicks": 2})
    # enrich_clicks alone moves: the live sessionize v1 now reads an input that is no longer live. Its
    # restart is refused, naming the replay that moves it onto the live input.
    v2.kappa("replay", "cutover", "enrich_clicks", "--version", "2")
    restart = v2.kappa("jobs", "restart", "sessionize", "--version", "1", check=False)
    assert restart.returncode == 2, restart.stdout + restart.stderr
    assert f"sessionize v1 is live and reads {names['enrich_clicks']} v1 (live: v2)" in restart.stderr
    assert "kappa replay start" in restart.stderr
    sessionize_v1 = state_files.load(settings, "sessionize", 1)
    assert sessionize_v1 is not None
    assert deployments.state_of(sessionize_v1).health is Health.RUNNING

    # 5. Least privilege, tried with plain clients as each principal. The replay's version writes its own side
    # topic, never the version it replaced (nothing lands there); no job version writes the alias registry or
    # takes the movers' transactional id (the registry is as it was); a job reads what it declares, nothing else.
    live_topic = f"{names['enrich_clicks']}.v1"
    before = end_offsets(stack, live_topic, 4)
    assert produce_as(stack, "kappa.enrich_clicks.v2", live_topic) == "TOPIC_AUTHORIZATION_FAILED"
    assert produce_as(stack, "kappa.enrich_clicks.v2", f"{names['enrich_clicks']}.v2.late") is None
    assert end_offsets(stack, live_topic, 4) == before
    aliases = registry.all()
    for principal in ("kappa.enrich_clicks.v2", "kappa.sessionize.v1"):
        assert produce_as(stack, principal, ALIASES.name) == "TOPIC_AUTHORIZATION_FAILED"
        assert take_transactional_id_as(stack, principal, MOVER_ID) == "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
    assert registry.all() == aliases
    assert read_as(stack, "kappa.page_stats.v2", f"{v1.prefix}user_profiles") == "TOPIC_AUTHORIZATION_FAILED"
    assert read_as(stack, "kappa.page_stats.v2", f"{names['enrich_clicks']}.v2") is None

    # Dagster's health sensor, as its daemon ticks, measures the versions' lag on the secured stack.
    home = tmp_path / "dagster"
    home.mkdir()
    WRITTEN.append(home)
    ticked = subprocess.run(
        [sys.executable, "-m", "tests.e2e.sensor_ticks", "--ticks", "1"],
        cwd=v2.code, capture_output=True, text=True, timeout=300,
        env={**v2.env, "DAGSTER_HOME": str(home), "PYTHONPATH": f"{v2.code}{os.pathsep}{REPO}"},
    )  # fmt: skip
    assert ticked.returncode == 0, ticked.stdout + ticked.stderr
    observed = re.search(r"tick 0: (\d+) observations", ticked.stdout)
    assert observed, ticked.stdout + ticked.stderr
    assert int(observed.group(1)) > 0, ticked.stdout


def test_a_first_versions_replay_goes_live_by_its_cutover(
    stack: KappaSettings, copies: Callable[[str], Deployment]
) -> None:
    """A dataset nothing serves yet, replayed: its version runs after go-live, but readers get it only at the
    cutover, like any other version (it used to go live at go-live, and its cutover then said "already v1")."""
    d = copies("first")
    produce(stack, d, slice(0, 600), DATA)
    dataset = datasets(d.prefix)["enrich_clicks"]
    registry = AliasRegistry(stack)
    started = d.kappa("replay", "start", "enrich_clicks")
    assert "nothing live yet: this is the first version" in started.stdout
    d.kappa("replay", "golive", "enrich_clicks")
    assert registry.live(dataset) is None  # running, not served
    cut = d.kappa("replay", "cutover", "enrich_clicks")
    assert f"{dataset}: vNone -> v1" in cut.stdout
    live = registry.live(dataset)
    assert live is not None
    assert (live.version, live.previous_version, live.reason) == (1, None, "cutover")


def test_kafka_refuses_a_plaintext_client_a_wrong_password_and_an_unknown_or_removed_principal(
    stack: KappaSettings,
) -> None:
    def cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "kappa.cli", *args], env={**stack_env(stack), **env},
                              capture_output=True, text=True, timeout=180)  # fmt: skip

    assert cli("topics", "list").returncode in (0, 1)  # the platform's own login: answered (1: drift)
    plain = cli("topics", "list", KAPPA_SECURITY="plaintext")
    assert plain.returncode == 2
    assert "did not answer a plaintext client: it speaks TLS, so it requires TLS" in plain.stderr, plain.stderr
    wrong = cli("topics", "list", KAPPA_KAFKA_PASSWORD="not-the-password")
    assert wrong.returncode == 2
    assert "refused the login of User:admin" in wrong.stderr, wrong.stderr
    unknown = cli("topics", "list", KAPPA_KAFKA_USER="nobody", KAPPA_KAFKA_PASSWORD="any-password")
    assert unknown.returncode == 2
    assert "refused the login of User:nobody" in unknown.stderr, unknown.stderr

    # A principal removed (a retired version's) can no longer log in with the password it had.
    admin = require_kafka(stack)
    upsert_user(admin, stack, "kappa.gone.v1")
    password = user_credential(stack, "kappa.gone.v1").password
    gone = stack.model_copy(update={"kafka_user": "kappa.gone.v1", "kafka_password": password})
    require_kafka(gone)  # it could
    remove_user(admin, stack, "kappa.gone.v1")
    wait_until(lambda: not _answers(gone), 30, "the removed principal's login to be refused")
    with pytest.raises(KappaError, match=r"refused the login of User:kappa.gone.v1"):
        require_kafka(gone)
    assert not user_password_file(stack, "kappa.gone.v1").exists()

    status = cli("status")  # what an operator prints holds no secret
    assert status.returncode == 0, status.stderr
    assert not [s for s in known_secrets(stack) if s in status.stdout + status.stderr]


def _answers(settings: KappaSettings) -> bool:
    try:
        require_kafka(settings, timeout_s=5)
    except KappaError:
        return False
    return True


def test_the_registry_takes_reads_and_writes_from_logins_only(stack: KappaSettings) -> None:
    subject = f"probe-{uuid.uuid4().hex[:8]}-value"
    schema = {"type": "record", "name": "Probe", "namespace": "kappa.test", "doc": "a probe",
              "fields": [{"name": "x", "type": "int", "doc": "a field"}]}  # fmt: skip
    body = {"schema": json.dumps(schema)}
    url = stack.registry
    reader = registry_password_file(stack, stack.registry_reader_user).read_text().strip()
    as_reader = (stack.registry_reader_user, reader)

    assert httpx.post(f"{url}/subjects/{subject}/versions", json=body, timeout=10).status_code == 401
    assert httpx.get(f"{url}/subjects", timeout=10).status_code == 401  # anonymous reads too
    assert httpx.post(f"{url}/subjects/{subject}/versions", json=body, auth=as_reader, timeout=10).status_code == 403
    assert httpx.get(f"{url}/subjects", auth=as_reader, timeout=10).status_code == 200
    with Registry(url) as anonymous, pytest.raises(RegistryError, match=r"without a login \(anonymous\)"):
        anonymous.register(subject, schema)
    with registry_of(stack) as platform:
        assert subject not in platform.subjects()  # nothing was registered by the refused requests
        platform.register(subject, schema)  # the platform's login (an administrator) may
        assert subject in platform.subjects()

    applied = subprocess.run([sys.executable, "-m", "kappa.cli", "schemas", "apply"], env=stack_env(stack),
                             capture_output=True, text=True, timeout=180)  # fmt: skip
    assert applied.returncode == 0, applied.stderr
    assert "enriched_clicks-value" in applied.stdout


def test_a_job_that_declares_more_than_its_acls_allow_is_refused_in_one_line(
    stack: KappaSettings, copies: Callable[[str], Deployment]
) -> None:
    d = copies("acl")
    d.edit("raw_clicks/declaration.py", "inputs=(CLICKS,),", "inputs=(CLICKS, USER_PROFILES),")
    d.edit(
        "raw_clicks/declaration.py",
        "from jobs.catalog import CLICKS\n",
        "from jobs.catalog import CLICKS, USER_PROFILES\n",
    )
    refused = d.kappa("jobs", "run", "raw_clicks", "--available-now", check=False, timeout=180)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    [line] = refused.stderr.strip().splitlines()
    assert f"(User:kappa.raw_clicks.v1) may not READ topic {d.prefix}user_profiles" in line, line
    assert f"WRITE topic {d.prefix}user_profiles.dlq" in line, line
    assert "run `kappa acls apply`" in line, line

    drift = d.kappa("acls", "plan", check=False)
    assert drift.returncode == 1, drift.stdout + drift.stderr
    assert f"+ User:kappa.raw_clicks.v1: READ topic {d.prefix}user_profiles" in drift.stdout
    d.kappa("acls", "apply")
    again = d.kappa("acls", "plan")
    assert "their ACLs as declared" in again.stdout
    assert f"+ User:kappa.raw_clicks.v1: READ topic {d.prefix}user_profiles" not in again.stdout


def test_no_secret_is_in_any_file_written(stack: KappaSettings) -> None:
    """Last in the module: every file the secured stack, the copies (state and run records, logs, checkpoints,
    Delta logs, Spark's event logs) and Dagster's storage wrote, and the Spark drivers' shared log, against every
    password of the stack's secrets folder."""
    secrets = known_secrets(stack)
    assert len(secrets) >= 8, "the stack's users, the cutover's, the registry's logins and the job versions'"
    folders = [*WRITTEN, stack.state_dir / "logs"]
    event_logs = [p for folder in WRITTEN for p in folder.rglob("events_*")]
    assert event_logs, "the jobs' Spark applications wrote no event log"
    # The logins were there to leak: each query's Kafka options, blanked by Spark's redaction.
    assert any(b"kafka.sasl.jaas.config=*********(redacted)" in readable(p) for p in event_logs)
    assert not secrets_in(folders, secrets, skip=stack.secrets_path)
