"""The alias follower on the real broker: a change counts as handed over only when the caller asks for the next
one, so a caller that fails on a change gets it again after a restart, during a switch to a version and after;
and a follower restarted after the alias moved while it was stopped gets exactly the changes of that move."""

from __future__ import annotations

import itertools
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


def click(event_id: str, page: str = "/home") -> dict[str, object]:
    return {"event_id": event_id, "user_id": "u1", "page": page, "referrer": None, "event_time": 1_767_225_600_000,
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


Page = str | None  # a key's value as the tests tell them apart: its page, None when the key is deleted


def changed(before: dict[str, Page], after: dict[str, Page]) -> list[tuple[str, Page]]:
    """What a follower must be told to go from one state to the other (None: absent or deleted)."""
    return sorted((k, after.get(k)) for k in before.keys() | after.keys() if before.get(k) != after.get(k))


def seen(changes: Iterator[Change], n: int | None = None) -> list[tuple[str, Page]]:
    """The next `n` changes (None: until the follower idles), as (key, page), in order."""
    return [(c.key, None if c.value is None else c.value["page"]) for c in itertools.islice(changes, n)]


@pytest.mark.slow
@pytest.mark.parametrize("keeps_state", [False, True], ids=["no-state", "state-kept"])
def test_a_rollback_while_the_follower_is_stopped_reverts_exactly_what_the_cutover_changed(
    stack: KappaSettings, unique_name: Callable[[str], str], keeps_state: bool
) -> None:
    dataset = Topic(unique_name("followed"), 2, Cleanup.COMPACT, value_schema="enriched_clicks.avsc")
    v1, v2 = dataset.versioned(1), dataset.versioned(2)
    apply(require_kafka(stack), [v1, v2])
    with Registry(stack.registry) as registry:
        encoder = AvroEncoder(registry, dataset.value_subject, topic_value_schema(stack.schemas_path, dataset))
    written: dict[str, dict[str, Page]] = {v1.name: {}, v2.name: {}}  # each version's latest page per key

    def write(topic: Topic, **pages: Page) -> None:
        # A key keeps its partition; the keys spread over both, so every partition's commit is tested.
        records = [
            Outgoing(key.encode(), None if page is None else encoder.encode(click(key, page)), ord(key[-1]) % 2)
            for key, page in pages.items()
        ]
        produce_all(stack, topic.name, records)
        written[topic.name].update(pages)

    aliases = AliasRegistry(stack)

    def move(to: Topic, version: int, expected: int | None) -> None:
        aliases.move(dataset.name, job="enrich_clicks", kind=TOPIC_KIND, version=version, physical=to.name,
                     expected_version=expected, reason="test")  # fmt: skip

    group, delivered = unique_name("follower"), {}

    def follower() -> AliasConsumer:
        return AliasConsumer(stack, dataset, group, delivered=delivered if keeps_state else None, alias_poll_s=0.5)

    # v2 (new logic) changes b, drops c, deletes d (a tombstone) and adds e; a and f are the same in both.
    write(v1, a="/a", b="/b", c="/c", d="/d", f="/f")
    write(v2, a="/a", b="/b2", d="/d", e="/e", f="/f")
    write(v2, d=None)
    move(v1, 1, None)
    with follower() as first:
        changes = first.changes(idle_timeout_s=3)
        assert sorted(seen(changes, 5)) == sorted(written[v1.name].items())
        move(v2, 2, 1)  # cutover while it runs
        cutover = changed(written[v1.name], written[v2.name])
        assert cutover == [("b", "/b2"), ("c", None), ("d", None), ("e", "/e")]
        assert sorted(seen(changes, len(cutover))) == cutover
        write(v2, g="/g", h="/h")  # live records on v2, one per partition: committed as the follower goes on
        assert sorted(seen(changes)) == [("g", "/g"), ("h", "/h")]

    # Restarted with no move in between: it resumes on v2, nothing comes again.
    with follower() as again:
        assert seen(again.changes(idle_timeout_s=3)) == []

    # Rolled back while it is stopped: the restarted follower reverts what v2 changed, each key once, from v1.
    move(v1, 1, 2)
    with follower() as after_rollback:
        changes = after_rollback.changes(idle_timeout_s=3)
        rollback = changed(written[v2.name], written[v1.name])
        assert rollback == [("b", "/b"), ("c", "/c"), ("d", "/d"), ("e", None), ("g", None), ("h", None)]
        taken = list(itertools.islice(changes, len(rollback)))
        assert sorted(seen(iter(taken))) == rollback
        assert {c.version for c in taken} == {1}
        write(v1, i="/i")  # then v1 goes on, and its new record comes once
        assert seen(changes) == [("i", "/i")]

    with follower() as last:
        assert seen(last.changes(idle_timeout_s=3)) == []
