"""The replay jobs and checks of the code location: one set per job, launchable with `{version, from, by}`, the
steps in the protocol's order, and the verification report as blocking checks that stop a failed version
before it goes live. (The steps themselves call kappa.lifecycle.protocol, the catch-up through `kappa replay
start`: tests/e2e/test_replay_lifecycle.py launches replay_enrich_clicks from the Dagster UI.)"""

import json
from typing import Any

import pytest
from dagster import (
    AssetKey,
    DagsterInstance,
    DagsterInvalidConfigError,
    In,
    Nothing,
    graph,
    in_process_executor,
    op,
    validate_run_config,
)
from dagster._core.events import DagsterEventType

from dagster_project.assets import output_key
from dagster_project.definitions import build_definitions, defs
from dagster_project.replay import replay_definitions
from dagster_project.replay_checks import (
    QUALITY_CHECK,
    RECONCILIATION_CHECK,
    check_evaluations,
    evaluations_from_audit,
    verification,
)
from kappa.kafka.aliases import Alias, Step
from kappa.runtime.binding import dataset_of
from kappa.runtime.discovery import discover

JOBS = discover()

PASSED: dict[str, Any] = {
    "passed": True,
    "quality": {"suite": None, "note": "no expectation suite kept for enriched_clicks"},
    "reconciliation": {
        "against": "v1",
        "keys": ["key"],
        "rows_new": 2000,
        "rows_live": 2000,
        "only_in_new": 0,
        "only_in_live": 0,
        "changed": 17,
        "samples": {"only_in_new": [], "only_in_live": [], "changed": [{"key": "evt-1", "segment": {"live": "A"}}]},
    },
    "problems": [],
}
MISSING_KEYS: dict[str, Any] = PASSED | {
    "passed": False,
    "reconciliation": PASSED["reconciliation"] | {"only_in_live": 3, "rows_new": 1997},
    "problems": ["3 key(s) of the live v1 are missing from v2 (samples in the report)"],
}
SUITE_FAILED: dict[str, Any] = PASSED | {
    "passed": False,
    "quality": {"suite": "enriched_clicks", "success": False, "failed": ["expect_column_values_to_not_be_null"]},
    "problems": ["the quality suite enriched_clicks failed"],
}


def test_every_job_gets_replay_rollback_and_retire_jobs() -> None:
    names = {j.name for j in defs.get_repository_def().get_all_jobs()}
    assert len(JOBS) >= 3
    for job in JOBS.values():
        assert {f"replay_{job.name}", f"rollback_{job.name}", f"retire_{job.name}"} <= names, job.name
    assert len(replay_definitions(JOBS)) == 3 * len(JOBS)


def test_replay_steps_follow_the_protocol() -> None:
    job = defs.get_job_def("replay_enrich_clicks")
    upstream = {
        (node.name, name): dep.node
        for node, inputs in job.graph.dependencies.items()
        for name, dep in inputs.items()  # type: ignore[union-attr]
    }
    assert upstream == {
        ("verification", "report"): "catch_up",
        ("go_live", "verified"): "verification",
        ("cutover", "live"): "go_live",
    }


