import sys
from pathlib import Path

import pytest

from jobs.catalog import PROFILE_REPLAY_WINDOW_MS, USER_PROFILES
from kappa.contracts.topic_declarations import FOREVER, Cleanup, Topic
from kappa.core.errors import KappaError
from kappa.kafka.aliases import CONTROL_TOPICS
from kappa.kafka.topic_admin import TopicState
from kappa.runtime.discovery import discover, find_catalog, load_catalog


def test_compacted_entity_topic_promises_its_replay_window() -> None:
    configs = USER_PROFILES.configs(brokers=1)
    assert configs["cleanup.policy"] == "compact"
    assert configs["min.compaction.lag.ms"] == str(PROFILE_REPLAY_WINDOW_MS)
    assert configs["retention.ms"] == str(FOREVER)


def test_replication_and_min_isr_follow_the_cluster_size() -> None:
    topic = Topic("t", partitions=3, cleanup=Cleanup.DELETE)
    assert topic.replication(brokers=1) == 1
    assert topic.configs(brokers=1)["min.insync.replicas"] == "1"
    assert topic.replication(brokers=5) == 3
    assert topic.configs(brokers=5)["min.insync.replicas"] == "2"
    assert "min.compaction.lag.ms" not in topic.configs(brokers=1)


def test_drift_lists_only_differing_configs() -> None:
    topic = Topic("t", partitions=1, cleanup=Cleanup.COMPACT, min_compaction_lag_ms=1000)
    actual = {**topic.configs(brokers=1), "cleanup.policy": "delete", "segment.ms": "1"}
    drift = TopicState(topic, 1, 1, actual).config_drift(brokers=1)
    assert drift == {"cleanup.policy": ("delete", "compact")}


def test_bad_declarations_are_rejected() -> None:
    with pytest.raises(KappaError, match="partitions must be >= 1"):
        Topic("t", partitions=0, cleanup=Cleanup.DELETE)
    with pytest.raises(KappaError, match="only applies to compacted topics"):
        Topic("t", partitions=1, cleanup=Cleanup.DELETE, min_compaction_lag_ms=5)


def test_catalog_names_are_unique() -> None:
    names = [t.name for t in load_catalog()]
    assert len(names) == len(set(names))


JOB_DECLARING_ITS_OWN_TOPICS = """
from kappa.contracts.topic_declarations import Cleanup, Topic
from kappa.runtime.declaration import JobSpec
from kappa.runtime.outputs import DeltaTable

AD_EVENTS = Topic("ad_events", partitions=2, cleanup=Cleanup.COMPACT, value_schema="ad_events.avsc", key_field="id")
CAMPAIGNS = Topic("campaigns", partitions=1, cleanup=Cleanup.COMPACT, value_schema="campaigns.avsc", key_field="id")
JOB = JobSpec(
    name="ad_counts", version=1, description="", inputs=(AD_EVENTS,), lookups=(CAMPAIGNS,),
    output=DeltaTable("ad_counts"), plan=lambda ctx: None,
)
"""


def test_the_catalog_is_found_from_the_declarations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new source declared in its job's folder needs no list: the job reads it, so the platform creates it (and
    its dead letters) and registers its schema. A topic no job reads yet is found in the catalog module."""
    package = tmp_path / "my_jobs"
    (package / "ad_counts").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "ad_counts" / "__init__.py").write_text("")
    (package / "ad_counts" / "declaration.py").write_text(JOB_DECLARING_ITS_OWN_TOPICS)
    (package / "catalog.py").write_text(
        "from kappa.contracts.topic_declarations import Cleanup, Topic\n"
        'LATER = Topic("later", partitions=1, cleanup=Cleanup.DELETE, value_schema="later.avsc")\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    jobs = discover("my_jobs")
    catalog = find_catalog(jobs, module="my_jobs.catalog")
    assert [t.name for t in catalog.datasets] == ["ad_events", "campaigns", "later"]  # the output is a table
    assert [t.name for t in catalog.sources] == ["ad_events", "campaigns", "later"]
    assert [t.name for t in catalog.topics] == [
        *("ad_events", "campaigns", "later", "ad_events.dlq", "campaigns.dlq", "later.dlq"),
        *(t.name for t in CONTROL_TOPICS),
    ]
    assert find_catalog(jobs, module="my_jobs.no_catalog").datasets == catalog.datasets[:2]  # the module is optional
    (package / "catalog.py").write_text(  # the same name declared again, differently: refused, not guessed
        "from kappa.contracts.topic_declarations import Cleanup, Topic\n"
        'AD_EVENTS = Topic("ad_events", partitions=4, cleanup=Cleanup.COMPACT, value_schema="ad_events.avsc")\n'
    )
    sys.modules.pop("my_jobs.catalog", None)
    with pytest.raises(KappaError, match="topic ad_events is declared twice, differently"):
        find_catalog(jobs, module="my_jobs.catalog")
