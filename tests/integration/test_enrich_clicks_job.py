"""enrich_clicks on the real stack: small batches at two shuffle-partition counts and one availableNow run
both end, read as a compacted topic, at exactly the as-of answer over the whole log: as computed independently
in SQL (tests/oracles.py), and by the job's own rule (logic.py).

On the way, each run writes exactly the corrections its batches call for: a click is emitted with the answer
of the profile versions read up to the end of its batch, and re-emitted whenever a later batch brings a
version that changes it. The test reads which records each batch took from the run's offset log and computes
each batch's answers with tests/oracles.py. In the small-batch runs the log arrives in two parts, as a live
log grows, cut where late profile versions of the second part change answers of clicks of the first: those
clicks must be re-emitted (small batches alone read both topics at the same pace, and correct nothing here)."""

import dataclasses
import io
import itertools
import json
import zlib
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import fastavro
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.clickstream.generator import Click, ProfileVersion, StreamConfig, clickstream
from jobs.clickstream.produce import generate
from jobs.enrich_clicks.declaration import JOB, Settings
from jobs.enrich_clicks.logic import Profile, answer
from kappa.contracts.avro_serde import AvroEncoder
from kappa.contracts.dead_letter_format import H_SOURCE_PARTITION, DeadLetterKind
from kappa.contracts.registry import Registry, value_subject
from kappa.contracts.schema_files import load, topic_value_schema
from kappa.contracts.topic_declarations import MINUTE_MS, Topic, late_events_of
from kappa.core.errors import KappaError
from kappa.core.settings import KappaSettings
from kappa.kafka.clients import Outgoing, admin_client, produce_all
from kappa.kafka.topic_admin import apply
from kappa.ops import dlq
from kappa.runtime.runner import run_job
from kappa.spark.compacted import latest_per_key
from tests import oracles
from tests.integration.conftest import partitions_of

CONFIG = StreamConfig(events=3000, users=30, seed=23, profile_change_share=0.04, late_profile_share=0.5)
LATENESS_MS = JOB.settings_as(Settings).profile_lateness_minutes * MINUTE_MS
CUT = 1260  # the small-batch runs read the log up to this emission first, then the rest (see _corrected_by_cut)


def _expected(config: StreamConfig) -> dict[str, tuple[int | None, str, str | None, str]]:
    """event_id -> (profile_version, segment, country, page): the rule with every version known."""
    profiles: dict[str, list[Profile]] = {}
    clicks: list[Click] = []
    for emission in clickstream(config):
        r = emission.record
        if isinstance(r, ProfileVersion):
            version = Profile(r.profile_version, r.valid_from_ms, emission.log_time_ms, r.segment, r.country)
            profiles.setdefault(r.user_id, []).append(version)
        else:
            clicks.append(r)
    expected = {}
    for c in clicks:
        versions = sorted(profiles.get(c.user_id, []), key=lambda p: p.order)
        best = answer(c.event_time_ms, versions, LATENESS_MS)
        expected[c.event_id] = (
            best.profile_version if best else None,
            best.segment if best else "UNKNOWN",
            best.country if best else None,
            c.page,
        )
    return expected


def _independent(config: StreamConfig) -> dict[str, tuple[int | None, str, str | None, str]]:
    """The same answer from tests/oracles.py's SQL, which shares no code with the job."""
    return oracles.enrichment(*_oracle_inputs(config, slice(0, None)), LATENESS_MS)


def _oracle_inputs(
    config: StreamConfig, emissions: slice
) -> tuple[list[tuple[str, str, str, int]], list[tuple[str, int, int, int, str, str]]]:
    """That part of the log as tests/oracles.py's clicks and profile versions."""
    clicks, profiles = [], []
    for n, emission in enumerate(clickstream(config)):
        if n < (emissions.start or 0) or (emissions.stop is not None and n >= emissions.stop):
            continue
        r = emission.record
        if isinstance(r, ProfileVersion):
            profiles.append((r.user_id, r.profile_version, r.valid_from_ms, emission.log_time_ms, r.segment, r.country))
        else:
            clicks.append((r.event_id, r.user_id, r.page, r.event_time_ms))
    return clicks, profiles


