"""Produce and consume through the real broker with confluent-kafka."""

from collections.abc import Callable

from confluent_kafka import Consumer

from kappa.contracts.topic_declarations import Cleanup, Topic
from kappa.core.settings import KappaSettings
from kappa.kafka.clients import Outgoing, admin_client, produce_all
from kappa.kafka.topic_admin import apply


def test_produce_then_consume_every_record_in_partition_order(
    stack: KappaSettings, unique_name: Callable[[str], str]
) -> None:
    topic = Topic(unique_name("roundtrip"), partitions=2, cleanup=Cleanup.DELETE)
    apply(admin_client(stack), [topic])
    sent = [Outgoing(key=f"k{i % 5}".encode(), value=f"v{i}".encode(), partition=i % 2) for i in range(1000)]
    assert produce_all(stack, topic.name, sent) == 1000

    consumer = Consumer(
        {"bootstrap.servers": stack.bootstrap, "group.id": unique_name("g"), "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic.name])
    got: dict[int, list[bytes]] = {0: [], 1: []}
    try:
        for _ in range(60):
            for msg in consumer.consume(500, timeout=1.0):
                assert msg.error() is None
                got[msg.partition()].append(msg.value())
            if sum(map(len, got.values())) == 1000:
                break
    finally:
        consumer.close()
    assert got[0] == [f"v{i}".encode() for i in range(0, 1000, 2)]
    assert got[1] == [f"v{i}".encode() for i in range(1, 1000, 2)]
