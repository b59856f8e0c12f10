import pytest

from jobs.catalog import PROFILE_REPLAY_WINDOW_MS, TOPICS, USER_PROFILES
from kappa.contracts.topic_declarations import FOREVER, Cleanup, Topic
from kappa.core.errors import KappaError
from kappa.kafka.topic_admin import TopicState


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
    names = [t.name for t in TOPICS]
    assert len(names) == len(set(names))
