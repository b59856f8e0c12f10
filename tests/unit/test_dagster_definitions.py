"""The Dagster code location loads, and its asset graph is exactly what the job declarations say."""

import dataclasses

import pytest
from dagster import AssetKey, Definitions

from dagster_project.assets import output_key, topic_key
from dagster_project.definitions import build_definitions, defs
from dagster_project.resources import KappaResource
from jobs.catalog import CLICKS, ENRICHED_CLICKS, PROFILE_REPLAY_WINDOW_MS, USER_PROFILES
from kappa.cli.main import main
from kappa.contracts.topic_declarations import Cleanup, Topic
from kappa.runtime.declaration import JobSpec
from kappa.runtime.discovery import discover, load_catalog
from kappa.runtime.outputs import DeltaTable
from kappa.runtime.pipes import batch_message, report_metadata
from kappa.runtime.runner import RunReport

JOBS = discover()


def _never_planned(_ctx: object) -> None:
    raise AssertionError("the definitions must never start a job")


def test_the_code_location_loads_and_validates() -> None:
    Definitions.validate_loadable(defs)
    jobs = defs.get_repository_def().get_all_jobs()
    assert jobs, "the implicit asset job is there"
    assert len(JOBS) >= 3  # raw_clicks, enrich_clicks, sessionize at least: the graph below is not vacuous


def test_the_code_location_loads_with_settings_for_another_stack() -> None:
    kappa = KappaResource(overrides={"KAPPA_KAFKA_PORT": "29092", "KAPPA_REGISTRY_PORT": "28081"})
    located = build_definitions(kappa=kappa)
    Definitions.validate_loadable(located)
    assert located.resolve_implicit_global_asset_job_def().name == "__ASSET_JOB"
    assert kappa.settings().bootstrap == "127.0.0.1:29092"
    assert kappa.subprocess_env()["KAPPA_REGISTRY_PORT"] == "28081"
    with pytest.raises(ValueError, match="KAPPA_\\* variables only"):
        KappaResource(overrides={"KAFKA_PORT": "1"}).settings()


def test_every_job_output_is_an_asset_with_its_version_and_its_inputs_as_deps() -> None:
    graph = defs.resolve_asset_graph()
    for job in JOBS.values():
        node = graph.get(output_key(job))
        assert node.is_materializable, job.name
        assert node.code_version == str(job.version), job.name
        # what it streams and what it reads as a lookup table
        assert node.parent_keys == {topic_key(t.name) for t in (*job.inputs, *job.lookups)}, job.name
        assert node.group_name == "jobs"
        assert job.description in (node.description or "")


def test_source_topics_are_external_assets_and_nothing_is_undeclared() -> None:
    graph = defs.resolve_asset_graph()
    outputs = {output_key(j) for j in JOBS.values()}
    read = {topic_key(t.name) for j in JOBS.values() for t in (*j.inputs, *j.lookups)}
    # Sources: read by a job, written by none.
    assert read - outputs == {topic_key(CLICKS.name), topic_key(USER_PROFILES.name)}
    assert graph.external_asset_keys == read - outputs
    assert graph.materializable_asset_keys == outputs
    # Every asset is a job output or a declared topic; side topics (dead letters, late events) are left out.
    declared = {topic_key(t.name) for t in load_catalog()} | read | outputs
    assert graph.get_all_asset_keys() <= declared
    assert not any(k.path[-1].endswith((".dlq", ".late")) for k in graph.get_all_asset_keys())


def test_static_metadata_comes_from_the_topic_declarations() -> None:
    graph = defs.resolve_asset_graph()
    profiles = graph.get(topic_key(USER_PROFILES.name)).metadata
    assert profiles["partitions"] == USER_PROFILES.partitions
    assert profiles["cleanup_policy"] == "compact"
    assert profiles["min_compaction_lag_ms"] == PROFILE_REPLAY_WINDOW_MS
    assert profiles["replay_window"].startswith("every version for 30 days")
    enriched = graph.get(topic_key(ENRICHED_CLICKS.name)).metadata
    assert enriched["job"] == "enrich_clicks"
    assert enriched["job_version"] == JOBS["enrich_clicks"].version
    assert enriched["value_schema"].path == "schemas/enriched_clicks.avsc"
    assert enriched["retention_ms"] == -1
    version = JOBS["enrich_clicks"].version
    assert f"jobs run enrich_clicks --version {version} --available-now --pipes" in enriched["catch_up_command"]


def test_a_new_job_appears_with_nothing_else_wired() -> None:
    """A job folder added later (here: a fake declaration) becomes an asset with its lineage and version."""
    new_source = Topic("page_catalog", partitions=2, cleanup=Cleanup.COMPACT, value_schema="page.avsc")
    fake = JobSpec(
        name="bounce_rates",
        version=3,
        description="Share of sessions that leave after one page, per page.",
        inputs=(ENRICHED_CLICKS, new_source),
        output=DeltaTable("bounce_rates", doc="One row per page."),
        plan=_never_planned,  # type: ignore[arg-type]
    )
    graph = build_definitions({**JOBS, fake.name: fake}).resolve_asset_graph()
    node = graph.get(AssetKey(["delta", "bounce_rates"]))
    assert node.code_version == "3"
    assert node.parent_keys == {topic_key("enriched_clicks"), topic_key("page_catalog")}
    assert node.metadata["path"] == "<delta_root>/bounce_rates/v3"
    assert graph.get(topic_key("page_catalog")).is_external  # read by a job, declared by none: a source
    assert graph.get_all_asset_keys() == defs.resolve_asset_graph().get_all_asset_keys() | {
        AssetKey(["delta", "bounce_rates"]),
        topic_key("page_catalog"),
    }

    # A version bump is a new code version, nothing else.
    bumped = dataclasses.replace(fake, version=4)
    graph = build_definitions({**JOBS, fake.name: bumped}).resolve_asset_graph()
    assert graph.get(AssetKey(["delta", "bounce_rates"])).code_version == "4"


def test_two_jobs_writing_one_output_are_refused() -> None:
    twin = dataclasses.replace(JOBS["enrich_clicks"], name="enrich_clicks_twin")
    with pytest.raises(ValueError, match="both declare the output kafka/enriched_clicks"):
        build_definitions({**JOBS, twin.name: twin})


def test_pipes_flag_outside_dagster_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("DAGSTER_PIPES_CONTEXT", raising=False)
    assert main(["jobs", "run", "raw_clicks", "--available-now", "--pipes"]) == 2
    assert "not launched by Dagster Pipes" in capsys.readouterr().err


def test_the_run_report_becomes_metadata_of_the_output_query() -> None:
    report = RunReport(
        job="enrich_clicks",
        version=2,
        seconds=4.0,
        batches={"enrich_clicks_v2": 3},
        input_rows={"enrich_clicks_v2": 1000},
        stopped_by_signal=False,
        output_query="enrich_clicks_v2",
    )
    metadata = report_metadata(report)
    assert (metadata["batches"], metadata["input_rows"], metadata["rows_per_second"]) == (3, 1000, 250.0)
    assert metadata["queries"]["raw_value"] == {"enrich_clicks_v2": {"batches": 3, "input_rows": 1000}}
    progress = {"name": "enrich_clicks_v2", "batchId": 4, "numInputRows": 12, "durationMs": {"triggerExecution": 90}}
    message = batch_message(progress)
    assert (message["kind"], message["batch_id"], message["input_rows"], message["duration_ms"]) == (
        "kappa.batch",
        4,
        12,
        90,
    )
