"""enrich_clicks on the real stack: small batches at two shuffle-partition counts and one availableNow run
both end, read as a compacted topic, at exactly the as-of answer over the whole log: as computed independently
in SQL (tests/oracles.py), and by the job's own rule (logic.py)."""

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from jobs.enrich_clicks.declaration import JOB
from jobs.enrich_clicks.logic import MINUTE_MS, Profile, answer
from kappa.contracts.topic_declarations import Topic, late_events_of
from kappa.core.settings import KappaSettings
from kappa.kafka.clients import admin_client
from kappa.kafka.topic_admin import apply
from kappa.ops.clickstream import Click, ProfileVersion, StreamConfig, clickstream
from kappa.ops.produce_clickstream import generate
from kappa.runtime.runner import run_job
from kappa.spark.compacted import latest_per_key
from tests import oracles
from tests.integration.conftest import partitions_of

CONFIG = StreamConfig(events=3000, users=30, seed=23, profile_change_share=0.04, late_profile_share=0.5)
LATENESS_MS = JOB.settings["profile_lateness_minutes"] * MINUTE_MS


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
    clicks, profiles = [], []
    for emission in clickstream(config):
        r = emission.record
        if isinstance(r, ProfileVersion):
            profiles.append((r.user_id, r.profile_version, r.valid_from_ms, emission.log_time_ms, r.segment, r.country))
        else:
            clicks.append((r.event_id, r.user_id, r.page, r.event_time_ms))
    return oracles.enrichment(clicks, profiles, LATENESS_MS)


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
    report = generate(stack, CONFIG, clicks, profiles, progress=None)
    assert report.clicks == len(expected)

    settings = stack.model_copy(
        update={"checkpoint_root": str(tmp_path / "cp"), "delta_root": str(tmp_path / "d"),
                "spark_shuffle_partitions": shuffle_partitions}
    )  # fmt: skip
    job = dataclasses.replace(JOB, inputs=(clicks, profiles), output=output)
    run = run_job(job, settings, available_now=True, max_offsets_per_trigger=max_offsets)
    if max_offsets:
        assert run.batches[f"enrich_clicks_v{JOB.version}"] >= 4  # many small batches, corrections between them
    # The run really had that many partitions: its offset log says so, and its state store has them.
    checkpoint = tmp_path / "cp" / JOB.name / f"v{JOB.version}" / "output"
    assert partitions_of(checkpoint) == (shuffle_partitions, shuffle_partitions)

    rows = latest_per_key(spark, stack, output).collect()
    actual = {r.key: (r.profile_version, r.segment, r.country, r.page) for r in rows}
    assert actual == expected
    assert all(r.event_id == r.key for r in rows)
    # Versions published within the contract's lateness never count as late.
    assert (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", stack.bootstrap)
        .option("subscribe", late.name)
        .load()
        .count()
        == 0
    )
