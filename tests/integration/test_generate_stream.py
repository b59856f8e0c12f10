"""`kappa generate` into real topics: every click and profile version lands, Avro-framed, by user partition."""

from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, TopicPartition

from kappa.contracts.registry import Registry
from kappa.contracts.topic_declarations import Cleanup, Topic
from kappa.core.errors import KappaError
from kappa.core.settings import KappaSettings
from kappa.ops.clickstream import StreamConfig
from kappa.ops.produce_clickstream import generate


def _count(stack: KappaSettings, topic: Topic) -> int:
    consumer = Consumer({"bootstrap.servers": stack.bootstrap, "group.id": "count"})
    try:
        return sum(
            consumer.get_watermark_offsets(TopicPartition(topic.name, p), timeout=10)[1]
            for p in range(topic.partitions)
        )
    finally:
        consumer.close()


def test_generate_fills_both_topics(stack: KappaSettings, avro_topic: Callable[..., Topic]) -> None:
    clicks_topic = avro_topic("gen-clicks", partitions=4)
    profiles_topic = avro_topic("gen-profiles", value_schema="user_profiles.avsc", partitions=4)
    report = generate(
        stack, StreamConfig(events=3000, users=100, seed=9, malformed_share=0.01), clicks_topic, profiles_topic,
        progress=None,
    )  # fmt: skip
    assert report.clicks == 3000
    assert 0 < report.malformed < 100
    assert report.profiles >= 100  # at least one version per user
    assert _count(stack, clicks_topic) == 3000
    assert _count(stack, profiles_topic) == report.profiles


def test_generate_never_registers_a_schema(stack: KappaSettings, unique_name: Callable[[str], str]) -> None:
    """Schemas are registered by `kappa schemas apply` alone: an unregistered subject is named, nothing produced."""
    clicks_topic = Topic(unique_name("gen-unregistered"), 1, Cleanup.COMPACT, value_schema="clicks.avsc")
    profiles_topic = Topic(unique_name("gen-unregistered-p"), 1, Cleanup.COMPACT, value_schema="user_profiles.avsc")
    with pytest.raises(KappaError, match=rf"not registered under {clicks_topic.name}-value \(`kappa schemas apply`\)"):
        generate(stack, StreamConfig(events=10, users=2, seed=1), clicks_topic, profiles_topic, progress=None)
    with Registry(stack.registry) as registry:
        assert f"{clicks_topic.name}-value" not in registry.subjects()  # nothing was registered
