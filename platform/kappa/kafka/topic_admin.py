"""`kappa topics apply | list`: make the cluster match the topic declarations, report drift."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

from kappa.contracts.topic_declarations import Topic
from kappa.core.errors import KappaError
from kappa.core.waiting import wait_until


class ChangeKind(StrEnum):
    CREATED = "created"
    ALTERED = "altered"
    PARTITIONS_ADDED = "partitions added"
    UNCHANGED = "unchanged"
    DRIFT = "drift"  # differs, and cannot be repaired automatically (e.g. fewer partitions wanted)


@dataclass(frozen=True)
class TopicChange:
    topic: str
    kind: ChangeKind
    details: tuple[str, ...] = ()


@dataclass(frozen=True)
class TopicState:
    """What the cluster has for a declared topic (None: the topic does not exist)."""

    topic: Topic
    partitions: int | None
    replication_factor: int | None
    configs: dict[str, str]

    def config_drift(self, brokers: int) -> dict[str, tuple[str | None, str]]:
        """Config name -> (actual, wanted) for every declared config that differs."""
        return {
            name: (self.configs.get(name), value)
            for name, value in self.topic.configs(brokers).items()
            if self.configs.get(name) != value
        }


def _admin_error(action: str, exc: Exception) -> KappaError:
    return KappaError(f"{action} failed: {exc}")


def broker_count(admin: AdminClient) -> int:
    try:
        return len(admin.describe_cluster(request_timeout=10).result(timeout=15).nodes)
    except KafkaException as exc:
        raise _admin_error("describing the Kafka cluster", exc) from None


def describe(admin: AdminClient, topics: Sequence[Topic]) -> list[TopicState]:
    """The actual partitions, replication and topic configs of each declared topic."""
    try:
        metadata = admin.list_topics(timeout=15)
    except KafkaException as exc:
        raise _admin_error("listing topics", exc) from None
    existing = [t for t in topics if t.name in metadata.topics]
    configs: dict[str, dict[str, str]] = {}
    if existing:
        futures = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, t.name) for t in existing])
        for resource, future in futures.items():
            entries = future.result(timeout=15)
            configs[resource.name] = {k: v.value for k, v in entries.items() if v.value is not None}
    states = []
    for topic in topics:
        meta = metadata.topics.get(topic.name)
        if meta is None:
            states.append(TopicState(topic, None, None, {}))
            continue
        partitions = meta.partitions
        rf = len(next(iter(partitions.values())).replicas) if partitions else None
        states.append(TopicState(topic, len(partitions), rf, configs.get(topic.name, {})))
    return states


def topic_configs(admin: AdminClient, topic: str) -> dict[str, str]:
    """One topic's configs as the brokers have them (unset ones left out), declared or not."""
    [future] = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)]).values()
    return {k: v.value for k, v in future.result(timeout=15).items() if v.value is not None}