def _corrected_by_cut(config: StreamConfig) -> set[str]:
    """The clicks before CUT whose answer a profile version after it changes: a run that has read the first part
    before the second arrives must re-emit them."""
    clicks, first = _oracle_inputs(config, slice(0, CUT))
    _later_clicks, later = _oracle_inputs(config, slice(CUT, None))
    before, after = (oracles.enrichment(clicks, versions, LATENESS_MS) for versions in (first, first + later))
    return {key for key in before if before[key][0] != after[key][0]}


def _batch_ends(checkpoint: Path) -> list[dict[tuple[str, int], int]]:
    """Per batch of the query, in order: (topic, partition) -> the offset it read up to (exclusive), from its
    offset log (`offsets/<n>`: a version line, a metadata line, then one JSON line per source)."""
    batches = sorted(int(f.name) for f in (checkpoint / "offsets").iterdir() if f.name.isdigit())
    assert batches == list(range(len(batches))), batches
    ends = []
    for batch in batches:
        end: dict[tuple[str, int], int] = {}
        for line in (checkpoint / "offsets" / str(batch)).read_text().splitlines()[2:]:
            for topic, partitions in json.loads(line).items():
                end |= {(topic, int(p)): int(o) for p, o in partitions.items()}
        ends.append(end)
    return ends


def _emissions(spark: SparkSession, stack: KappaSettings, checkpoint: Path, *inputs: Topic) -> Counter[str]:
    """event_id -> how many times the run must have written it: once when its batch reads it, with the answer
    of the profile versions read up to the end of that batch (a batch applies its versions before its clicks),
    then once more for every later batch whose versions change that answer. The inputs are read back from
    Kafka (what the job read, with positions and the versions' publish times) and decoded with fastavro."""
    ends = _batch_ends(checkpoint)

    def batch_of(topic: str, partition: int, offset: int) -> int:
        return next(n for n, end in enumerate(ends) if offset < end[(topic, partition)])

    clicks: list[tuple[int, tuple[str, str, str, int]]] = []  # (its batch, the oracle's click)
    profiles: list[tuple[int, tuple[str, int, int, int, str, str]]] = []  # (its batch, the oracle's version)
    for topic in inputs:
        schema = fastavro.parse_schema(load(stack.schemas_path / str(topic.value_schema)))
        rows = (
            spark.read.format("kafka").option("kafka.bootstrap.servers", stack.bootstrap)
            .option("subscribe", topic.name).load()
            .select("partition", "offset", "value", F.unix_millis("timestamp").alias("published"))
            .collect()
        )  # fmt: skip
        for r in rows:
            v = fastavro.schemaless_reader(io.BytesIO(bytes(r.value)[5:]), schema)  # after the 5-byte frame
            assert isinstance(v, dict)
            batch = batch_of(topic.name, r.partition, r.offset)
            if "event_id" in v:
                clicks.append((batch, (v["event_id"], v["user_id"], v["page"], _ms(v["event_time"]))))
            else:
                profiles.append((batch, (v["user_id"], v["profile_version"], _ms(v["valid_from"]), r.published,
                                         v["segment"], v["country"])))  # fmt: skip
    first = {click[0]: batch for batch, click in clicks}
    answers: dict[str, list[int | None]] = {}  # a click's profile_version after each batch from its own on
    for batch in sorted({b for b, _ in clicks} | {b for b, _ in profiles}):
        read = oracles.enrichment(
            [c for b, c in clicks if b <= batch], [p for b, p in profiles if b <= batch], LATENESS_MS
        )
        for event_id, (version, *_rest) in read.items():
            answers.setdefault(event_id, []).append(version)
    assert set(answers) == set(first)
    return Counter({e: 1 + sum(a != b for a, b in itertools.pairwise(seen)) for e, seen in answers.items()})


def _ms(t: object) -> int:
    assert isinstance(t, datetime)
    return int(t.timestamp() * 1000)


