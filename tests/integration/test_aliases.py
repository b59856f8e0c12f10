"""The alias registry on the real broker. A move is a compare-and-set inside a transaction fenced by the
movers' shared transactional id, so of two racing cutovers exactly one wins, and a crashed mover changes nothing.
A follower's `AliasWatch` sees every committed move, in order, and never an aborted one."""

from __future__ import annotations

import dataclasses
import itertools
import threading
from collections.abc import Callable

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from kappa.core.errors import KappaError
from kappa.core.settings import KappaSettings
from kappa.kafka import aliases
from kappa.kafka.aliases import ALIASES, MOVER_ID, TOPIC_KIND, Alias, AliasRegistry, AliasWatch, Move

pytestmark = pytest.mark.usefixtures("control_topics")


def move(registry: AliasRegistry, dataset: str, version: int, expected: int | None, by: str = "alice") -> Alias:
    return registry.move(
        dataset,
        job="enrich_clicks",
        kind=TOPIC_KIND,
        version=version,
        physical=f"{dataset}.v{version}",
        expected_version=expected,
        reason="test",
        by=by,
    )


def first_commit_does(act: Callable[[Producer, float], None]) -> tuple[type[Producer], list[int]]:
    """A Producer for the alias registry whose first commit does `act(producer, timeout)` instead (fence it, fail
    it, commit and then fail); later commits are real. -> the class, and for each commit the number of the
    producer that made it (one producer is one attempt of a move: 1, 2, ...)."""
    commits: list[int] = []
    producers = itertools.count(1)

    class FirstCommitDoes(Producer):
        def __init__(self, config: dict[str, object]) -> None:
            super().__init__(config)
            self.attempt = next(producers)

        def commit_transaction(self, timeout: float = -1) -> None:
            commits.append(self.attempt)
            if len(commits) == 1:
                act(self, timeout)
            else:
                super().commit_transaction(timeout)

    return FirstCommitDoes, commits


def test_a_move_is_a_compare_and_set(stack: KappaSettings, unique_name: Callable[[str], str]) -> None:
    registry = AliasRegistry(stack)
    dataset = unique_name("ds")
    first = move(registry, dataset, 1, expected=None)
    assert registry.live(dataset) == first
    assert (first.previous_version, first.changed_by) == (None, "alice")

    # Someone who saw no alias yet (a stale view) cannot move it: the alias stays where it is.
    with pytest.raises(KappaError, match=rf"{dataset}: the alias points at v1 now, not vNone: someone moved it"):
        move(registry, dataset, 2, expected=None)
    second = move(registry, dataset, 2, expected=1, by="bob")
    assert registry.live(dataset) == second
    assert [(a.version, a.previous_version, a.changed_by) for a in registry.history(dataset)] == [
        (1, None, "alice"),
        (2, 1, "bob"),
    ]


