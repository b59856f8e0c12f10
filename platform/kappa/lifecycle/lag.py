"""How far a deployed version is behind its inputs: its consumer group's offsets against the end offsets, and its
last batch as its run recorded it (kappa.lifecycle.deployments describes the whole)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition

from kappa.core.errors import KappaError
from kappa.core.settings import KappaSettings
from kappa.kafka.clients import admin_client
from kappa.kafka.reading import MissingTopicError, extents, reading_consumer
from kappa.lifecycle.state_files import consumer_group
from kappa.runtime import run_record
from kappa.runtime.binding import read_topics
from kappa.runtime.run_record import LastBatch


@dataclass(frozen=True)
class Lag:
    """How far a version's recorded progress (group `kappa.<job>.v<N>`) is behind its inputs' end offsets."""

    group: str
    per_topic: dict[str, int]
    last_batch: LastBatch | None = None
    rows: int = 0  # input rows of the output query, over every run of the version

    @property
    def total(self) -> int:
        return sum(self.per_topic.values())


class UnknownInputsError(KappaError):
    """What a version reads is not known here, so neither is its lag (Kafka may well be up)."""


def topic_lag(
    committed: Mapping[str, Mapping[int, int]], watermarks: Mapping[str, Mapping[int, tuple[int, int]]]
) -> dict[str, int]:
    """Records not yet processed per topic: end offset minus the group's committed offset, per partition.

    `watermarks`: topic -> partition -> (low, high). A partition without a committed offset counts from its
    low watermark (the job has not finished a batch there yet; it starts from the earliest retained record).
    A committed offset below the low watermark (retention deleted records the job never read) counts from low.
    """
    lag: dict[str, int] = {}
    for topic, partitions in watermarks.items():
        done = committed.get(topic, {})
        lag[topic] = sum(max(0, high - max(low, done.get(p, low))) for p, (low, high) in partitions.items())
    return lag


def last_batch(settings: KappaSettings, job: str, version: int) -> tuple[LastBatch | None, int]:
    """The output query's last batch, as the version's latest run recorded it, and its rows over every run."""
    run = run_record.read(run_record.record_path(settings, job, version))
    return (run.last_batch, run.rows) if run is not None else (None, 0)


def lag(settings: KappaSettings, job: str, version: int, timeout_s: float = 15.0) -> Lag:
    """The version's consumer lag per input topic (its group's offsets vs the end offsets), and its last batch.
    Kafka unreachable within `timeout_s`: a KappaError; the inputs unknown here: an UnknownInputsError."""

    group = consumer_group(job, version)
    try:
        topics = read_topics(settings, job, version)
    except KappaError as exc:
        raise UnknownInputsError(f"the lag of {job} v{version} is unknown: {exc}") from None
    watermarks: dict[str, dict[int, tuple[int, int]]] = {}
    with reading_consumer(settings, group=f"{group}.lag-probe") as consumer:
        for topic in topics:
            try:
                found = extents(consumer, topic, timeout_s)
            except MissingTopicError:
                continue  # an input not created yet: no lag to count
            watermarks[topic] = {p: (extent.start, extent.end) for p, extent in found.items()}
    # The group's offsets of exactly these partitions (confluent-kafka 2.16 crashes listing "all" of a group).
    wanted = [TopicPartition(t, p) for t, parts in watermarks.items() for p in sorted(parts)]
    committed: dict[str, dict[int, int]] = {}
    if wanted:
        try:
            admin = admin_client(settings)  # held until the answer: a collected client never resolves its futures
            request = [ConsumerGroupTopicPartitions(group, wanted)]
            listed = admin.list_consumer_group_offsets(request, request_timeout=timeout_s)
            offsets = listed[group].result(timeout=timeout_s + 1).topic_partitions or []
        except (KafkaException, TimeoutError) as exc:
            why = str(exc) or f"no answer within {timeout_s:g} s"
            raise KappaError(f"cannot read the offsets of group {group} at {settings.bootstrap}: {why}") from None
        for tp in offsets:
            if tp.offset >= 0:
                committed.setdefault(tp.topic, {})[tp.partition] = tp.offset
    last, rows = last_batch(settings, job, version)
    return Lag(group=group, per_topic=topic_lag(committed, watermarks), last_batch=last, rows=rows)


def as_metadata(lag: Lag) -> dict[str, Any]:
    """Lag, rows and the last batch as plain values (Dagster metadata, the status table)."""
    return {
        "consumer_group": lag.group,
        "consumer_lag": lag.total,
        "consumer_lag_per_topic": dict(lag.per_topic),
        "rows": lag.rows,
        "last_batch_id": lag.last_batch.batch_id if lag.last_batch else None,
        "last_batch_at": lag.last_batch.at.isoformat() if lag.last_batch else None,
        "last_batch_rows": lag.last_batch.rows if lag.last_batch else None,
    }
