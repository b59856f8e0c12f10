"""`kappa dlq inspect | replay`: what is in a dead-letter topic, and putting it back once the cause is fixed."""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaException, TopicPartition

from kappa.contracts.dead_letter_format import (
    H_JOB,
    H_KIND,
    H_MESSAGE,
    H_SOURCE_OFFSET,
    H_SOURCE_PARTITION,
    H_SOURCE_TIMESTAMP,
    H_SOURCE_TOPIC,
    DeadLetterKind,
    dlq_topic,
    late_topic,
)
from kappa.core.errors import KappaError
from kappa.core.settings import KappaSettings
from kappa.kafka.clients import Outgoing, admin_client, produce_all
from kappa.kafka.reading import MissingTopicError, extents, read_to_end, reading_consumer
from kappa.kafka.topic_admin import topic_configs

_LATE_SUFFIX = late_topic("")  # ".late": a job's late records, beside its output


def is_late_topic(topic: str) -> bool:
    """A job's `.late` topic: the records its rule set aside, with the dead letters' headers."""
    return topic.endswith(_LATE_SUFFIX)


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


def _letters(consumer: Consumer, topic: str) -> tuple[list[DeadLetter], dict[int, int]]:
    """Everything the dead-letter `topic` still holds up to its end as of now (from the consumer's group's
    committed offsets: none for a group of its own), and each partition's log start offset (above 0 once
    retention deleted its oldest records)."""
    try:
        bounds = extents(consumer, topic)
    except MissingTopicError:
        kind = "late-record" if is_late_topic(topic) else "dead-letter"
        raise KappaError(f"{kind} topic {topic} does not exist (`kappa topics apply` creates it)") from None
    committed = consumer.committed([TopicPartition(topic, p) for p in bounds], timeout=15)
    letters: list[DeadLetter] = []
    for msg in read_to_end(consumer, topic, bounds, {tp.partition: tp.offset for tp in committed}, stall_s=30):
        raw_headers: list[tuple[str, bytes | None]] = list(msg.headers() or [])  # type: ignore[arg-type]
        headers = {str(k): _text(v) for k, v in raw_headers}
        partition, offset = int(msg.partition() or 0), int(msg.offset() or 0)
        letters.append(DeadLetter(_raw(msg.key()), _raw(msg.value()), headers, partition, offset))
    return letters, {p: b.start for p, b in bounds.items()}


def _text(value: str | bytes | None) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else (value or "")


def _raw(value: str | bytes | None) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


def side_topic(topic: str) -> str:
    """The topic `inspect` reads for `topic`: a `.late` topic itself (a job's late records carry the dead letters'
    headers), else the dataset's dead letters."""
    return topic if is_late_topic(topic) else dlq_topic(topic)


def inspect(settings: KappaSettings, topic: str, samples: int = 3) -> Inspection:
    """What the dead-letter topic of dataset `topic` holds, or the `.late` topic `topic` (e.g.
    `delta.page_stats.v2.late`): counts per kind, of distinct source records, with samples."""
    with reading_consumer(settings, f"kappa-dlq-inspect-{uuid.uuid4().hex[:8]}") as consumer:
        letters, log_starts = _letters(consumer, read := side_topic(topic))
    report = Inspection(read, total=len(letters))
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
    read them are gone: it re-injects what the topic still holds. Returns (replayed, skipped: other kinds, and the
    `partition-mismatch` letters, which are never re-injected: each would land in the same wrong partition and be
    set aside again; such a record must be produced again, placed by `partition_for`).
    """
    if is_late_topic(topic):
        raise KappaError(
            f"{topic} holds late records, which their job set aside by its rule: put back, they would be late again. "
            "A replay of the job with a longer lateness is what counts them"
        )
    if kind == DeadLetterKind.PARTITION_MISMATCH:
        raise KappaError(
            f"{kind} letters cannot be replayed: each would land in the same wrong partition again. Produce those "
            "records again from a producer that places them (kappa.kafka.partitioning.partition_for)"
        )
    # One progress record per filter: replaying one kind now must not mark the other kinds as done.
    group = f"kappa-dlq-replay-{topic}-{kind or 'all'}"
    with reading_consumer(settings, group) as consumer:
        letters, _ = _letters(consumer, dlq_topic(topic))
        # Each bad record once, however many jobs reported it.
        unique = list({d.source: d for d in reversed(letters)}.values())[::-1]
        chosen = [d for d in unique if d.kind == kind or (kind is None and d.kind != DeadLetterKind.PARTITION_MISMATCH)]
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
    return len(chosen), len(unique) - len(chosen)