def test_launchpad_config_is_version_from_by_with_the_declared_defaults() -> None:
    for job in JOBS.values():
        replay = defs.get_job_def(f"replay_{job.name}")
        ops = validate_run_config(replay, {})["ops"]  # nothing typed in the Launchpad: the defaults
        assert ops["catch_up"]["config"] | {"asset_key": None} == {
            "job": job.name,
            "asset_key": None,
            "version": job.version,
            "from": "earliest",
            "by": "",
            "max_offsets_per_trigger": None,
            "downstream": False,
        }
        assert AssetKey(ops["verification"]["config"]["asset_key"]) == output_key(job)
        assert ops["cutover"]["config"]["dataset"] == dataset_of(job)

    typed = validate_run_config(
        defs.get_job_def("replay_enrich_clicks"), {"version": 3, "from": "2026-11-01T00:00:00Z", "by": "alice"}
    )["ops"]
    assert typed["catch_up"]["config"]["from"] == "2026-11-01T00:00:00Z"
    assert {typed[step]["config"]["version"] for step in ("catch_up", "go_live", "cutover")} == {3}
    assert {typed[step]["config"]["by"] for step in ("catch_up", "go_live", "cutover")} == {"alice"}
    cascade = validate_run_config(defs.get_job_def("replay_enrich_clicks"), {"downstream": True})["ops"]
    assert {cascade[step]["config"]["downstream"] for step in ("catch_up", "go_live", "cutover")} == {True}
    with pytest.raises(DagsterInvalidConfigError):
        validate_run_config(defs.get_job_def("replay_enrich_clicks"), {"version": "two"})
    with pytest.raises(DagsterInvalidConfigError, match="version"):
        validate_run_config(defs.get_job_def("retire_enrich_clicks"), {"by": "alice"})  # which version: required
    rollback = validate_run_config(defs.get_job_def("rollback_enrich_clicks"), {"by": "bob"})["ops"]["rollback"]
    assert rollback["config"]["by"] == "bob"


def test_each_output_asset_has_two_blocking_replay_checks() -> None:
    graph_ = build_definitions().resolve_asset_graph()
    for job in JOBS.values():
        for name in (QUALITY_CHECK, RECONCILIATION_CHECK):
            spec = graph_.get_check_spec(
                next(k for k in graph_.asset_check_keys if k.name == name and k.asset_key == output_key(job))
            )
            assert spec.blocking, (job.name, name)


def test_check_results_follow_the_report() -> None:
    ok = check_evaluations(PASSED)
    assert {name: passed for name, (passed, _, _) in ok.items()} == {QUALITY_CHECK: True, RECONCILIATION_CHECK: True}
    _, text, metadata = ok[RECONCILIATION_CHECK]
    assert "17 changed" in text
    assert metadata["changed"] == 17
    assert metadata["samples"].data["changed"][0]["key"] == "evt-1"

    missing = check_evaluations(MISSING_KEYS)
    assert (missing[QUALITY_CHECK][0], missing[RECONCILIATION_CHECK][0]) == (True, False)
    assert "3 only in live" in missing[RECONCILIATION_CHECK][1]

    suite = check_evaluations(SUITE_FAILED)
    assert (suite[QUALITY_CHECK][0], suite[RECONCILIATION_CHECK][0]) == (False, True)
    assert suite[QUALITY_CHECK][2]["failed"].data == ["expect_column_values_to_not_be_null"]

    # A report that failed for a reason neither part names still fails a check: never both green on a failure.
    other = check_evaluations(PASSED | {"passed": False, "problems": ["the output topic is missing"]})
    assert not all(passed for passed, _, _ in other.values())


def _gate(report: dict[str, Any]) -> tuple[bool, list[str], dict[str, bool]]:
    """Run the verification step on `report` in a real (in-process) Dagster run, with a step after it."""
    ran: list[str] = []

    @op(name="reported")
    def reported() -> dict[str, Any]:
        return report | {"version": 2}

    @op(name="after_verification", ins={"verified": In(Nothing)})
    def after() -> None:
        ran.append("after")

    @graph(name="gate")
    def gate() -> None:
        after(verified=verification(reported()))

    config = {"job": "enrich_clicks", "asset_key": ["kafka", "enriched_clicks"]}
    instance = DagsterInstance.ephemeral()
    result = gate.to_job(executor_def=in_process_executor).execute_in_process(
        instance=instance, run_config={"ops": {"verification": {"config": config}}}, raise_on_error=False
    )
    # From the instance's event log: a failed step's logged evaluations are not in the result's own events.
    logged = instance.all_logs(result.run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION)
    evaluations = [entry.dagster_event.asset_check_evaluation_data for entry in logged if entry.dagster_event]
    gated.clear()
    gated.extend((e.asset_key, e.check_name, e.passed) for e in evaluations)
    return result.success, ran, {e.check_name: e.passed for e in evaluations}


