"""The real-time lane on the real stack: enrich_clicks_realtime runs live in Spark's real-time mode.

While the job runs (`run_job`, as `kappa jobs run` runs it), a second thread produces and reads, then stops the
job by SIGTERM as an operator would:
- each click reaches the lane's topic with its user's latest published profile (computed here from what the
  test published, in log order), a user without a profile as UNKNOWN;
- a profile published while the lane runs is used once a new real-time batch has read the profiles again;
- an undecodable click goes to the dead-letter topic with its bytes and a header saying why, in the same write;
- SIGTERM ends the job (inside its long-running batch);
- a replay of the lane (availableNow micro-batches, the same plan) gives every click its user's latest profile.
"""

import dataclasses
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from pyspark.sql import SparkSession

from jobs.clickstream.generator import Click, ProfileVersion
from jobs.enrich_clicks_realtime.declaration import JOB
from kappa.contracts.avro_serde import AvroDecoder, AvroEncoder
from kappa.contracts.dead_letter_format import H_KIND, DeadLetterKind, dlq_topic
from kappa.contracts.registry import Registry, value_subject
from kappa.contracts.schema_files import topic_value_schema
from kappa.contracts.topic_declarations import Topic, late_events_of
from kappa.core.settings import KappaSettings
from kappa.kafka.clients import Outgoing, admin_client, produce_all
from kappa.kafka.partitioning import partition_for
from kappa.kafka.topic_admin import apply
from kappa.runtime.runner import run_job
from kappa.spark.compacted import latest_per_key
from tests.waiting import wait_until

BATCH = "8 seconds"  # short real-time batches: the lane reads the profiles again within the test
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
# user -> the profile versions published before the lane starts, in log order (the last one counts)
PROFILES = {
    "u1": [ProfileVersion("u1", 1, "FREE", "DE", T0)],
    "u2": [ProfileVersion("u2", 1, "FREE", "FR", T0), ProfileVersion("u2", 2, "PRO", "FR", T0 + 60_000)],
    # published last, but valid from earlier: the lane takes what was published last, not an as-of answer
    "u3": [ProfileVersion("u3", 2, "TRIAL", "NL", T0 + 60_000), ProfileVersion("u3", 1, "FREE", "NL", T0)],
}
USERS = ("u1", "u2", "u3", "u4")  # u4 has no profile


def encoder(stack: KappaSettings, topic: Topic) -> AvroEncoder:
    with Registry(stack.registry) as registry:
        return AvroEncoder(registry, value_subject(topic.name), topic_value_schema(stack.schemas_path, topic), False)


def click(n: int, user: str) -> Click:
    return Click(f"e{n:04d}", user, f"/p{n % 7}", None, T0 + 120_000 + n * 1_000)


def expected_profile(user: str, published: dict[str, list[ProfileVersion]]) -> tuple[int | None, str, str | None]:
    versions = published.get(user)
    if not versions:
        return None, "UNKNOWN", None
    last = versions[-1]
    return last.profile_version, last.segment, last.country


