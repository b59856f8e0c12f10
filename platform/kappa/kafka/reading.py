"""Reading a topic whole: every record from each partition's start (or from given offsets) up to its end as of the
call, each partition in offset order. For what reads a bounded log once: `kappa dlq`, the tests' and the
benchmarks' checks against independently computed answers.

A partition is done when the consumer's position reaches the end it had at the start, not when a record with the
last offset arrives: the last offsets may hold no record a reader receives (a transaction's commit or abort
marker, an aborted transaction's records, a compacted-away key), and waiting for one would wait forever. The
consumer reads committed transactions only, so a partition's end is its last stable offset: a transaction still
open (or committed a moment ago, its markers not yet written) is after it.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from kappa.core.errors import KappaError
from kappa.core.security import librdkafka_config
from kappa.core.settings import KappaSettings

_BATCH = 10_000  # records per consume call: Python's cost per call, not per record, is what a big read pays


class MissingTopicError(KappaError):
    """The topic to read does not exist."""


@dataclass(frozen=True)
class Extent:
    """A partition's log start (above 0 once retention deleted its oldest records) and end, at one moment."""

    start: int
    end: int


def reading_consumer(settings: KappaSettings, group: str | None = None, committed_only: bool = True) -> Consumer:
    """A consumer (of `group`, or of one of its own) that commits nothing by itself and reads only committed
    transactions (`committed_only=False`: aborted ones too, as Spark's Kafka source does by default). An offset
    that retention deleted while it was read restarts at the log's earliest (the default, latest, would skip to
    the end and leave out what remains)."""
    return Consumer(
        {
            **librdkafka_config(settings),
            "group.id": group or f"kappa-read-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed" if committed_only else "read_uncommitted",
            "auto.offset.reset": "earliest",
            "log_level": 0,  # failures reach the caller as KappaError with context
        }
    )


def extents(consumer: Consumer, topic: str, timeout_s: float = 15) -> dict[int, Extent]:
    """Each partition's log start and end now; a clear error for a topic that does not exist."""
    with _kafka_errors(f"cannot read {topic}"):
        found = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if found is None or (found.error is not None and found.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
            raise MissingTopicError(f"topic {topic} does not exist (`kappa topics apply` creates the declared ones)")
        if found.error is not None:
            raise KappaError(f"cannot read {topic}: {found.error.str()}")
        marks = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s, cached=False)
                 for p in sorted(found.partitions)}  # fmt: skip
    return {p: Extent(low, high) for p, (low, high) in marks.items()}


def read_to_end(
    consumer: Consumer,
    topic: str,
    bounds: Mapping[int, Extent],
    starts: Mapping[int, int] | None = None,
    stall_s: float = 60,
) -> Iterator[Message]:
    """Every record of the partitions in `bounds`, from `starts` (a partition not named, or a negative offset:
    its log start) up to its end, each partition in offset order (partitions interleave as records arrive).
    Fails with a clear error when a record is an error, or when no partition moves for `stall_s`."""
    begin = {p: max((starts or {}).get(p, b.start), b.start) for p, b in bounds.items()}
    pending = {p for p, b in bounds.items() if begin[p] < b.end}
    if not pending:
        return
    consumer.assign([TopicPartition(topic, p, begin[p]) for p in sorted(pending)])
    at = dict(begin)  # each pending partition's position when it last moved
    moved = time.monotonic()
    while pending:
        with _kafka_errors(f"reading {topic} failed"):
            batch = consumer.consume(_BATCH, 1)
        for m in batch:
            if m.error() is not None:
                raise KappaError(f"reading {topic} failed: {m.error()}")
            partition, offset = int(m.partition() or 0), int(m.offset() or 0)
            if partition in pending and offset < bounds[partition].end:  # not one written since the ends were read
                yield m
        done = []
        with _kafka_errors(f"reading {topic} failed"):
            positions = consumer.position([TopicPartition(topic, p) for p in sorted(pending)])
        for tp in positions:
            if tp.offset > at[tp.partition]:  # records, markers or aborted records passed: progress all the same
                at[tp.partition], moved = tp.offset, time.monotonic()
            if tp.offset >= bounds[tp.partition].end:
                done.append(tp)
        if done:
            consumer.pause(done)  # what is written after the end is not fetched for nothing
            pending -= {tp.partition for tp in done}
        if pending and time.monotonic() - moved > stall_s:
            short = ", ".join(f"[{p}] at {at[p]} of {bounds[p].end}" for p in sorted(pending))
            raise KappaError(f"reading {topic}: no partition moved for {stall_s:.0f} s; short of their end: {short}")


@contextlib.contextmanager
def _kafka_errors(prefix: str) -> Iterator[None]:
    """The client's KafkaException (a fatal error, a timeout) as one line: `prefix: reason`."""
    try:
        yield
    except KafkaException as exc:
        reason = exc.args[0].str() if exc.args and isinstance(exc.args[0], KafkaError) else str(exc)
        raise KappaError(f"{prefix}: {reason}") from None


def whole_topic(settings: KappaSettings, topic: str, stall_s: float = 60) -> Iterator[Message]:
    """Every record `topic` holds now, each partition in offset order, with a consumer of its own."""
    with reading_consumer(settings) as consumer:
        yield from read_to_end(consumer, topic, extents(consumer, topic), stall_s=stall_s)