gated: list[tuple[AssetKey, str, bool]] = []  # every evaluation of the last _gate, with its asset


def test_a_failed_check_blocks_what_comes_after() -> None:
    success, ran, checks = _gate(MISSING_KEYS)
    assert not success
    assert ran == []  # go-live and cutover never start
    assert checks == {QUALITY_CHECK: True, RECONCILIATION_CHECK: False}

    success, ran, checks = _gate(PASSED)
    assert success
    assert ran == ["after"]
    assert checks == {QUALITY_CHECK: True, RECONCILIATION_CHECK: True}


def test_a_cascade_reports_each_members_checks_on_its_asset_and_one_failure_blocks_the_set() -> None:
    sessionize = JOBS["sessionize"]
    members = [PASSED | {"job": "enrich_clicks", "version": 2}, MISSING_KEYS | {"job": "sessionize", "version": 2}]
    success, ran, _ = _gate(members[0] | {"set": members, "passed": False})
    assert not success
    assert ran == []  # nothing of the set goes live
    assert sorted(gated) == sorted(
        [
            (AssetKey(["kafka", "enriched_clicks"]), QUALITY_CHECK, True),
            (AssetKey(["kafka", "enriched_clicks"]), RECONCILIATION_CHECK, True),
            (output_key(sessionize), QUALITY_CHECK, True),
            (output_key(sessionize), RECONCILIATION_CHECK, False),
        ]
    )
    passed = [PASSED | {"job": "enrich_clicks", "version": 2}, PASSED | {"job": "sessionize", "version": 2}]
    success, ran, _ = _gate(passed[0] | {"set": passed, "passed": True})
    assert success
    assert ran == ["after"]


def _verify_step(version: int, outcome: str, details: dict[str, Any], dataset: str) -> Step:
    facts = details | {"dataset": dataset}
    return Step("enrich_clicks", "verify", 1, version, outcome, "alice", 1_700_000_000_000, json.dumps(facts))


def test_checks_on_their_own_read_the_latest_verification_of_the_declared_version() -> None:
    job = JOBS["enrich_clicks"]
    dataset = dataset_of(job)
    live = Alias(dataset, "topic", job.name, job.version, "enriched_clicks", None, "bob", 1, "first deployment")

    def passed(steps: list[Step], live: Alias | None) -> dict[str, bool]:
        return {name: ok for name, (ok, _, _) in evaluations_from_audit(job, steps, live).items()}

    both = {QUALITY_CHECK: True, RECONCILIATION_CHECK: True}
    neither = {QUALITY_CHECK: False, RECONCILIATION_CHECK: False}
    # Live as the first deployment, never replayed: nothing to reconcile.
    assert passed([], live) == both
    # Neither live nor verified: launch the replay first.
    assert passed([], None) == neither
    # The latest verify step of this version and dataset decides; others are ignored.
    failed = _verify_step(job.version, "failed", MISSING_KEYS, dataset)
    ok = _verify_step(job.version, "ok", PASSED, dataset)
    other_version = _verify_step(job.version + 1, "failed", MISSING_KEYS, dataset)
    other_dataset = _verify_step(job.version, "failed", MISSING_KEYS, "another_dataset")
    assert passed([failed, ok, other_version, other_dataset], None) == both
    assert passed([ok, failed], None) == {QUALITY_CHECK: True, RECONCILIATION_CHECK: False}
    # A verification that crashed left no report: it passes neither check, even for a live version.
    crashed = _verify_step(job.version, "failed", {"error": "Kafka did not answer"}, dataset)
    found = evaluations_from_audit(job, [ok, crashed], live)
    assert {name: ok for name, (ok, _, _) in found.items()} == neither
    assert "did not complete: Kafka did not answer" in found[QUALITY_CHECK][1]