def test_of_two_racing_cutovers_exactly_one_wins(stack: KappaSettings, unique_name: Callable[[str], str]) -> None:
    dataset = unique_name("race")
    move(AliasRegistry(stack), dataset, 1, expected=None)
    start = threading.Barrier(2)
    outcomes: dict[int, Alias | Exception] = {}

    def cut_over(version: int) -> None:
        registry = AliasRegistry(stack)  # each racer its own producer, as two operators' processes have
        start.wait()
        try:
            outcomes[version] = move(registry, dataset, version, expected=1)
        except Exception as exc:  # the loser's error is asserted on below
            outcomes[version] = exc

    racers = [threading.Thread(target=cut_over, args=(v,)) for v in (2, 3)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(120)
    won = [v for v, outcome in outcomes.items() if isinstance(outcome, Alias)]
    lost = [outcome for outcome in outcomes.values() if not isinstance(outcome, Alias)]
    assert len(won) == 1, outcomes
    assert len(lost) == 1, outcomes
    assert isinstance(lost[0], KappaError), outcomes  # a clear error, never a raw one
    registry = AliasRegistry(stack)
    live = registry.live(dataset)
    assert live is not None
    assert live.version == won[0]
    assert [a.version for a in registry.history(dataset)] == [1, won[0]]  # the loser wrote nothing


def test_a_watch_sees_each_committed_move_and_no_aborted_one(
    stack: KappaSettings, unique_name: Callable[[str], str]
) -> None:
    registry = AliasRegistry(stack)
    dataset = unique_name("watched")
    watch = AliasWatch(stack)
    try:
        assert watch.live(dataset) is None
        first = move(registry, dataset, 1, expected=None)
        assert watch.live(dataset) == first

        # A mover that crashes inside its transaction: its record is written, then aborted.
        crashed = dataclasses.replace(first, version=9, physical=f"{dataset}.v9", previous_version=1)

        def crash_while_moving() -> None:
            with registry._transaction(dataset) as producer:
                producer.produce(ALIASES.name, key=dataset.encode(), value=registry._encode(ALIASES, vars(crashed)))
                producer.flush(30)
                raise RuntimeError("the mover crashed before committing")

        with pytest.raises(RuntimeError, match="crashed before committing"):
            crash_while_moving()
        assert watch.live(dataset) == first
        assert registry.live(dataset) == first

        second = move(registry, dataset, 2, expected=1)
        assert watch.live(dataset) == second
        assert watch.live(dataset) == second  # nothing new since: the same answer
    finally:
        watch.close()


def test_an_open_move_of_another_dataset_hides_no_move(stack: KappaSettings, unique_name: Callable[[str], str]) -> None:
    """A read_committed reader stops at the partition's first open transaction. So while another dataset's move
    is open, a move of this one must neither wait for it nor check against a view that hides recent moves:
    every mover shares one transactional id, and starting a move ends any open one (which then changes nothing)."""
    registry = AliasRegistry(stack)
    this, other = unique_name("this"), unique_name("other")
    move(registry, this, 1, expected=None)
    stalled = dataclasses.replace(move(registry, other, 1, expected=None), version=2, previous_version=1)
    moved: list[Alias] = []

    def move_while_another_is_open() -> None:
        with AliasRegistry(stack)._transaction(other) as producer:  # another operator's move, stalled mid-way
            producer.produce(ALIASES.name, key=other.encode(), value=registry._encode(ALIASES, vars(stalled)))
            producer.flush(30)
            moved.append(move(AliasRegistry(stack), this, 2, expected=1))  # fences the stalled mover
            assert registry.live(this) == moved[0]  # seen at once, not after the stalled transaction's timeout

    for _attempt in range(3):  # the stack is shared: another test's mover may fence the stalled one before ours
        with pytest.raises(KappaError, match=rf"moving the alias of {other} was not committed"):
            move_while_another_is_open()
        if moved:
            break
    assert moved
    assert registry.live(this) == moved[0]
    assert registry.live(other) is not None
    assert registry.live(other).version == 1


def test_a_move_fenced_by_another_datasets_move_starts_again_and_lands_once(
    stack: KappaSettings, unique_name: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two operators (or two Dagster runs) cutting over different datasets at the same moment: the later mover
    fences the earlier one, whose move changed nothing; it starts again, check included, and lands once."""
    registry = AliasRegistry(stack)
    this, other = unique_name("this"), unique_name("other")
    move(registry, this, 1, expected=None)
    move(registry, other, 1, expected=None)
    checks = 0
    read_all = AliasRegistry.all

    def all_then_fenced(self: AliasRegistry) -> dict[str, Alias]:
        nonlocal checks
        checks += 1
        seen = read_all(self)
        if checks == 1:  # inside this move's first transaction: another operator moves `other` meanwhile
            move(AliasRegistry(stack), other, 2, expected=1)
        return seen

    mover = AliasRegistry(stack)
    monkeypatch.setattr(mover, "all", all_then_fenced.__get__(mover))
    moved = move(mover, this, 2, expected=1)
    # fenced once, then started again (more than once when another test's move on the shared stack fences it too)
    assert checks >= 2
    assert (moved.version, moved.previous_version) == (2, 1)
    assert [a.version for a in registry.history(this)] == [1, 2]  # one record: the fenced attempt wrote nothing
    assert [a.version for a in registry.history(other)] == [1, 2]


def test_movers_of_different_datasets_at_once_each_land_every_move(
    stack: KappaSettings, unique_name: Callable[[str], str]
) -> None:
    """Four operators each cutting one dataset over three times, all at once: every mover fences the others in
    turn, and each must still land all its moves, in order (CI's three workers once fenced one mover five times
    over, when a fenced move waited a fixed short time before it started again)."""
    datasets = [unique_name(f"busy{i}") for i in range(4)]
    start = threading.Barrier(len(datasets))
    failures: list[Exception] = []

    def cut_over_three_times(dataset: str) -> None:
        registry = AliasRegistry(stack)  # each mover its own producer, as separate processes have
        start.wait()
        try:
            for version in (1, 2, 3):
                move(registry, dataset, version, expected=version - 1 if version > 1 else None)
        except Exception as exc:  # asserted on below
            failures.append(exc)

    movers = [threading.Thread(target=cut_over_three_times, args=(d,)) for d in datasets]
    for mover in movers:
        mover.start()
    for mover in movers:
        mover.join(300)
    assert failures == []
    registry = AliasRegistry(stack)
    for dataset in datasets:
        assert [(a.version, a.previous_version) for a in registry.history(dataset)] == [(1, None), (2, 1), (3, 2)]


def test_a_set_moves_in_one_transaction_and_a_reader_never_sees_a_mix(
    stack: KappaSettings, unique_name: Callable[[str], str]
) -> None:
    registry = AliasRegistry(stack)
    datasets = [unique_name(f"set{i}") for i in range(3)]

    def moves(to: int, expected: int | None) -> list[Move]:
        return [Move(d, "enrich_clicks", TOPIC_KIND, to, f"{d}.v{to}", expected) for d in datasets]

    registry.move_set(moves(1, None), reason="first", by="alice")
    seen: list[tuple[int | None, ...]] = []
    stop = threading.Event()

    def poll() -> None:  # a reader of the registry throughout, as a downstream team's would be
        watch = AliasWatch(stack)
        try:
            while not stop.is_set():
                live = watch.all()  # one read: three calls of live() could straddle a move
                versions = tuple(live[d].version if d in live else None for d in datasets)
                seen.append(versions)
        finally:
            watch.close()

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        for to, expected in [(2, 1), (1, 2), (2, 1), (3, 2)]:
            moved = registry.move_set(moves(to, expected), reason=f"to v{to}", by="bob")
            assert [(a.dataset, a.version, a.previous_version) for a in moved] == [(d, to, expected) for d in datasets]
            assert len({a.changed_at for a in moved}) == 1  # one move, one time
        # One alias moved by someone else: the set's check fails and nothing of the set moves.
        move(registry, datasets[1], 4, expected=3)
        with pytest.raises(KappaError, match=rf"{datasets[1]}: the alias points at v4 now, not v3.*nothing was moved"):
            registry.move_set(moves(5, 3), reason="stale", by="carol")
    finally:
        stop.set()
        poller.join(60)
    assert {a.dataset: a.version for a in registry.all().values() if a.dataset in datasets} == dict(
        zip(datasets, [3, 4, 3], strict=True)
    )
    mixed = [s for s in seen if len(set(s)) > 1 and s != (3, 4, 3)]
    assert not mixed, mixed[:3]
    # The reader saw the moves themselves, not only the first and last state.
    assert {(1, 1, 1), (3, 3, 3)} <= set(seen)


def test_a_mover_fenced_between_its_write_and_its_commit_starts_again_and_lands_once(
    stack: KappaSettings, unique_name: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another mover takes the transactional id after this move wrote its record and before it commits: the
    commit is refused, the record is aborted, and the move starts again and lands once."""
    dataset = unique_name("fenced")
    registry = AliasRegistry(stack)
    move(registry, dataset, 1, expected=None)

    def fenced_then_commit(producer: Producer, timeout: float) -> None:
        Producer({"bootstrap.servers": stack.bootstrap, "transactional.id": MOVER_ID}).init_transactions(30)
        Producer.commit_transaction(producer, timeout)  # refused: another mover holds the id now

    fenced, commits = first_commit_does(fenced_then_commit)
    monkeypatch.setattr(aliases, "Producer", fenced)
    moved = move(registry, dataset, 2, expected=1)
    assert len(commits) >= 2
    assert (moved.version, moved.previous_version) == (2, 1)
    assert [a.version for a in registry.history(dataset)] == [1, 2]  # the fenced attempt's record was aborted


@pytest.mark.parametrize("landed", [True, False], ids=["the-commit-landed", "it-did-not"])
def test_a_commit_failed_by_the_broker_is_retried_and_recognised_if_it_landed(
    stack: KappaSettings, unique_name: Callable[[str], str], monkeypatch: pytest.MonkeyPatch, landed: bool
) -> None:
    """CI once saw "EndTxn commit failed: Unknown broker error" (librdkafka: the transaction needs an abort),
    and the move failed. Its outcome is unknown to the mover: the broker may have committed before failing the
    reply. The move starts again, and its next attempt either finds its own record live (one record, and no
    "someone moved it") or writes it."""
    dataset = unique_name("unknown")
    registry = AliasRegistry(stack)
    move(registry, dataset, 1, expected=None)

    def broker_fails_it(producer: Producer, timeout: float) -> None:
        if landed:
            Producer.commit_transaction(producer, timeout)
        unknown = KafkaError(KafkaError.UNKNOWN, "EndTxn commit failed: Unknown broker error", txn_requires_abort=True)
        raise KafkaException(unknown)

    failing, commits = first_commit_does(broker_fails_it)
    monkeypatch.setattr(aliases, "Producer", failing)
    moved = move(registry, dataset, 2, expected=1, by="bob")
    # The failed commit, then the next attempt's (with nothing in it, if the first landed). Every mover shares one
    # transactional id, so a move elsewhere on the broker (another test's cutover) may fence an attempt: more
    # attempts are allowed, more records are not (the history below).
    assert len(commits) >= 2
    assert (moved.version, moved.previous_version, moved.changed_by) == (2, 1, "bob")
    history = registry.history(dataset)
    assert [a.version for a in history] == [1, 2]  # written once, whether the first commit landed or not
    assert history[-1] == moved


def test_a_refused_commit_that_needs_no_retry_fails_clearly(
    stack: KappaSettings, unique_name: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fatal error that is not a fencing (here the broker refusing the transactional id) is not retried for
    two minutes: it fails the move at once, with the error, and nothing moves."""
    dataset = unique_name("refused")
    registry = AliasRegistry(stack)
    move(registry, dataset, 1, expected=None)

    def refused(producer: Producer, _timeout: float) -> None:
        producer.abort_transaction(30)  # the broker ended it: nothing is left open to hold readers back
        raise KafkaException(KafkaError(KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "not authorized", fatal=True))

    refusing, commits = first_commit_does(refused)
    monkeypatch.setattr(aliases, "Producer", refusing)
    with pytest.raises(KappaError, match=rf"moving the alias of {dataset} failed at its commit: .*not authorized"):
        move(registry, dataset, 2, expected=1)
    assert len(commits) == 1  # not retried
    assert [a.version for a in registry.history(dataset)] == [1]


def test_a_commit_that_timed_out_is_resumed_and_lands_once(
    stack: KappaSettings, unique_name: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A retriable commit error (librdkafka's timeout while the coordinator is slow): the same commit is resumed,
    in the same transaction, and the move lands once without starting again."""
    dataset = unique_name("timedout")
    registry = AliasRegistry(stack)
    move(registry, dataset, 1, expected=None)

    def times_out(_producer: Producer, _timeout: float) -> None:
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "commit timed out", retriable=True))

    timing_out, commits = first_commit_does(times_out)
    monkeypatch.setattr(aliases, "Producer", timing_out)
    moved = move(registry, dataset, 2, expected=1)
    # Resumed: the attempt whose commit timed out commits again itself, not a new attempt (a new producer). Every
    # mover shares one transactional id, so another test's move on the broker may fence the resumed commit (CI
    # saw five commits in four attempts): later attempts are allowed, more records are not (the history below).
    assert len(commits) >= 2
    assert commits[1] == commits[0]
    assert [a.version for a in registry.history(dataset)] == [1, 2]
    assert registry.live(dataset) == moved
