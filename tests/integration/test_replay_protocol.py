"""The replay protocol driven through its library alone (kappa.lifecycle.protocol, no CLI, as Dagster calls it):
a change of enrich_clicks replayed as a cascade with sessionize below it (check, prepare, catch-up, verify),
gone live, cut over as a set and rolled back, and every step of each member in the audit trail, in order.

It runs on its own copy of the pipeline (replay_pipeline.py), small: 400 events, the two topic jobs (the
views are never deployed in the copy, so the cascade leaves them out). The CLI and Dagster flows over the
same library are tests/e2e/test_replay_lifecycle.py and tests/e2e/test_cascade_replay.py."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kappa.core.settings import KappaSettings
from kappa.kafka.aliases import AliasRegistry, now_ms
from kappa.lifecycle import deployments, protocol
from kappa.lifecycle.model import ReplayRefusedError
from kappa.runtime.declaration import Starting
from tests.integration.replay_pipeline import Deployment, deploy_copy, produce
from tests.waiting import wait_until

JOBS = {"enrich_clicks": "enriched_clicks", "sessionize": "sessions"}  # job -> the dataset it writes
SHORT = {"KAPPA_SPARK_SHUFFLE_PARTITIONS": "1"}  # one state store per stateful batch: the test's size


@pytest.fixture
def copies(stack: KappaSettings, tmp_path: Path, unique_name: Callable[[str], str]) -> Iterator[list[Deployment]]:
    """The pipeline's copy (its views' tables its own: never deployed here), and the deployments it starts
    stopped at the end."""
    d = deploy_copy(stack, tmp_path / "v1", unique_name("rp") + "_", env=SHORT, tables=True)
    made = [d]
    yield made
    settings = d.settings(stack)
    for state in deployments.status(settings):
        deployments.stop_if_running(settings, state.deployment.job, state.deployment.version, timeout_s=30)


def _live(stack: KappaSettings, prefix: str) -> dict[str, int | None]:
    aliases = AliasRegistry(stack).all()
    return {job: a.version if (a := aliases.get(prefix + ds)) else None for job, ds in JOBS.items()}


@pytest.mark.slow
@pytest.mark.usefixtures("session_conf_restored")
def test_a_cascade_cutover_and_rollback_through_the_library_leave_every_step_in_the_audit_trail(
    stack: KappaSettings, tmp_path: Path, copies: list[Deployment]
) -> None:
    [v1] = copies
    settings = v1.settings(stack)
    produce(stack, v1, slice(0, 400))
    with v1.imported():  # the first versions go live as they first run
        for job in JOBS:
            deployments.start(settings, job, 1, env=v1.env)
        wait_until(lambda: _live(stack, v1.prefix) == dict.fromkeys(JOBS, 1), 300, "the first versions live")
    # Not waited for to read everything: a replay compares with the live output as it was when the catch-up
    # started, and a cutover allows `cutover_max_lag` (10,000 records, more than this test has).

    # The change, in a second copy of the code: v2 counts trial users as free; sessionize is not edited.
    v2 = v1.copy(tmp_path / "v2")
    v2.edit("enrich_clicks/declaration.py", "version=1,", "version=2,")
    v2.edit(
        "enrich_clicks/declaration.py",
        "topics), lateness_ms, disorder_ms)",
        "topics), lateness_ms, disorder_ms).withColumn(\n"
        '        "segment", F.when(F.col("segment") == "TRIAL", "FREE").otherwise(F.col("segment"))\n'
        "    )",
    )
    began = now_ms()
    with v2.imported():
        events = list(protocol.start(settings, "enrich_clicks", downstream=True, starting=Starting(), by="lib"))
        verified = [e for e in events if isinstance(e, protocol.Verified)]
        assert [(e.replay.job.name, e.replay.version, e.verification.passed) for e in verified] == [
            ("enrich_clicks", 2, True),
            ("sessionize", 2, True),
        ], [e.verification.problems for e in verified]
        assert dict(verified[1].replay.input_versions) == {v2.prefix + "enriched_clicks": 2}
        # What a caller in another process (Dagster) reads of that start: the same, from the audit trail.
        outcome = protocol.start_outcome(settings, [e.replay for e in verified], began)
        assert outcome.passed
        assert [(r["job"], r["version"]) for r in outcome.reports] == [("enrich_clicks", 2), ("sessionize", 2)]

        went = list(protocol.golive(settings, "enrich_clicks", downstream=True, by="lib", env=v2.env))
        assert [(w.replay.job.name, w.replay.version, w.already_running) for w in went] == [
            ("enrich_clicks", 2, False),
            ("sessionize", 2, False),
        ]
        moved = protocol.cutover(settings, "enrich_clicks", downstream=True, by="lib")
        assert moved.is_set
        assert sorted((a.job, a.previous_version, a.version) for a in moved.aliases) == [
            ("enrich_clicks", 1, 2),
            ("sessionize", 1, 2),
        ]
        assert _live(stack, v1.prefix) == dict.fromkeys(JOBS, 2)

        # A cutover refused is recorded as such, and moves nothing.
        with pytest.raises(ReplayRefusedError, match="already points at v2"):
            protocol.cutover(settings, "enrich_clicks", version=2, by="lib")

        back = protocol.rollback(settings, "enrich_clicks", downstream=True, by="lib")
        assert sorted((a.job, a.previous_version, a.version) for a in back.aliases) == [
            ("enrich_clicks", 2, 1),
            ("sessionize", 2, 1),
        ]
        assert _live(stack, v1.prefix) == dict.fromkeys(JOBS, 1)

    # The audit trail: every step of each member, in the protocol's order, by whom, from and to.
    registry = AliasRegistry(stack)
    for job, dataset in JOBS.items():
        steps = [
            (s.step, s.outcome, s.from_version, s.to_version, s.by)
            for s in registry.steps(job)
            if s.at >= began and s.facts.get("dataset") == v1.prefix + dataset
        ]
        expected = [
            ("check", "ok", 1, 2, "lib"),
            ("prepare", "ok", 1, 2, "lib"),
            ("catch-up", "ok", 1, 2, "lib"),
            ("verify", "ok", 1, 2, "lib"),
            ("go-live", "ok", 1, 2, "lib"),
            ("cutover", "ok", 1, 2, "lib"),
            *([("cutover", "refused", 2, 2, "lib")] if job == "enrich_clicks" else []),
            ("rollback", "ok", 2, 1, "lib"),
        ]
        assert steps == expected, (job, steps)
