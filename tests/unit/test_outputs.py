"""The output kinds behind one interface (kappa.runtime.outputs): what the runtime, the replay, the CLI and Dagster
ask of a topic and of a Delta table, each answered in one place."""

from __future__ import annotations

from pathlib import Path

import pytest

from kappa.contracts.topic_declarations import Cleanup, Topic
from kappa.core.settings import load_settings
from kappa.kafka.aliases import DELTA_KIND, TOPIC_KIND
from kappa.runtime.outputs import DeltaOutput, DeltaTable, TableWrite, TopicOutput, output_kind, output_of

ENRICHED = Topic("enriched_clicks", partitions=3, cleanup=Cleanup.COMPACT, doc="A click with its profile.")
STATS = DeltaTable("page_stats", doc="Per page and hour.", keys=("page", "hour"), write=TableWrite.UPSERT)


def test_a_topic_is_versioned_by_name_and_read_by_its_kafka_key(tmp_path: Path) -> None:
    settings = load_settings(delta_root=str(tmp_path / "delta"))
    output = output_of(ENRICHED)
    assert isinstance(output, TopicOutput)
    assert output.topic == ENRICHED
    assert output.delta_table is None
    assert (output.kind, output.alias_kind, output.label) == ("topic", TOPIC_KIND, "topic:enriched_clicks")
    assert output.versioned(3) == ENRICHED.versioned(3)
    assert output.location(settings, 3) == "enriched_clicks.v3"
    # A version's bound topic keeps its dataset: its alias name and suite are the dataset's.
    bound = output_of(output.versioned(3))
    assert (bound.dataset, bound.suite) == ("enriched_clicks", "enriched_clicks")
    assert [t.name for t in bound.topics(3)] == ["enriched_clicks.v3", "enriched_clicks.v3.late"]
    assert output.bound({"enriched_clicks": "test_enriched"}) == Topic(
        "test_enriched", partitions=3, cleanup=Cleanup.COMPACT, doc="A click with its profile."
    )
    assert output.row_keys(["key", "user_id"]) == ["key"]
    assert output.asset_path == ("kafka", "enriched_clicks")
    assert output.doc == "A click with its profile."


def test_a_delta_table_is_versioned_by_path_and_read_by_its_declared_keys(tmp_path: Path) -> None:
    settings = load_settings(delta_root=str(tmp_path / "delta"))
    output = output_of(STATS)
    assert isinstance(output, DeltaOutput)
    assert output.delta_table == STATS
    assert output.topic is None
    assert (output.kind, output.alias_kind, output.label) == ("Delta table", DELTA_KIND, "delta:page_stats")
    assert (output.dataset, output.suite) == ("delta:page_stats", "page_stats")
    assert output.versioned(2) == STATS
    assert output.bound({"page_stats": "other"}) == STATS
    assert output.location(settings, 2) == f"{tmp_path}/delta/page_stats/v2"
    # Its late records' topic is named after the table and version, apart from any topic `page_stats`'s.
    assert [t.name for t in output.topics(2)] == ["delta.page_stats.v2.late"]
    assert output.late_events(2).cleanup is Cleanup.DELETE  # kept for its retention, like every side topic
    assert output.row_keys(["page", "hour", "views"]) == ["page", "hour"]
    assert output_of(DeltaTable("raw")).row_keys(["a", "b"]) == ["a", "b"]  # no keys declared: every column
    assert output.asset_path == ("delta", "page_stats")
    assert output.metadata(2) == {"table": "page_stats", "path": "<delta_root>/page_stats/v2"}


def test_a_table_exists_once_a_commit_made_its_log(tmp_path: Path) -> None:
    settings = load_settings(delta_root=str(tmp_path / "delta"))
    output = output_of(STATS)
    assert not output.exists(settings, 1)
    (tmp_path / "delta" / "page_stats" / "v1" / "_delta_log").mkdir(parents=True)
    assert output.exists(settings, 1)  # its deletion, with its late topic: the late records' integration test


def test_only_a_declared_kind_is_an_output() -> None:
    assert output_kind(Topic) is TopicOutput
    assert output_kind(DeltaTable) is DeltaOutput
    with pytest.raises(TypeError, match="str is no output kind: a job writes one of Topic, DeltaTable"):
        output_kind(str)
