"""`kappa dlq inspect | replay`: what is in a dead-letter topic, and putting it back once the cause is fixed."""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from kappa.contracts.dead_letter_format import (
    H_JOB,
    H_KIND,
    H_MESSAGE,
    H_SOURCE_OFFSET,
    H_SOURCE_PARTITION,
    H_SOURCE_TIMESTAMP,
    H_SOURCE_TOPIC,
    dlq_topic,
)
from kappa.core.errors import KappaError
from kappa.core.settings import KappaSettings
from kappa.kafka.clients import Outgoing, admin_client, produce_all
from kappa.kafka.topic_admin import topic_configs


@dataclass(frozen=True)
class DeadLetter:
    key: bytes | None
    value: bytes | None
    headers: dict[str, str]
    partition: int
    offset: int

    @property
    def kind(self) -> str:
        return self.headers.get(H_KIND, "?")

    @property
    def source(self) -> tuple[str, str, str]:
        """Where the bad record sits. Every job reading its topic reports it, so several letters may share it."""
        h = self.headers
        return (h.get(H_SOURCE_TOPIC, "?"), h.get(H_SOURCE_PARTITION, "?"), h.get(H_SOURCE_OFFSET, "?"))


@dataclass
class Inspection:
    topic: str
    total: int = 0  # dead letters in the topic
    records: int = 0  # distinct bad source records among them (what reconciles with the input)
    by_kind: Counter[str] = field(default_factory=Counter)  # distinct records per error kind
    by_job: Counter[str] = field(default_factory=Counter)  # letters per reporting job
    samples: dict[str, list[DeadLetter]] = field(default_factory=dict)
    # Partition -> its log start offset, where it is above 0: retention deleted the letters before it, so the
    # counts above are of what remains.
    log_starts: dict[int, int] = field(default_factory=dict)
    retention_ms: int | None = None  # the topic's retention.ms, asked only when something was deleted


def _consumer(settings: KappaSettings, group: str | None) -> Consumer:
    config: dict[str, Any] = {
        "bootstrap.servers": settings.bootstrap,
        "group.id": group or f"kappa-dlq-inspect-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "log_level": 0,
    }
    return Consumer(config)


def _read_until_end(consumer: Consumer, topic: str, from_committed: bool) -> tuple[list[DeadLetter], dict[int, int]]:
    """Everything `topic` still holds up to its end as of now (from the group's committed offsets, or the start),
    and each partition's log start offset (above 0 once retention deleted its oldest records)."""
    try:
        metadata = consumer.list_topics(topic, timeout=15)
    except KafkaException as exc:
        raise KappaError(f"cannot read {topic}: {exc}") from None
    if topic not in metadata.topics or metadata.topics[topic].error is not None:
        raise KappaError(f"dead-letter topic {topic} does not exist (`kappa topics apply` creates it)")
    partitions = [TopicPartition(topic, p) for p in metadata.topics[topic].partitions]
    watermarks = {tp.partition: consumer.get_watermark_offsets(tp, timeout=15) for tp in partitions}
    log_starts = {p: low for p, (low, _) in watermarks.items()}
    ends = {p: high for p, (_, high) in watermarks.items()}
    # From the log start, not 0: a partition that retention emptied (start == end) has nothing to wait for.
    starts = dict(log_starts)
    if from_committed:
        for tp in consumer.committed(partitions, timeout=15):
            starts[tp.partition] = max(tp.offset, starts[tp.partition])  # a negative offset: none committed
    assigned = [TopicPartition(topic, p, starts[p]) for p in ends]
    consumer.assign(assigned)
    pending = {tp.partition for tp in assigned if tp.offset < ends[tp.partition]}
    letters: list[DeadLetter] = []
    while pending:
        msg = consumer.poll(10)
        if msg is None:
            raise KappaError(f"timed out reading {topic} (pending partitions {sorted(pending)})")
        if msg.error():
            raise KappaError(f"reading {topic} failed: {msg.error()}")
        raw_headers: list[tuple[str, bytes | None]] = list(msg.headers() or [])  # type: ignore[arg-type]
        headers = {str(k): _text(v) for k, v in raw_headers}
        partition, offset = int(msg.partition() or 0), int(msg.offset() or 0)
        letters.append(DeadLetter(_raw(msg.key()), _raw(msg.value()), headers, partition, offset))
        if offset + 1 >= ends[partition]:
            pending.discard(partition)
    return letters, log_starts


