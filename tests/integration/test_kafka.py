"""Produce and consume through the real broker with confluent-kafka."""

import re
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from kappa.contracts.topic_declarations import Cleanup, Topic
from kappa.core.errors import KappaError
from kappa.core.settings import KappaSettings
from kappa.kafka.clients import Outgoing, admin_client, produce_all
from kappa.kafka.reading import Extent, MissingTopicError, extents, read_to_end, reading_consumer, whole_topic
from kappa.kafka.topic_admin import apply
from kappa.ops import dlq
from tests.waiting import wait_until


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


def test_whole_topic_reads_to_the_end_past_transaction_markers_and_aborted_records(
    stack: KappaSettings, unique_name: Callable[[str], str]
) -> None:
    # Partition 0 ends with a commit marker, partition 1 with an aborted transaction's records and its marker:
    # neither last offset holds a record a reader receives, and a reader waiting for one would wait forever.
    topic = Topic(unique_name("read-whole"), partitions=2, cleanup=Cleanup.DELETE)
    apply(admin_client(stack), [topic])
    produce_all(stack, topic.name, [Outgoing(b"plain", f"p{i}".encode(), partition=1) for i in range(3)])
    txn = Producer({"bootstrap.servers": stack.bootstrap, "transactional.id": unique_name("txn"), "log_level": 0})
    txn.init_transactions(30)
    txn.begin_transaction()
    for i in range(4):
        txn.produce(topic.name, key=b"committed", value=f"c{i}".encode(), partition=0)
    txn.commit_transaction(30)
    txn.begin_transaction()
    txn.produce(topic.name, key=b"aborted", value=b"a0", partition=1)
    txn.flush(30)
    txn.abort_transaction(30)

    # The markers are written after commit and abort return: until then the partitions' ends stop short of them.
    probe = reading_consumer(stack)
    try:
        wait_until(lambda: extents(probe, topic.name) == {0: Extent(0, 5), 1: Extent(0, 5)}, 30, "the markers")
    finally:
        probe.close()
    got = [(int(m.partition() or 0), m.value()) for m in whole_topic(stack, topic.name, stall_s=20)]
    # Each partition in offset order; partitions interleave as their records arrive.
    committed, plain = [(0, f"c{i}".encode()) for i in range(4)], [(1, f"p{i}".encode()) for i in range(3)]
    assert sorted(got, key=lambda r: r[0]) == committed + plain


def test_read_to_end_starts_where_asked_and_stops_at_the_ends_it_was_given(
    stack: KappaSettings, unique_name: Callable[[str], str]
) -> None:
    topic = Topic(unique_name("read-from"), partitions=2, cleanup=Cleanup.DELETE)
    apply(admin_client(stack), [topic])
    produce_all(stack, topic.name, [Outgoing(None, f"v{i}".encode(), partition=i % 2) for i in range(10)])
    consumer = reading_consumer(stack)
    try:
        ends = extents(consumer, topic.name)
        assert ends == {0: Extent(0, 5), 1: Extent(0, 5)}
        produce_all(stack, topic.name, [Outgoing(None, b"later", partition=0)])  # after the ends were read
        got = [(int(m.partition() or 0), m.value()) for m in read_to_end(consumer, topic.name, ends, starts={0: 3})]
        # A read leaves no progress behind: its group has committed nothing.
        committed = consumer.committed([TopicPartition(topic.name, p) for p in ends], timeout=15)
        assert all(tp.offset < 0 for tp in committed), committed
    finally:
        consumer.close()
    assert sorted(got, key=lambda r: r[0]) == [
        (0, b"v6"),
        (0, b"v8"),
        *((1, f"v{i}".encode()) for i in range(1, 10, 2)),
    ]


def test_whole_topic_names_a_topic_that_does_not_exist(stack: KappaSettings, unique_name: Callable[[str], str]) -> None:
    missing = unique_name("never-created")
    with pytest.raises(MissingTopicError, match=re.escape(f"topic {missing} does not exist")):
        list(whole_topic(stack, missing))


def test_dlq_inspect_of_a_topic_without_dead_letter_topic_says_how_to_create_it(
    stack: KappaSettings, unique_name: Callable[[str], str]
) -> None:
    source = unique_name("no-letters")
    with pytest.raises(KappaError) as refused:
        dlq.inspect(stack, source)
    assert str(refused.value) == f"dead-letter topic {source}.dlq does not exist (`kappa topics apply` creates it)"
    assert not isinstance(refused.value, MissingTopicError)  # the reader's own wording is not what the user sees
