"""The alias follower on the real broker: a change counts as handed over only when the caller asks for the next
one, so a caller that fails on a change gets it again after a restart, during a switch to a version and after."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from kappa.contracts.avro_serde import AvroEncoder
from kappa.contracts.registry import Registry
from kappa.contracts.schema_files import topic_value_schema
from kappa.contracts.topic_declarations import Cleanup, Topic
from kappa.core.settings import KappaSettings
from kappa.kafka.aliases import TOPIC_KIND, AliasRegistry
from kappa.kafka.clients import Outgoing, produce_all, require_kafka
from kappa.kafka.topic_admin import apply
from kappa.runtime.readers import AliasConsumer, Change

pytestmark = pytest.mark.usefixtures("control_topics")


class CallerError(Exception):
    """What the caller's own processing raises on the change it cannot take."""


def click(event_id: str) -> dict[str, object]:
    return {"event_id": event_id, "user_id": "u1", "page": "/home", "referrer": None, "event_time": 1_767_225_600_000,
            "device": "DESKTOP", "profile_version": 1, "segment": "PRO", "country": "DE"}  # fmt: skip


def take_until(changes: Iterator[Change], failing_key: str, taken: list[str]) -> None:
    """The caller's loop: process each change, and fail on `failing_key`."""
    for change in changes:
        if change.key == failing_key:
            raise CallerError(change.key)
        taken.append(change.key)


@pytest.mark.slow
def test_a_change_the_caller_did_not_take_comes_again_after_a_restart(
    stack: KappaSettings, unique_name: Callable[[str], str]
) -> None:
    dataset = Topic(unique_name("followed"), 1, Cleanup.COMPACT, value_schema="enriched_clicks.avsc")
    physical = dataset.versioned(1)
    apply(require_kafka(stack), [physical])
    with Registry(stack.registry) as registry:
        encoder = AvroEncoder(registry, dataset.value_subject, topic_value_schema(stack.schemas_path, dataset))

    def write(*keys: str) -> None:
        produce_all(stack, physical.name, [Outgoing(key=k.encode(), value=encoder.encode(click(k))) for k in keys])

    write("e1", "e2", "e3")
    AliasRegistry(stack).move(dataset.name, job="enrich_clicks", kind=TOPIC_KIND, version=1, physical=physical.name,
                              expected_version=None, reason="test")  # fmt: skip
    group, delivered = unique_name("follower"), {}  # the digests, kept across restarts as the docs say

    def follower() -> AliasConsumer:
        return AliasConsumer(stack, dataset, group=group, delivered=delivered, alias_poll_s=0.5)

    # The first start switches to v1 (reads it to its end) and hands the keys over: the caller fails on e2.
    taken: list[str] = []
    with pytest.raises(CallerError), follower() as first:
        take_until(first.changes(idle_timeout_s=3), "e2", taken)
    assert taken == ["e1"]

    # Restarted: e2 comes again, e1 does not. Then the log grows, and the caller fails on e5.
    def restart_then_grow() -> None:
        with follower() as second:
            changes = second.changes(idle_timeout_s=3)
            take_until(iter([next(changes), next(changes)]), "none", taken)  # e2 and e3, from the switch
            write("e4", "e5")
            take_until(changes, "e5", taken)

    with pytest.raises(CallerError):
        restart_then_grow()
    assert taken == ["e1", "e2", "e3", "e4"]

    # Restarted on the version it was reading, from its committed offsets: e5 comes again, and nothing else.
    with follower() as third:
        take_until(third.changes(idle_timeout_s=3), "none", taken)
    assert taken == ["e1", "e2", "e3", "e4", "e5"]
