"""The replay protocol on the real stack, through the CLI, as an operator runs it.

enrich_clicks v1 is live. Its logic changes (a shorter profile lateness) and the version is bumped to 2. The
replay is killed halfway and launched again; it resumes, and is stopped while it verifies (recorded as
interrupted). v2 is verified and cut over, then rolled back. A
consumer following the alias sees every change exactly once. Its table equals a fresh computation of v2 after
the cutover and of v1 after the rollback, while the log also grew in between.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from jobs.enrich_clicks.logic import MINUTE_MS, Profile, answer
from kappa.aliases import AliasRegistry
from kappa.generate import Click, ProfileVersion, StreamConfig, clickstream
from kappa.kafka_client import Outgoing, produce_all
from kappa.quality import suite_for
from kappa.readers import AliasConsumer
from kappa.settings import KappaSettings
from kappa.topics import Cleanup, Topic
from tests.integration.replay_pipeline import CONFIG, deploy_copy, produce

FIRST_PART = slice(0, 2200)  # the log when v1 goes live; the rest arrives after the cutover


def rule(config: StreamConfig, lateness_minutes: int, emissions: slice) -> dict[str, tuple[int | None, str]]:
    """event_id -> (profile_version, segment): the as-of rule over that part of the log (a fresh run)."""
    profiles: dict[str, list[Profile]] = {}
    clicks: list[Click] = []
    for n, emission in enumerate(clickstream(config)):
        if n < (emissions.start or 0) or (emissions.stop is not None and n >= emissions.stop):
            continue
        r = emission.record
        if isinstance(r, ProfileVersion):
            profiles.setdefault(r.user_id, []).append(
                Profile(r.profile_version, r.valid_from_ms, emission.log_time_ms, r.segment, r.country)
            )
        else:
            clicks.append(r)
    result = {}
    for c in clicks:
        best = answer(c.event_time_ms, sorted(profiles.get(c.user_id, []), key=lambda p: p.order),
                      lateness_minutes * MINUTE_MS)  # fmt: skip
        result[c.event_id] = (best.profile_version if best else None, best.segment if best else "UNKNOWN")
    return result


def table(changes: dict[str, dict[str, object] | None]) -> dict[str, tuple[object, object]]:
    return {k: (v["profile_version"], v["segment"]) for k, v in changes.items() if v is not None}


def a_value_of(stack: KappaSettings, topic: str) -> bytes:
    """The value bytes of one record of the topic (Confluent-framed Avro, as its writer produced it)."""
    consumer = Consumer({"bootstrap.servers": stack.bootstrap, "group.id": "test-replay-sample", "log_level": 0})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(4)])
        while True:
            message = consumer.poll(10)
            assert message is not None, f"{topic} holds no record"
            if message.error() is None and message.value() is not None:
                return bytes(message.value())
    finally:
        consumer.close()


def follow(consumer: AliasConsumer, seen: dict[str, dict[str, object] | None], counts: list[int]) -> None:
    """Drain the follower: apply every change to `seen`, count the changes of this round."""
    n = 0
    for change in consumer.changes(idle_timeout_s=4):
        seen[change.key] = change.value
        n += 1
    counts.append(n)


@pytest.mark.timeout(1200)
def test_replay_cutover_and_rollback_through_the_cli(
    stack: KappaSettings, tmp_path: Path, unique_name: Callable[[str], str]
) -> None:
    prefix = unique_name("rp") + "_"
    v1 = deploy_copy(stack, tmp_path / "v1", prefix)
    produce(stack, v1, FIRST_PART)
    v1.kappa("jobs", "run", "enrich_clicks", "--available-now")  # the first version: live by definition
    registry = AliasRegistry(stack)
    dataset = f"{prefix}enriched_clicks"
    assert registry.live(dataset) is not None
    assert registry.live(dataset).version == 1

    enriched = Topic(dataset, 4, Cleanup.COMPACT, value_schema="enriched_click.avsc")
    seen: dict[str, dict[str, object] | None] = {}
    counts: list[int] = []
    consumer = AliasConsumer(stack, enriched, group=unique_name("follower"), alias_poll_s=0.5)
    try:
        follow(consumer, seen, counts)
        v1_first = rule(CONFIG, 20, FIRST_PART)
        assert table(seen) == v1_first

        # The logic change, in a new copy of the code: v1 keeps its own.
        v2 = v1.copy(tmp_path / "v2")
        v2.edit("enrich_clicks/declaration.py", "version=1,", "version=2,")
        v2.edit("enrich_clicks/declaration.py", '"profile_lateness_minutes": 20', '"profile_lateness_minutes": 5')
        v2_first = rule(CONFIG, 5, FIRST_PART)
        differing = {k for k in v1_first if v1_first[k] != v2_first[k]}
        assert differing, "the logic change must change some answers, or the test proves nothing"

        # Cutover before verification is refused.
        refused = v2.kappa("replay", "cutover", "enrich_clicks", check=False)
        assert refused.returncode == 2
        assert "has not passed verification" in refused.stderr

        # Replay, killed after its first catch-up batch, then launched again: it resumes.
        replay = v2.popen("replay", "start", "enrich_clicks", "--max-offsets-per-trigger", "400", "--by", "alice")
        assert replay.stdout is not None
        for line in replay.stdout:
            if "catch-up enrich_clicks v2:" in line and " 0/" not in line:
                os.killpg(replay.pid, signal.SIGKILL)
                break
        replay.wait(60)
        # Its checkpoint began at the earliest record: a relaunch asking for another start is refused, not ignored.
        moved = v2.kappa("replay", "start", "enrich_clicks", "--from", "2026-01-01T00:00:00Z", check=False)
        assert moved.returncode == 2, moved.stdout + moved.stderr
        assert "enrich_clicks v2 started from earliest" in moved.stderr
        # Relaunched, it resumes and catches up. Stopped while it verifies (SIGTERM to its Python, as Dagster
        # stops a run), it records the step as interrupted and exits 130; `replay verify` finishes the job.
        relaunch = v2.popen("replay", "start", "enrich_clicks", "--max-offsets-per-trigger", "400", "--by", "alice")
        assert relaunch.stdout is not None
        lines = []
        for line in relaunch.stdout:
            lines.append(line)
            if "verifying enrich_clicks v2" in line:
                relaunch.send_signal(signal.SIGTERM)
                break
        out = "".join(lines) + relaunch.communicate(timeout=120)[0]
        assert relaunch.returncode == 130, out[-3000:]
        assert "kappa: interrupted" in out
        resumed = [s for s in registry.steps("enrich_clicks") if s.step == "prepare" and s.to_version == 2]
        assert resumed[-1].facts["resuming"] is True  # the relaunch found the killed run's checkpoint
        stopped = [s for s in registry.steps("enrich_clicks") if s.step == "verify"][-1]
        assert (stopped.outcome, stopped.facts["error"]) == ("interrupted", "stopped by SIGTERM")
        # Meanwhile the live v1 goes on writing: here a key that no replay of this log can have. Verification
        # compares with v1 as it was when the catch-up started, so the key is not counted as lost.
        later = Outgoing(key=unique_name("written-later").encode(), value=a_value_of(stack, f"{dataset}.v1"))
        produce_all(stack, f"{dataset}.v1", [later])
        done = v2.kappa("replay", "verify", "enrich_clicks", "--by", "alice", check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "verification: PASSED" in done.stdout
        assert f"{len(differing):,} changed" in done.stdout  # the reconciliation found exactly the changed keys
        verified = [
            s for s in registry.steps("enrich_clicks") if s.step == "verify" and s.facts.get("dataset") == dataset
        ]
        quality = verified[-1].facts["quality"]  # the data contract ran on the whole new output, and held
        suite = suite_for(v2.settings(stack), dataset)
        assert suite is not None
        assert quality["suite"] == suite.name
        assert (quality["success"], quality["evaluated"]) == (True, len(suite.expectations)), quality

        assert " as of " in done.stdout  # against v1 as of the catch-up's start
        produce_all(stack, f"{dataset}.v1", [Outgoing(key=later.key, value=None)])  # v1 deletes it again
        follow(consumer, seen, counts)  # the follower sees both before the cutover
        assert seen.get(later.key.decode()) is None

        cut = v2.kappa("replay", "cutover", "enrich_clicks", "--version", "2", "--by", "alice")
        assert "v1 -> v2" in cut.stdout
        follow(consumer, seen, counts)
        assert counts[-1] == len(differing)  # each changed key once, nothing else again
        assert table(seen) == v2_first

        # The log grows; both versions keep running (one batch each here), the follower reads v2.
        produce(stack, v1, slice(FIRST_PART.stop, None))
        v1.kappa("jobs", "run", "enrich_clicks", "--available-now")
        v2.kappa("jobs", "run", "enrich_clicks", "--available-now")
        follow(consumer, seen, counts)
        assert table(seen) == rule(CONFIG, 5, slice(0, None))

        back = v2.kappa("replay", "rollback", "enrich_clicks", "--by", "bob")
        assert "v2 -> v1" in back.stdout
        follow(consumer, seen, counts)
        assert table(seen) == rule(CONFIG, 20, slice(0, None))
        assert consumer.version == 1
        # A second rollback would undo the first, to an unverified state: refused, naming the way back.
        again = v2.kappa("replay", "rollback", "enrich_clicks", "--by", "bob", check=False)
        assert again.returncode == 2
        assert "is at v1 by a rollback from v2" in again.stderr
    finally:
        consumer.close()

    steps = [(s.step, s.from_version, s.to_version, s.outcome, s.by) for s in registry.steps("enrich_clicks")]
    assert ("cutover", 1, 2, "ok", "alice") in steps
    assert ("rollback", 2, 1, "ok", "bob") in steps
    assert any(s[0] == "cutover" and s[2] == 2 and s[3] == "refused" for s in steps)
    history = [(a.version, a.previous_version, a.changed_by) for a in registry.history(dataset)]
    assert history[-2:] == [(2, 1, "alice"), (1, 2, "bob")]


def test_a_replay_older_than_an_input_horizon_is_refused(
    stack: KappaSettings, tmp_path: Path, unique_name: Callable[[str], str]
) -> None:
    prefix = unique_name("hz") + "_"
    # Clicks kept for a time (compact,delete), as many teams run them; retention deletes a partition's start.
    retained = {"cleanup=Cleanup.COMPACT,\n    retention_ms=FOREVER,": "cleanup=Cleanup.COMPACT_DELETE,"}
    d = deploy_copy(stack, tmp_path / "code", prefix, catalog_edits=retained)
    produce(stack, d, slice(0, 400))
    clicks = f"{prefix}clicks"
    admin = AdminClient({"bootstrap.servers": stack.bootstrap})
    for future in admin.delete_records([TopicPartition(clicks, 0, 20)]).values():
        future.result(timeout=30)

    refused = d.kappa("replay", "check", "enrich_clicks", check=False)
    assert refused.returncode == 2
    assert f"the earliest record of {clicks}" in refused.stderr
    assert "complete only since" in refused.stderr
    horizon = refused.stderr.split("Start at --from ")[1].split(" or later")[0]

    before = d.kappa("replay", "check", "enrich_clicks", "--from", "2025-12-31T00:00:00Z", check=False)
    assert before.returncode == 2
    assert "older than the replay horizon" in before.stderr

    accepted = d.kappa("replay", "check", "enrich_clicks", "--from", horizon)
    assert "checks passed" in accepted.stdout
    steps = [(s.step, s.outcome) for s in AliasRegistry(stack).steps("enrich_clicks")]
    assert ("check", "refused") in steps
    assert ("check", "ok") in steps
