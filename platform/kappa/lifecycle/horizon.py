"""A topic's replay horizon: the event time from which it still holds every record. A replay that needs
older data is refused (docs/architecture.md, "Topics and keys"): computing on partial data would give an
answer the live run never gave."""

from __future__ import annotations

import time
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaException, TopicPartition

from kappa.contracts.topic_declarations import Cleanup, Topic
from kappa.core.errors import KappaError
from kappa.core.security import librdkafka_config
from kappa.core.settings import KappaSettings
from kappa.core.waiting import wait_until
from kappa.kafka.aliases import now_ms
from kappa.runtime.declaration import Starting


@dataclass(frozen=True)
class Horizon:
    """How far back a topic still holds every record: None means since its first record."""

    topic: str
    since_ms: int | None
    why: str


def replay_horizon(settings: KappaSettings, topic: Topic, now: int | None = None) -> Horizon:
    """The event time from which `topic` is complete (a replay needing older data is refused).

    - Retention deleted records (a partition's log start offset > 0): complete from the first retained record's
      timestamp, the latest such time over the partitions.
    - A compacted entity topic (min.compaction.lag.ms > 0) keeps every version younger than the lag; once the
      cleaner has removed a record (a gap in the offsets), only the lag window is complete.
    - A compacted topic keyed by event id (no lag) loses only duplicates to compaction: complete.
    """
    now = now if now is not None else now_ms()
    consumer = Consumer({**librdkafka_config(settings), "group.id": "kappa.horizon", "log_level": 0})
    try:
        since: int | None = None
        reasons = []
        gaps = False
        for p in range(topic.partitions):
            tp = TopicPartition(topic.name, p)
            try:
                low, high = consumer.get_watermark_offsets(tp, timeout=10)
            except KafkaException as exc:
                raise KappaError(f"cannot read {topic.name}: {exc} (does it exist? is Kafka up?)") from None
            if low > 0 and high > low:
                first = _first_timestamp(consumer, topic.name, p, low)
                since = first if since is None else max(since, first)
                reasons.append(f"partition {p} starts at offset {low}: retention deleted what came before")
            if topic.cleanup is not Cleanup.DELETE and topic.min_compaction_lag_ms and high > low:
                gaps = gaps or _count(consumer, topic.name, p, low, high) < high - low
        if gaps:
            window = now - topic.min_compaction_lag_ms
            since = window if since is None else max(since, window)
            reasons.append(
                f"compaction removed versions; every version is kept only for min.compaction.lag.ms "
                f"({topic.min_compaction_lag_ms} ms)"
            )
        return Horizon(topic.name, since, "; ".join(reasons) or "every record since the first is retained")
    finally:
        consumer.close()


def _first_timestamp(consumer: Consumer, topic: str, partition: int, offset: int) -> int:
    consumer.assign([TopicPartition(topic, partition, offset)])

    def first_timestamp() -> tuple[int] | None:
        message = consumer.poll(1.0)
        return (int(message.timestamp()[1]),) if message is not None and not message.error() else None

    return wait_until(first_timestamp, 15, f"could not read {topic}[{partition}]@{offset} within 15 s", interval_s=0)[0]


def _count(consumer: Consumer, topic: str, partition: int, low: int, high: int) -> int:
    """Records actually present in [low, high): fewer than high - low means the cleaner removed some."""
    consumer.assign([TopicPartition(topic, partition, low)])
    seen = 0
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        # A short wait: consume() waits out its whole timeout unless it fills the batch, which the last batch of
        # a partition never does (a full second per partition, measured).
        batch = consumer.consume(10_000, 0.05)
        seen += sum(1 for m in batch if not m.error())
        if consumer.position([TopicPartition(topic, partition)])[0].offset >= high:
            return seen
    raise KappaError(f"could not scan {topic}[{partition}] within 120 s")


def iso(ms: int) -> str:
    return Starting(offsets="timestamp", timestamp_ms=ms).text  # as --from takes it
