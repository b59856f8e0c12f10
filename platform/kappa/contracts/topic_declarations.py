"""Topic declarations: a topic is declared once, in code, with everything that makes it a retained, replayable
log: partitions, cleanup policy, retention, compaction lag (the replay window of a compacted entity topic),
durability, its schemas and how they may evolve.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum

from kappa.contracts.compatibility import Compatibility
from kappa.contracts.dead_letter_format import dlq_topic, late_topic
from kappa.core.errors import KappaError

FOREVER = -1  # retention.ms = -1: a retained log keeps everything
MINUTE_MS = 60 * 1000  # event times and durations are epoch milliseconds everywhere
HOUR_MS = 60 * MINUTE_MS
DAY_MS = 24 * 60 * MINUTE_MS  # one day in milliseconds, for retention and compaction lags
SIDE_RETENTION_MS = 30 * DAY_MS  # dead letters and late events: 30 days to inspect and re-inject them


class Cleanup(StrEnum):
    """A topic's `cleanup.policy`: what Kafka removes, and when."""

    DELETE = "delete"  # time/size retention only
    COMPACT = "compact"  # latest value per key, kept forever
    COMPACT_DELETE = "compact,delete"  # compacted, and older than retention.ms deleted too


@dataclass(frozen=True)
class Topic:
    """One Kafka topic as the platform wants it."""

    name: str  # the topic's name in Kafka; a job version writes its output to `<dataset>.v<version>` (`versioned`)
    partitions: int  # fixed for a keyed topic: adding partitions would move its keys
    cleanup: Cleanup  # what Kafka removes: by time, by key (compaction), or both
    retention_ms: int = FOREVER  # how long records are kept (`retention.ms`); FOREVER: a retained log
    # A compacted topic keeps every version younger than this: the replay window it promises.
    min_compaction_lag_ms: int = 0
    replication_factor: int | None = None  # None: min(3, brokers in the cluster)
    min_insync_replicas: int | None = None  # None: min(2, replication factor)
    key_schema: str | None = None  # file in schemas/, when the key is structured
    # The value field every record's key must equal (UTF-8 text): another key is a `key-mismatch` dead letter.
    key_field: str | None = None
    # The value field that places a record (kappa.kafka.partitioning.partition_for, of its text): every record of
    # one user in one partition, so the user's order is the log's in every run; a record elsewhere is a
    # `partition-mismatch` dead letter. None: by key (Kafka's default partitioner).
    partition_field: str | None = None
    # Null values (tombstones) delete their key: meaningful here. Elsewhere they are `tombstone-on-source`.
    deletes: bool = False
    value_schema: str | None = None  # file in schemas/
    # How the value (and key) schema may evolve; the registry enforces it, `kappa schemas check` explains it.
    compatibility: Compatibility = Compatibility.BACKWARD_TRANSITIVE
    doc: str = ""  # what a record of the topic is, in one sentence (shown in Dagster)
    extra_configs: dict[str, str] = field(default_factory=dict)  # other topic configs, as Kafka spells them
    # The logical dataset a physical topic holds a version of (`enriched_clicks` for `enriched_clicks.v2`):
    # every version shares its schema subject, so consumers following the alias decode each one alike.
    dataset: str = ""

    def __post_init__(self) -> None:
        if self.partitions < 1:
            raise KappaError(f"topic {self.name}: partitions must be >= 1 (got {self.partitions})")
        if self.min_compaction_lag_ms and self.cleanup is Cleanup.DELETE:
            raise KappaError(f"topic {self.name}: min_compaction_lag_ms only applies to compacted topics")

    @property
    def keyed(self) -> bool:
        """Records are placed by key: compacted (compaction is per key and per partition) or a declared key
        field. A keyed topic's partition count is part of its contract: adding partitions moves keys."""
        return self.cleanup is not Cleanup.DELETE or self.key_field is not None

    @property
    def dataset_name(self) -> str:
        """The logical dataset: `dataset`, or the topic's own name."""
        return self.dataset or self.name

    @property
    def value_subject(self) -> str:
        """The registry subject of the values (TopicNameStrategy on the dataset's name)."""
        return f"{self.dataset_name}-value"

    def versioned(self, version: int) -> Topic:
        """The physical topic of one job version's output: `<dataset>.v<version>`."""
        return replace(self, name=f"{self.dataset_name}.v{version}", dataset=self.dataset_name)

    def replication(self, brokers: int) -> int:
        """The replication factor on a cluster of `brokers` brokers."""
        return self.replication_factor or min(3, brokers)

    def configs(self, brokers: int) -> dict[str, str]:
        """The topic-level configs the declaration implies, as Kafka spells them."""
        rf = self.replication(brokers)
        wanted = {
            "cleanup.policy": self.cleanup.value,
            "retention.ms": str(self.retention_ms),
            "min.insync.replicas": str(self.min_insync_replicas or min(2, rf)),
        }
        if self.cleanup is not Cleanup.DELETE:
            wanted["min.compaction.lag.ms"] = str(self.min_compaction_lag_ms)
        return {**wanted, **self.extra_configs}


def side_topic_declaration(name: str, doc: str) -> Topic:
    """Original bytes plus headers saying why, kept 30 days to inspect and re-inject."""
    return Topic(name=name, partitions=1, cleanup=Cleanup.DELETE, retention_ms=SIDE_RETENTION_MS, doc=doc)


def dead_letters_of(topic: Topic) -> Topic:
    """The dead-letter topic of a (physical) topic: records that could not be decoded or broke their contract."""
    return side_topic_declaration(
        dlq_topic(topic.name), f"Records of {topic.name} that could not be decoded or broke their contract."
    )


def late_events_of(topic: Topic) -> Topic:
    """The side topic of input records too late for the job writing `topic`."""
    return side_topic_declaration(
        late_topic(topic.name),
        f"Input records the job writing {topic.name} set aside as beyond its lateness contract, counted.",
    )