@pytest.fixture(scope="module")
def expected() -> dict[str, tuple[int | None, str, str | None, str]]:
    result = _independent(CONFIG)
    assert sum(1 for v in result.values() if v[0] is None) > 0  # some clicks come before any profile
    assert len({v[0] for v in result.values()}) > 3  # and profiles change over time
    assert _expected(CONFIG) == result  # the job's rule, over the whole log, says the same
    return result


@pytest.mark.slow
@pytest.mark.usefixtures("session_conf_restored")
@pytest.mark.parametrize(("shuffle_partitions", "max_offsets"), [(2, 250), (5, 400), (2, None)])
def test_enriched_clicks_equal_the_as_of_rule_over_the_whole_log(
    stack: KappaSettings,
    spark: SparkSession,
    avro_topic: Callable[..., Topic],
    tmp_path: Path,
    expected: dict[str, tuple[int | None, str, str | None, str]],
    shuffle_partitions: int,
    max_offsets: int | None,
) -> None:
    clicks = avro_topic("clicks", value_schema="clicks.avsc", partitions=3)
    profiles = avro_topic("profiles", value_schema="user_profiles.avsc", partitions=3)
    output = avro_topic("enriched", value_schema="enriched_clicks.avsc", partitions=3)
    late = late_events_of(output)
    apply(admin_client(stack), [late])
    parts = [slice(0, CUT), slice(CUT, None)] if max_offsets else [slice(0, None)]  # small batches: a live log
    settings = stack.model_copy(
        update={"checkpoint_root": str(tmp_path / "cp"), "delta_root": str(tmp_path / "d"),
                "spark_shuffle_partitions": shuffle_partitions}
    )  # fmt: skip
    job = dataclasses.replace(JOB, inputs=(clicks, profiles), output=output)
    produced, batches = 0, 0
    for part in parts:  # each part produced, then read to its end (the second run resumes from the checkpoint)
        produced += generate(stack, CONFIG, clicks, profiles, progress=None, emissions=part).clicks
        run = run_job(job, settings, available_now=True, max_offsets_per_trigger=max_offsets)
        batches += run.batches[f"enrich_clicks_v{JOB.version}"]
    assert produced == len(expected)
    if max_offsets:
        assert batches >= 4  # many small batches
    # The run really had that many partitions: its offset log says so, and its state store has them.
    checkpoint = tmp_path / "cp" / JOB.name / f"v{JOB.version}" / "output"
    assert partitions_of(checkpoint) == (shuffle_partitions, shuffle_partitions)

    rows = latest_per_key(spark, stack, output).collect()
    actual = {r.key: (r.profile_version, r.segment, r.country, r.page) for r in rows}
    assert actual == expected
    assert all(r.event_id == r.key for r in rows)
    # Every record written, per key: each click once, plus one correction per later batch that changed its answer.
    written = Counter(
        r.key for r in spark.read.format("kafka").option("kafka.bootstrap.servers", stack.bootstrap)
        .option("subscribe", output.name).load().select(F.col("key").cast("string").alias("key")).collect()
    )  # fmt: skip
    should = _emissions(spark, stack, checkpoint, clicks, profiles)
    corrected = {key for key, n in should.items() if n > 1}
    assert {key for key, n in written.items() if n > 1} == corrected  # the re-emitted clicks, exactly
    assert written == should
    if max_offsets:  # late versions of the second part reached clicks of the first, already written: corrected
        forced = _corrected_by_cut(CONFIG)
        assert forced, "the cut must leave late versions after clicks they change, or the test proves nothing"
        assert forced <= corrected
        assert sum(written.values()) > len(expected)
    # Versions published within the contract's lateness never count as late.
    assert (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", stack.bootstrap)
        .option("subscribe", late.name)
        .load()
        .count()
        == 0
    )