class Reader:
    """Every record of some topics since the start, decoded where it is a lane output."""

    def __init__(self, stack: KappaSettings, topics: list[str], output: Topic) -> None:
        self._consumer = Consumer(
            {"bootstrap.servers": stack.bootstrap, "group.id": f"reader-{output.name}", "auto.offset.reset": "earliest"}
        )
        self._consumer.subscribe(topics)
        self._output = output.name
        self._registry = Registry(stack.registry)
        self._decoder = AvroDecoder(self._registry, topic_value_schema(stack.schemas_path, output))
        self.enriched: dict[str, dict[str, object]] = {}
        self.dead: list[tuple[bytes | None, dict[str, bytes]]] = []

    def poll(self) -> None:
        for message in self._consumer.consume(500, timeout=0.5):
            if message.error():
                continue
            if message.topic() == self._output:
                record = self._decoder.decode(message.value())
                self.enriched[str(record["event_id"])] = record
            else:
                self.dead.append((message.value(), {k: v for k, v in message.headers() or []}))

    def close(self) -> None:
        self._consumer.close()
        self._registry.close()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_real_time_lane_enriches_refreshes_its_profiles_and_sets_bad_records_aside(
    stack: KappaSettings, spark: SparkSession, avro_topic: Callable[..., Topic], tmp_path: Path
) -> None:
    clicks = avro_topic("clicks", value_schema="clicks.avsc", partitions=2)
    profiles = avro_topic("profiles", value_schema="user_profiles.avsc", partitions=2)
    output = avro_topic("enriched-rt", value_schema="enriched_clicks.avsc", partitions=2)
    apply(admin_client(stack), [late_events_of(output)])
    profile_encoder, click_encoder = encoder(stack, profiles), encoder(stack, clicks)

    def publish_profile(version: ProfileVersion) -> None:
        value = profile_encoder.encode(version.as_avro())
        placed = partition_for(version.user_id, profiles.partitions)
        produce_all(stack, profiles.name, [Outgoing(version.user_id.encode(), value, placed)])

    produced: list[Click] = []

    def publish_clicks(batch: list[Click]) -> set[str]:
        produced.extend(batch)
        produce_all(
            stack,
            clicks.name,
            [
                Outgoing(
                    c.event_id.encode(), click_encoder.encode(c.as_avro()), partition_for(c.user_id, clicks.partitions)
                )
                for c in batch
            ],
        )
        return {c.event_id for c in batch}

    for versions in PROFILES.values():
        for version in versions:
            publish_profile(version)
    published = {user: list(versions) for user, versions in PROFILES.items()}

    settings = stack.model_copy(update={"checkpoint_root": str(tmp_path / "cp"), "delta_root": str(tmp_path / "d")})
    job = dataclasses.replace(JOB, inputs=(clicks,), lookups=(profiles,), output=output, real_time=BATCH)
    failures: list[BaseException] = []
    reader = Reader(stack, [output.name, dlq_topic(clicks.name)], output)

    def drive() -> None:
        try:
            # 1. Clicks of every user, sent while the lane runs: each with its user's latest published profile.
            first = [click(n, USERS[n % len(USERS)]) for n in range(40)]
            sent = publish_clicks(first)
            wait_until(lambda: (reader.poll(), sent <= set(reader.enriched))[1], 180, "every click in the lane's topic")
            for c in first:
                record = reader.enriched[c.event_id]
                assert (record["user_id"], record["page"], record["event_time"].timestamp() * 1000) == (
                    c.user_id, c.page, c.event_time_ms
                )  # fmt: skip
                got = (record["profile_version"], record["segment"], record["country"])
                assert got == expected_profile(c.user_id, published), c
            # 2. A profile published now is used once a real-time batch has read the profiles again.
            changed = ProfileVersion("u4", 1, "ENTERPRISE", "SE", T0)
            publish_profile(changed)
            published["u4"] = [changed]
            n = 1000

            def u4_enriched_anew() -> bool:
                nonlocal n
                n += 1
                publish_clicks([click(n, "u4")])
                reader.poll()
                return reader.enriched.get(f"e{n:04d}", {}).get("segment") == "ENTERPRISE"

            wait_until(u4_enriched_anew, 120, "the lane never read the new profile of u4", interval_s=1.0)
            # 3. An undecodable click: a dead letter with its bytes, nothing else stops.
            produce_all(stack, clicks.name, [Outgoing(b"bad-1", b"\x01not avro")])
            wait_until(lambda: (reader.poll(), any(v == b"\x01not avro" for v, _ in reader.dead))[1], 120,
                       "the undecodable click never reached the dead letters")  # fmt: skip
            [(_, headers)] = [(v, h) for v, h in reader.dead if v == b"\x01not avro"]
            assert headers[H_KIND].decode() == DeadLetterKind.NOT_CONFLUENT_FRAMED.value
        except BaseException as exc:  # raised again in the test's own thread
            failures.append(exc)
        finally:
            os.kill(os.getpid(), signal.SIGTERM)  # as `kappa jobs stop` stops it

    driver = threading.Thread(target=drive, daemon=True)
    driver.start()
    try:
        report = run_job(job, settings)
    finally:
        driver.join(30)
        reader.close()
    if failures:
        raise failures[0]
    assert report.stopped_by_signal

    # 4. A replay (availableNow, as `kappa replay start` runs it) runs the same plan as micro-batches over the
    # whole log, with the profiles as published by then: every click once, each with its user's latest profile.
    replay_output = avro_topic("enriched-rt-replay", value_schema="enriched_clicks.avsc", partitions=2)
    apply(admin_client(stack), [late_events_of(replay_output)])
    replay = dataclasses.replace(job, output=replay_output)
    replayed = run_job(replay, settings.model_copy(update={"checkpoint_root": str(tmp_path / "cp-replay")}),
                       available_now=True)  # fmt: skip
    assert replayed.input_rows[replayed.output_query] == len(produced) + 1  # and the undecodable one
    rows = latest_per_key(spark, stack, replay_output).collect()
    assert {r.key: (r.profile_version, r.segment, r.country) for r in rows} == {
        c.event_id: expected_profile(c.user_id, published) for c in produced
    }