def apply(admin: AdminClient, topics: Iterable[Topic], force_partitions: bool = False) -> list[TopicChange]:
    """Create missing topics, repair drifted configs, add partitions; report every topic's outcome.

    A keyed topic gets no new partitions (DRIFT, saying what to do instead) unless `force_partitions`: its keys
    would hash to other partitions, so one key's records would sit in two partitions, out of order, and
    compaction would keep both. The forced change says so in its details.
    """
    declared = list(topics)
    _reject_duplicates(declared)
    brokers = broker_count(admin)
    changes: list[TopicChange] = []
    to_create: list[Topic] = []
    for state in describe(admin, declared):
        topic = state.topic
        if state.partitions is None:
            to_create.append(topic)
            continue
        details: list[str] = []
        kind = ChangeKind.UNCHANGED
        drift = state.config_drift(brokers)
        if drift:
            ops = [
                ConfigEntry(name, wanted, incremental_operation=AlterConfigOpType.SET)
                for name, (_, wanted) in drift.items()
            ]
            resource = ConfigResource(ConfigResource.Type.TOPIC, topic.name, incremental_configs=ops)
            for future in admin.incremental_alter_configs([resource]).values():
                future.result(timeout=15)
            _wait_until_configured(admin, topic, brokers)
            details += [f"{name}: {actual} -> {wanted}" for name, (actual, wanted) in sorted(drift.items())]
            kind = ChangeKind.ALTERED
        if state.partitions < topic.partitions and topic.keyed and not force_partitions:
            details.append(
                f"partitions: has {state.partitions}, declared {topic.partitions}: not added, since a keyed topic's "
                "keys would move to other partitions (per-key order and compaction break). Declare a new topic "
                "version and replay into it, or run `kappa topics apply --force` to add them anyway"
            )
            kind = ChangeKind.DRIFT
        elif state.partitions < topic.partitions:
            if topic.keyed:
                details.append(
                    "warning: partitions added to a keyed topic (--force); records of one key written before and "
                    "after now sit in different partitions"
                )
            admin.create_partitions([NewPartitions(topic.name, topic.partitions)])[topic.name].result(timeout=15)
            _wait_until_visible(admin, {topic.name: topic.partitions})
            details.append(f"partitions: {state.partitions} -> {topic.partitions}")
            kind = ChangeKind.PARTITIONS_ADDED if kind is ChangeKind.UNCHANGED else kind
        elif state.partitions > topic.partitions:
            details.append(
                f"partitions: has {state.partitions}, declared {topic.partitions} (Kafka cannot remove partitions)"
            )
            kind = ChangeKind.DRIFT
        if state.replication_factor != topic.replication(brokers):
            details.append(
                f"replication factor: has {state.replication_factor}, declared {topic.replication(brokers)} "
                "(reassign partitions to change it)"
            )
            kind = ChangeKind.DRIFT
        changes.append(TopicChange(topic.name, kind, tuple(details)))
    if to_create:
        new = [NewTopic(t.name, t.partitions, t.replication(brokers), config=t.configs(brokers)) for t in to_create]
        for name, future in admin.create_topics(new, request_timeout=30).items():
            try:
                future.result(timeout=30)
            except KafkaException as exc:
                if exc.args and exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                    # Another apply created it a moment ago (two at once on a new cluster): the next apply checks it.
                    changes.append(TopicChange(name, ChangeKind.UNCHANGED, ("created meanwhile by another apply",)))
                    continue
                raise _admin_error(f"creating topic {name}", exc) from None
            changes.append(TopicChange(name, ChangeKind.CREATED))
        _wait_until_visible(admin, {t.name: t.partitions for t in to_create})
    return changes


def delete(admin: AdminClient, topics: Iterable[Topic]) -> list[str]:
    """Delete those of `topics` that exist; the names deleted."""
    existing = admin.list_topics(timeout=15).topics
    names = [t.name for t in topics if t.name in existing]
    deleted = []
    for name, future in admin.delete_topics(names, operation_timeout=30).items() if names else ():
        future.result(timeout=30)
        deleted.append(name)
    return deleted


def _wait_until_visible(admin: AdminClient, partitions: dict[str, int], timeout_s: float = 30.0) -> None:
    """Return once the metadata shows each topic with its partitions: the next caller may ask any broker."""

    def visible() -> bool:
        metadata = admin.list_topics(timeout=10)
        return all(n in metadata.topics and len(metadata.topics[n].partitions) >= p for n, p in partitions.items())

    wait_until(
        visible,
        timeout_s,
        f"changed topics {sorted(partitions)} but the metadata did not show it within {timeout_s:.0f} s",
    )


def _wait_until_configured(admin: AdminClient, topic: Topic, brokers: int, timeout_s: float = 30.0) -> None:
    """Return once the brokers describe the topic with its declared configs: the controller accepts a change
    before every broker's metadata image holds it, and the next caller may ask any broker."""
    wait_until(
        lambda: not describe(admin, [topic])[0].config_drift(brokers),
        timeout_s,
        f"altered topic {topic.name} but the brokers did not show it within {timeout_s:.0f} s",
    )


def _reject_duplicates(topics: Sequence[Topic]) -> None:
    seen: set[str] = set()
    for topic in topics:
        if topic.name in seen:
            raise KappaError(f"topic {topic.name} is declared twice")
        seen.add(topic.name)
