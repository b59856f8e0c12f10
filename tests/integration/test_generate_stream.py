"""`kappa generate` into real topics: every click and profile version lands, Avro-framed, by user partition."""

from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from jobs.clickstream.generator import Click, StreamConfig, clickstream
from jobs.clickstream.produce import generate
from kappa.contracts.registry import Registry
from kappa.contracts.topic_declarations import Cleanup, Topic
from kappa.core.errors import KappaError
from kappa.core.settings import KappaSettings
from kappa.kafka.clients import admin_client
from kappa.kafka.partitioning import partition_for


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


def _stamp_on_arrival(stack: KappaSettings, *topics: Topic) -> None:
    """The broker stamps each record with the time it appended it (the producer's timestamps are replaced)."""
    entry = ConfigEntry("message.timestamp.type", "LogAppendTime", incremental_operation=AlterConfigOpType.SET)
    resources = [ConfigResource(ResourceType.TOPIC, t.name, incremental_configs=[entry]) for t in topics]
    admin = admin_client(stack)  # held until the changes are answered (a collected client cancels them)
    for future in admin.incremental_alter_configs(resources).values():
        future.result(timeout=30)


def _arrivals(stack: KappaSettings, topic: Topic) -> dict[int, list[tuple[bytes, int]]]:
    """Per partition, each record's (key, broker append time) in offset order."""
    consumer = Consumer({"bootstrap.servers": stack.bootstrap, "group.id": "arrivals", "enable.auto.commit": False})
    try:
        arrivals: dict[int, list[tuple[bytes, int]]] = {}
        for partition in range(topic.partitions):
            end = consumer.get_watermark_offsets(TopicPartition(topic.name, partition), timeout=10)[1]
            consumer.assign([TopicPartition(topic.name, partition, 0)])
            records = arrivals.setdefault(partition, [])
            while len(records) < end:
                message = consumer.poll(10)
                assert message is not None, f"{topic.name}[{partition}]: {len(records)} of {end} records read"
                assert message.error() is None, message.error()
                records.append((bytes(message.key() or b""), message.timestamp()[1]))
        return arrivals
    finally:
        consumer.close()


def test_a_profile_version_reaches_kafka_before_any_later_click_of_its_user(
    stack: KappaSettings, avro_topic: Callable[..., Topic]
) -> None:
    """The generator's log order holds across the two topics where enrich_clicks needs it: a version is in
    Kafka before the next click of its user is, even at full speed (the producer alone orders a partition only).
    Checked on the broker's own append times, against the log order the generator defines."""
    clicks_topic = avro_topic("order-clicks", partitions=4)
    profiles_topic = avro_topic("order-profiles", value_schema="user_profiles.avsc", partitions=4)
    _stamp_on_arrival(stack, clicks_topic, profiles_topic)
    config = StreamConfig(events=4000, users=40, seed=5, profile_change_share=0.05)
    generate(stack, config, clicks_topic, profiles_topic, progress=None)

    click_arrival = {key.decode(): at for records in _arrivals(stack, clicks_topic).values() for key, at in records}
    profile_arrivals = {p: iter(records) for p, records in _arrivals(stack, profiles_topic).items()}
    waiting: dict[str, int] = {}  # user -> append time of its last version, until its next click
    checked = 0
    for emission in clickstream(config):
        record = emission.record
        if isinstance(record, Click):
            if (version_at := waiting.pop(record.user_id, None)) is not None:
                assert version_at <= click_arrival[record.event_id], f"{record.event_id} reached Kafka first"
                checked += 1
        else:  # a partition's versions are in the topic in the order they were sent: the log order
            key, at = next(profile_arrivals[partition_for(record.user_id, profiles_topic.partitions)])
            assert key.decode() == record.user_id
            waiting[record.user_id] = at
    assert checked > 150, checked  # versions followed by a click of their user: what the order is about
