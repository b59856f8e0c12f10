"""`kappa topics apply` against the real broker: create, detect drift, repair, report."""

from collections.abc import Callable

from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from kappa.contracts.topic_declarations import Cleanup, Topic
from kappa.core.settings import KappaSettings
from kappa.kafka.clients import admin_client
from kappa.kafka.topic_admin import ChangeKind, apply, describe
from tests.waiting import wait_until


def _actual_configs(admin: AdminClient, name: str) -> dict[str, str]:
    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    entries = admin.describe_configs([resource])[resource].result(timeout=15)
    return {k: v.value for k, v in entries.items()}


def test_compacted_declaration_is_compacted_and_drift_is_repaired(
    stack: KappaSettings, unique_name: Callable[[str], str]
) -> None:
    admin = admin_client(stack)
    topic = Topic(unique_name("profiles"), partitions=3, cleanup=Cleanup.COMPACT, min_compaction_lag_ms=60_000)

    assert [(c.topic, c.kind) for c in apply(admin, [topic])] == [(topic.name, ChangeKind.CREATED)]
    configs = _actual_configs(admin, topic.name)
    assert configs["cleanup.policy"] == "compact"
    assert configs["min.compaction.lag.ms"] == "60000"
    assert configs["retention.ms"] == "-1"

    # Someone changes the topic by hand: drift is detected, repaired and reported.
    drifted = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic.name,
        incremental_configs=[ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SET)],
    )
    admin.incremental_alter_configs([drifted])[drifted].result(timeout=15)
    # KRaft acknowledges an alteration once the controller committed it; the broker applies it a moment later.
    wait_until(lambda: _actual_configs(admin, topic.name)["cleanup.policy"] == "delete", 30, "the hand edit applied")
    assert describe(admin, [topic])[0].config_drift(brokers=1) == {"cleanup.policy": ("delete", "compact")}

    [change] = apply(admin, [topic])
    assert change.kind is ChangeKind.ALTERED
    assert change.details == ("cleanup.policy: delete -> compact",)
    wait_until(lambda: _actual_configs(admin, topic.name)["cleanup.policy"] == "compact", 30, "the repair applied")

    # Applying again changes nothing.
    assert [c.kind for c in apply(admin, [topic])] == [ChangeKind.UNCHANGED]


def test_partitions_grow_but_never_shrink(stack: KappaSettings, unique_name: Callable[[str], str]) -> None:
    admin = admin_client(stack)
    name = unique_name("events")
    apply(admin, [Topic(name, partitions=2, cleanup=Cleanup.DELETE)])

    [grown] = apply(admin, [Topic(name, partitions=4, cleanup=Cleanup.DELETE)])
    assert grown.kind is ChangeKind.PARTITIONS_ADDED
    assert describe(admin, [Topic(name, partitions=4, cleanup=Cleanup.DELETE)])[0].partitions == 4

    [shrink] = apply(admin, [Topic(name, partitions=1, cleanup=Cleanup.DELETE)])
    assert shrink.kind is ChangeKind.DRIFT
    assert "Kafka cannot remove partitions" in shrink.details[0]


def test_a_keyed_topic_gets_new_partitions_only_when_forced(
    stack: KappaSettings, unique_name: Callable[[str], str]
) -> None:
    admin = admin_client(stack)
    name = unique_name("keyed")
    apply(admin, [Topic(name, partitions=2, cleanup=Cleanup.COMPACT)])
    wider = Topic(name, partitions=3, cleanup=Cleanup.COMPACT)

    [refused] = apply(admin, [wider])
    assert refused.kind is ChangeKind.DRIFT
    assert "not added" in refused.details[0]
    assert "new topic version and replay" in refused.details[0]
    assert describe(admin, [wider])[0].partitions == 2  # keys stay where they are

    [forced] = apply(admin, [wider], force_partitions=True)
    assert forced.kind is ChangeKind.PARTITIONS_ADDED
    assert forced.details[0].startswith("warning: partitions added to a keyed topic")
    assert describe(admin, [wider])[0].partitions == 3
