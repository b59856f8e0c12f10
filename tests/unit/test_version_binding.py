"""What a version is, as pure logic: the jobs a change reaches, a version bound to given input versions, its
recorded binding, and the refusal of a live version whose input moved under it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kappa.contracts.topic_declarations import Cleanup
from kappa.core.errors import KappaError
from kappa.core.settings import KappaSettings
from kappa.kafka.aliases import TOPIC_KIND, Alias
from kappa.lifecycle.cascade import reach
from kappa.lifecycle.lag import UnknownInputsError, lag
from kappa.runtime.binding import (
    REPLAY,
    VersionBinding,
    bind_inputs,
    bound_versions,
    made_versions_late_topics,
    read_topics,
    record_binding,
    recorded_binding,
    refuse_moved_inputs,
)
from kappa.runtime.discovery import discover


def alias(dataset: str, version: int) -> Alias:
    return Alias(dataset, TOPIC_KIND, "job", version, f"{dataset}.v{version}", None, "alice", 0, "test")


def test_a_change_reaches_every_job_that_reads_what_it_writes_in_pipeline_order() -> None:
    jobs = discover()
    # From the declarations: sessionize and page_stats read enriched_clicks; sessions_table and user_activity
    # read sessions. raw_clicks and the real-time lane read clicks only.
    # In pipeline order: each after the jobs that write its inputs, then by name.
    assert [j.name for j in reach(jobs, "enrich_clicks")] == [
        "enrich_clicks",
        "page_stats",
        "sessionize",
        "sessions_table",
        "user_activity",
    ]
    assert [j.name for j in reach(jobs, "sessionize")] == ["sessionize", "sessions_table", "user_activity"]
    assert [j.name for j in reach(jobs, "page_stats")] == ["page_stats"]
    # A lookup is read too: a job that looks up enriched_clicks is below it.
    lookup = replace(jobs["raw_clicks"], name="lookup_user", lookups=(jobs["sessionize"].inputs[0],))
    assert "lookup_user" in [j.name for j in reach({**jobs, "lookup_user": lookup}, "enrich_clicks")]


def test_a_version_reads_the_input_versions_it_is_bound_to() -> None:
    sessionize = discover()["sessionize"]
    bound = bind_inputs(sessionize, 3, {"enriched_clicks": 2})
    assert [t.name for t in bound.inputs] == ["enriched_clicks.v2"]
    assert bound.output.name == "sessions.v3"  # type: ignore[union-attr]
    assert bound_versions(bound) == {"enriched_clicks": 2}
    assert bound_versions(bind_inputs(discover()["enrich_clicks"], 2, {})) == {}  # sources: no versions


def test_every_version_made_gets_its_late_topic_from_topics_apply() -> None:
    jobs = discover()
    made = {"page_stats": [1, 3], "sessionize": [2], "retired_job": [9]}  # a job no longer declared: nothing
    topics = made_versions_late_topics(jobs, made)
    assert sorted(t.name for t in topics) == [
        "delta.page_stats.v1.late",
        "delta.page_stats.v3.late",
        "sessions.v2.late",
    ]
    assert {t.cleanup for t in topics} == {Cleanup.DELETE}


def test_a_binding_is_recorded_once(settings: KappaSettings) -> None:
    assert recorded_binding(settings, "sessionize", 7) is None
    first = VersionBinding(1, {"enriched_clicks": 2}, REPLAY)
    assert record_binding(settings, "sessionize", 7, first) == first
    # A later run that would bind other inputs keeps what the version is.
    assert record_binding(settings, "sessionize", 7, VersionBinding(1, {"enriched_clicks": 3})) == first
    assert recorded_binding(settings, "sessionize", 7) == first


def test_a_live_version_whose_input_moved_is_refused_with_the_replay(settings: KappaSettings) -> None:
    sessionize = discover()["sessionize"]
    reads_v1 = VersionBinding(1, {"enriched_clicks": 1})
    moved = {"enriched_clicks": alias("enriched_clicks", 2), "sessions": alias("sessions", 1)}
    with pytest.raises(KappaError, match=r"sessionize v1 is live and reads enriched_clicks v1 \(live: v2\)") as err:
        refuse_moved_inputs(settings, sessionize, 1, reads_v1, moved)
    assert "`kappa replay start sessionize`" in str(err.value)
    # Not live (an old version kept for a rollback): it reads what it was built on.
    refuse_moved_inputs(settings, sessionize, 1, reads_v1, moved | {"sessions": alias("sessions", 2)})
    # Live, and its input live too: nothing moved.
    refuse_moved_inputs(settings, sessionize, 1, reads_v1, moved | {"enriched_clicks": alias("enriched_clicks", 1)})


def test_a_binding_names_the_topics_its_version_reads(settings: KappaSettings) -> None:
    """An old version's lag is measured on what it reads, known from its binding without the code that declared
    it; a version nobody can tell that of has an unknown lag, never a lag of 0 (read as caught up)."""
    sessionize = discover()["sessionize"]
    made = VersionBinding.of(bind_inputs(sessionize, 8, {"enriched_clicks": 2}), 3, REPLAY)
    assert (made.inputs, made.reads) == ({"enriched_clicks": 2}, ("enriched_clicks.v2",))
    record_binding(settings, "sessionize", 8, made)
    assert recorded_binding(settings, "sessionize", 8).reads == ("enriched_clicks.v2",)  # type: ignore[union-attr]
    assert read_topics(settings, "sessionize", 8) == ["enriched_clicks.v2"]  # v3's code: not this checkout's

    record_binding(settings, "sessionize", 9, VersionBinding(3, {"enriched_clicks": 2}))  # recorded before reads
    with pytest.raises(KappaError, match="sessionize v9 runs the code of v3, but jobs/sessionize declares v1"):
        read_topics(settings, "sessionize", 9)
    with pytest.raises(UnknownInputsError, match="the lag of sessionize v9 is unknown"):
        lag(settings, "sessionize", 9)