def _text(value: str | bytes | None) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else (value or "")


def _raw(value: str | bytes | None) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


def inspect(settings: KappaSettings, topic: str, samples: int = 3) -> Inspection:
    consumer = _consumer(settings, group=None)
    try:
        letters, log_starts = _read_until_end(consumer, dlq_topic(topic), from_committed=False)
    finally:
        consumer.close()
    report = Inspection(dlq_topic(topic), total=len(letters))
    report.log_starts = {p: start for p, start in sorted(log_starts.items()) if start > 0}
    if report.log_starts:
        report.retention_ms = _retention_ms(settings, report.topic)
    seen: set[tuple[str, str, str]] = set()
    for letter in letters:
        report.by_job[letter.headers.get(H_JOB, "?")] += 1
        if letter.source in seen:
            continue
        seen.add(letter.source)
        report.records += 1
        report.by_kind[letter.kind] += 1
        kept = report.samples.setdefault(letter.kind, [])
        if len(kept) < samples:
            kept.append(letter)
    return report


def _retention_ms(settings: KappaSettings, topic: str) -> int | None:
    """The topic's retention.ms as the broker has it; None if it cannot say (the inspection stands without it)."""
    try:
        value = topic_configs(admin_client(settings), topic).get("retention.ms")
    except KafkaException:
        return None
    return int(value) if value is not None and value.lstrip("-").isdigit() else None


def describe(letter: DeadLetter) -> str:
    h = letter.headers
    return (
        f"{h.get(H_SOURCE_TOPIC, '?')}[{h.get(H_SOURCE_PARTITION, '?')}]@{h.get(H_SOURCE_OFFSET, '?')} "
        f"key={letter.key!r}: {h.get(H_MESSAGE, '')}"
    )


def _original(letter: DeadLetter) -> Outgoing:
    """The record as it was: key, value, and (when the letter says) its partition and timestamp.

    Its partition keeps one key's records in order; its timestamp is the event or log time that lateness and
    as-of rules read. Letters written before the timestamp header existed go back with the time of the replay.
    """
    partition, timestamp = letter.headers.get(H_SOURCE_PARTITION, ""), letter.headers.get(H_SOURCE_TIMESTAMP, "")
    return Outgoing(
        letter.key,
        letter.value,
        partition=int(partition) if partition.isdigit() else None,
        timestamp_ms=int(timestamp) if timestamp.lstrip("-").isdigit() else None,
    )


def replay(settings: KappaSettings, topic: str, kind: str | None = None) -> tuple[int, int]:
    """Re-inject dead letters (original key, value, partition and timestamp) into their source topic, each once.

    Progress is the consumer group `kappa-dlq-replay-<topic>-<kind or all>`: offsets are committed only after
    every record was acknowledged, so a crash re-sends at most the last batch (harmless: topics are compacted
    by key) and a second replay sends nothing already sent. Letters that retention deleted before a replay
    read them are gone: it re-injects what the topic still holds. Returns (replayed, skipped by kind filter).
    """
    # One progress record per filter: replaying one kind now must not mark the other kinds as done.
    group = f"kappa-dlq-replay-{topic}-{kind or 'all'}"
    consumer = _consumer(settings, group=group)
    try:
        letters, _ = _read_until_end(consumer, dlq_topic(topic), from_committed=True)
        # Each bad record once, however many jobs reported it.
        unique = list({d.source: d for d in reversed(letters)}.values())[::-1]
        chosen = [d for d in unique if kind is None or d.kind == kind]
        by_source: dict[str, list[DeadLetter]] = {}
        for letter in chosen:
            by_source.setdefault(letter.headers.get(H_SOURCE_TOPIC, topic), []).append(letter)
        for source, batch in by_source.items():
            produce_all(settings, source, (_original(d) for d in batch))
        if letters:
            last: dict[int, int] = {}
            for letter in letters:
                last[letter.partition] = max(last.get(letter.partition, -1), letter.offset)
            consumer.commit(
                offsets=[TopicPartition(dlq_topic(topic), p, o + 1) for p, o in last.items()], asynchronous=False
            )
    finally:
        consumer.close()
    return len(chosen), len(unique) - len(chosen)
