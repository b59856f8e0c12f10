"""Reading a dataset by its name: every reader follows the alias to the live version.

    for change in AliasConsumer(settings, "enriched_clicks", group="billing").changes():   # Python
        upsert(change.key, change.value)                                                   # None: deleted
    read_dataset(spark, settings, ENRICHED_CLICKS)        # Spark: the live version's latest value per key
    spark.read.format("delta").load(table_path(settings, "page_stats"))   # Delta (Spark, delta-rs, DuckDB)

What "no record lost or repeated" means across a cutover: a dataset is a table keyed by its Kafka key, and a
follower is told every change of a key's value exactly once. When the alias moves (cutover or rollback), the
follower reads the new version up to its end offsets at that moment, then delivers each key whose value there
differs from what it last delivered (including deletes), and goes on from those offsets. Keys whose value the
new logic did not change are not delivered again. The follower keeps a digest per key for that comparison
(16 bytes + the key); pass `delivered` to keep it across restarts with the consumer's own state, or it is
rebuilt at start by reading the version followed last up to the committed offsets (what had been delivered).

A restart holds to the same promise when the alias moved while the follower was stopped: every commit carries
the version followed and the group's count of switches (Kafka commit metadata), so a restarted follower finds
the version it followed last, resumes there if it is still live, and otherwise switches from it as above.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import time
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from kappa.contracts.avro_serde import AvroDecoder
from kappa.contracts.registry import registry_of
from kappa.contracts.topic_declarations import Topic
from kappa.core.errors import KappaError
from kappa.core.security import librdkafka_config
from kappa.core.settings import KappaSettings
from kappa.kafka.aliases import Alias, AliasRegistry, AliasWatch
from kappa.runtime.outputs import table_dataset

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def live(settings: KappaSettings, dataset: str) -> Alias:
    """The live version of a dataset, or a clear error if none is."""
    return _required(AliasRegistry(settings).live(dataset), dataset)


def _required(alias: Alias | None, dataset: str) -> Alias:
    if alias is None:
        raise KappaError(f"no version of {dataset} is live: deploy the job that writes it (`kappa jobs run`)")
    return alias


def table_path(settings: KappaSettings, table: str) -> str:
    """The live version's Delta path of a table dataset (`page_stats` -> <delta_root>/page_stats/v2)."""

    return live(settings, table_dataset(table)).physical


def read_dataset(spark: SparkSession, settings: KappaSettings, dataset: Topic) -> DataFrame:
    """A batch read of a topic dataset's live version: the latest value per key."""
    # Lazy: imports pyspark, only where a Spark session runs (this module is imported without one).
    from kappa.spark.compacted import latest_per_key

    return latest_per_key(spark, settings, dataset.versioned(live(settings, dataset.name).version))


@dataclass(frozen=True)
class Change:
    key: str
    value: dict[str, Any] | None  # None: the key was deleted
    version: int  # the dataset version it was read from
    topic: str
    partition: int
    offset: int


def _key(raw: bytes | None) -> str:
    return "" if raw is None else raw.decode()


def _digest(raw: bytes | None) -> bytes:
    return b"" if raw is None else hashlib.blake2b(raw, digest_size=16).digest()


def _switches(metadata: str | None) -> int:
    """The switch count a commit carries; -1 for a commit without one (a follower older than the metadata)."""
    try:
        return int(json.loads(metadata or "")["switch"])
    except (TypeError, ValueError, KeyError):
        return -1


@dataclass(frozen=True)
class _Followed:
    """Where a follower's group was when it stopped: the version, its committed offsets, the switches so far."""

    version: int
    offsets: dict[int, int]
    switches: int