@pytest.mark.slow
def test_a_record_outside_its_users_partition_is_a_dead_letter_and_moves_no_clock(
    stack: KappaSettings, spark: SparkSession, avro_topic: Callable[..., Topic], tmp_path: Path
) -> None:
    """The operator keeps each partition's users and clock together, so a record another partitioner placed (not
    CRC-32 of its user id modulo the partition count) would split its user: it goes to its input's dead letters
    with its bytes, and neither joins nor stamps anything."""
    clicks = avro_topic("clicks", value_schema="clicks.avsc", partitions=3)
    profiles = avro_topic("profiles", value_schema="user_profiles.avsc", partitions=3)
    output = avro_topic("enriched", value_schema="enriched_clicks.avsc", partitions=3)
    apply(admin_client(stack), [late_events_of(output)])
    with Registry(stack.registry) as registry:
        encode = {t.name: AvroEncoder(registry, value_subject(t.name), topic_value_schema(stack.schemas_path, t)).encode
                  for t in (clicks, profiles)}  # fmt: skip
    home = {u: zlib.crc32(u.encode()) % 3 for u in ("ann", "bob")}  # independently of partition_for
    assert home == {"ann": 0, "bob": 2}  # bob's misplaced click goes to ann's partition, her version to bob's
    t0 = 1_767_225_600_000
    placed = [Click(f"{u}-{i}", u, "/p", None, t0 + 1000 * i) for i in range(4) for u in home]
    far_future = Click("bob-misplaced", "bob", "/p", None, t0 + 10**9)  # would move bob's partition's clock
    profile = ProfileVersion("ann", 7, "PRO", "DE", t0)
    records = [(clicks, c.event_id, c, home[c.user_id]) for c in placed[:4]]
    records += [(clicks, far_future.event_id, far_future, (home["bob"] + 1) % 3)]
    records += [(profiles, "ann", profile, (home["ann"] + 2) % 3)]
    records += [(clicks, c.event_id, c, home[c.user_id]) for c in placed[4:]]
    for topic, key, record, partition in records:
        produce_all(stack, topic.name, [Outgoing(key.encode(), encode[topic.name](record.as_avro()), partition)])
    settings = stack.model_copy(update={"checkpoint_root": str(tmp_path / "cp"), "delta_root": str(tmp_path / "d")})

    run_job(dataclasses.replace(JOB, inputs=(clicks, profiles), output=output), settings, available_now=True)

    rows = {r.key: r for r in latest_per_key(spark, stack, output).collect()}
    assert set(rows) == {c.event_id for c in placed}  # the misplaced click is not enriched
    assert {r.profile_version for r in rows.values()} == {None}  # the misplaced version applies to no one
    for user in home:  # each partition's clock over its placed clicks only: ann's later clicks see no far future
        mine = sorted((c for c in placed if c.user_id == user), key=lambda c: c.event_time_ms)
        stamps = [_ms(rows[c.event_id].partition_time_before) if rows[c.event_id].partition_time_before else None
                  for c in mine]  # fmt: skip
        assert {rows[c.event_id].clicks_partition for c in mine} == {home[user]}
        assert stamps == [None, *(c.event_time_ms for c in mine[:-1])]
    for topic, (key, partition) in ((clicks, ("bob-misplaced", (home["bob"] + 1) % 3)),
                                    (profiles, ("ann", (home["ann"] + 2) % 3))):  # fmt: skip
        report = dlq.inspect(stack, topic.name, samples=5)
        assert dict(report.by_kind) == {DeadLetterKind.PARTITION_MISMATCH: 1}
        [letter] = [d for samples in report.samples.values() for d in samples]
        assert (letter.key, int(letter.headers[H_SOURCE_PARTITION])) == (key.encode(), partition)
        user = "bob" if topic is clicks else "ann"
        assert dlq.describe(letter).endswith(
            f"partition {partition} is not the partition of user_id '{user}' ({home[user]} of 3, as the platform's "
            "producers place it)"
        )
        assert dlq.replay(stack, topic.name) == (0, 1)  # never re-injected: it would be set aside again
        with pytest.raises(KappaError, match="partition-mismatch letters cannot be replayed"):
            dlq.replay(stack, topic.name, kind=DeadLetterKind.PARTITION_MISMATCH)