class AliasConsumer:
    """Follows a dataset's alias and yields every change of a key's value once, across cutovers and rollbacks.

    Offsets are committed to `group` on the physical topic being read, with the version followed and the
    group's switch count as commit metadata (see the module's docstring), after the change is handed over: when
    the caller asks for the next one. A caller that stops in between (its code raised, it crashed, it broke
    out of the loop) gets that change again after a restart; none is skipped.
    """

    def __init__(
        self,
        settings: KappaSettings,
        dataset: Topic,
        group: str,
        delivered: MutableMapping[str, bytes] | None = None,
        alias_poll_s: float = 5.0,
    ) -> None:
        self.settings = settings
        self.dataset = dataset
        self.group = group
        self.delivered: MutableMapping[str, bytes] = {} if delivered is None else delivered
        self.version: int | None = None
        self._switches = 0  # switches this group made, counted across restarts: orders its commits by recency
        self._metadata = ""  # committed with every offset: the version followed and self._switches
        self._aliases = AliasWatch(settings)  # one open reader of the registry, asked every alias_poll_s
        self._alias_poll_s = alias_poll_s
        self._checked = 0.0
        self._committed = 0.0
        self._consumer = Consumer(
            {
                **librdkafka_config(settings),
                "group.id": group,
                "enable.auto.commit": False,
                # Offsets are stored only once a change is handed over (the caller asked for the next one), so a
                # commit, the one in close() included, never covers a change the caller did not take.
                "enable.auto.offset.store": False,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
                "log_level": 0,
            }
        )
        self._registry = registry_of(settings)
        # Lazy: imports pyspark, only where a Spark session runs (this module is imported without one).
        from kappa.spark.topic_io import value_schema

        self._decoder = AvroDecoder(self._registry, value_schema(settings, dataset))

    def close(self) -> None:
        with contextlib.suppress(KafkaException):  # nothing consumed since the last commit
            self._consumer.commit(asynchronous=False)
        self._consumer.close()
        self._registry.close()
        self._aliases.close()

    def __enter__(self) -> AliasConsumer:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _topic(self, version: int) -> Topic:
        return self.dataset.versioned(version)

    def _change(self, key: str, raw: bytes | None, version: int, topic: str, partition: int, offset: int) -> Change:
        value = None if raw is None else self._decoder.decode(raw)
        return Change(key, value, version, topic, partition, offset)

    def _ends(self, topic: Topic) -> dict[int, tuple[int, int]]:
        return {
            p: self._consumer.get_watermark_offsets(TopicPartition(topic.name, p), timeout=10)
            for p in range(topic.partitions)
        }

    def _latest(self, topic: str, spans: dict[int, tuple[int, int]]) -> dict[str, tuple[bytes | None, int, int]]:
        """Each key's latest record in `topic` within [start, end) per partition: (value, partition, offset)."""
        latest: dict[str, tuple[bytes | None, int, int]] = {}
        self._consumer.assign([TopicPartition(topic, p, start) for p, (start, _end) in spans.items()])
        remaining = {p for p, (start, end) in spans.items() if end > start}
        deadline = time.monotonic() + 300
        while remaining and time.monotonic() < deadline:
            for message in self._consumer.consume(10_000, 0.5):
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise KappaError(f"reading {topic}: {error}")
                at, offset = message.partition(), message.offset()
                if offset is None or at is None or offset >= spans[at][1]:
                    continue
                latest[_key(message.key())] = (message.value(), at, offset)
            for p in list(remaining):
                if self._consumer.position([TopicPartition(topic, p)])[0].offset >= spans[p][1]:
                    remaining.discard(p)
        if remaining:
            raise KappaError(f"could not read {topic} to its end within 300 s")
        return latest

    def _last_followed(self, live: int) -> _Followed | None:
        """The version this group followed last: of the dataset's version topics committed on every partition,
        the one whose commits carry the most switches (commits without metadata: the live one first)."""
        pattern = re.compile(re.escape(self.dataset.dataset_name) + r"\.v(\d+)")
        topics = self._consumer.list_topics(timeout=10).topics
        versions = {name: int(m[1]) for name in topics if (m := pattern.fullmatch(name)) and not topics[name].error}
        wanted = [TopicPartition(name, p) for name in versions for p in topics[name].partitions]
        committed: dict[str, list[TopicPartition]] = {}
        for tp in self._consumer.committed(wanted, timeout=10) if wanted else []:
            committed.setdefault(tp.topic, []).append(tp)
        found = [
            _Followed(
                versions[name], {tp.partition: tp.offset for tp in tps}, max(_switches(tp.metadata) for tp in tps)
            )
            for name, tps in committed.items()
            if all(tp.offset >= 0 for tp in tps)  # a switch commits every partition
        ]
        return max(found, key=lambda f: (f.switches, f.version == live), default=None)

    def _rebuild(self, last: _Followed) -> None:
        """`delivered` of a follower that keeps none: each key's latest value in the version it followed last, up
        to its committed offsets (after a switch it had delivered the version's latest value per key, and then
        every record it committed)."""
        followed = self._topic(last.version).name
        spans = {}
        for p, committed in last.offsets.items():
            low, _high = self._consumer.get_watermark_offsets(TopicPartition(followed, p), timeout=10)
            spans[p] = (low, committed)
        for key, (raw, _p, _offset) in self._latest(followed, spans).items():
            self.delivered[key] = _digest(raw)

    def _commit_stored(self) -> None:
        try:
            self._consumer.commit(asynchronous=False)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError._NO_OFFSET:  # nothing consumed since the last commit
                raise

    def _commit_as(self, version: int) -> None:
        self._metadata = json.dumps({"version": version, "switch": self._switches})
        self.version = version

    def _switch(self, version: int) -> Iterator[Change]:
        """Move to `version`: read it to its end offsets now, deliver the keys whose value differs, go on from there."""
        topic = self._topic(version)
        if self.version is not None:
            # Everything handed over from the old version is committed before it is left: a restart that rebuilds
            # `delivered` from that version's commits must see all of it.
            self._commit_stored()
        else:
            last = self._last_followed(version)
            if last is not None:
                self._switches = max(last.switches, 0)
                if not self.delivered:
                    self._rebuild(last)
                if last.version == version:
                    # A restart on the version it was reading: resume where it committed.
                    self._consumer.assign([TopicPartition(topic.name, p, o) for p, o in last.offsets.items()])
                    self._commit_as(version)
                    return
            # Otherwise the alias moved while it was stopped: a full switch, whatever it committed on `version`.
        ends = self._ends(topic)
        latest = self._latest(topic.name, ends)
        # Keys the new version no longer has were deleted, as far as the follower is concerned.
        for key in [k for k in self.delivered if k not in latest]:
            latest[key] = (None, -1, -1)
        for key, (raw, p, offset) in latest.items():
            digest = _digest(raw)
            if self.delivered.get(key, b"-") != digest:
                yield self._change(key, raw, version, topic.name, p, offset)
                self.delivered[key] = digest  # handed over: the caller asked for the next change
        self._switches += 1
        self._commit_as(version)
        at_end = [TopicPartition(topic.name, p, high, metadata=self._metadata) for p, (_low, high) in ends.items()]
        self._consumer.assign(at_end)
        self._consumer.commit(offsets=at_end)

    def _live_version(self) -> int:
        return _required(self._aliases.live(self.dataset.name), self.dataset.name).version

    def changes(self, idle_timeout_s: float | None = None) -> Iterator[Change]:
        """Every change, following the alias; stops after `idle_timeout_s` with nothing new (None: never). The
        time the caller spends between two changes does not count: a cutover it makes meanwhile is still seen."""
        idle_since = time.monotonic()
        while True:
            now = time.monotonic()
            if self.version is None or now - self._checked >= self._alias_poll_s:
                self._checked = now
                wanted = self._live_version()
                if wanted != self.version:
                    for change in self._switch(wanted):
                        yield change
                        idle_since = time.monotonic()  # the caller's time with a change is not idle time
            message = self._consumer.poll(0.2)
            if message is None:
                if idle_timeout_s is not None and time.monotonic() - idle_since > idle_timeout_s:
                    return
                continue
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    continue
                raise KappaError(f"reading {self.dataset.name} v{self.version}: {error}")
            idle_since = time.monotonic()
            key, raw = _key(message.key()), message.value()
            digest = _digest(raw)
            topic, partition, offset = message.topic() or "", message.partition() or 0, message.offset() or 0
            if self.delivered.get(key, b"-") != digest:
                yield self._change(key, raw, self.version or 0, topic, partition, offset)
                self.delivered[key] = digest  # handed over: the caller asked for the next change
                idle_since = time.monotonic()
            self._consumer.store_offsets(
                offsets=[TopicPartition(topic, partition, offset + 1, metadata=self._metadata)]
            )
            if time.monotonic() - self._committed >= 1.0:  # a redelivery after a crash is deduplicated anyway
                self._consumer.commit(asynchronous=True)
                self._committed = time.monotonic()
