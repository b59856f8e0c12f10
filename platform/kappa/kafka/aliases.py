"""The alias registry and the audit trail: which version of each dataset readers follow, and who moved it.

Physical outputs are versioned (`enriched_clicks.v2`, `<delta_root>/page_stats/v2`); readers ask for the
dataset (`enriched_clicks`) and follow its alias. The registry is the compacted topic `kappa.aliases`, keyed by
dataset: its latest record per key is the live version, and the records before it are the history, kept
until the cleaner compacts them (the audit trail `kappa.audit` keeps every step for good).

Moving an alias is one record written in a Kafka transaction, under one transactional id for every mover
(`MOVER_ID`): starting it fences any other mover and ends its open transaction, and the move checks, inside
the transaction, that the alias is still where the caller saw it. So a cutover is atomic, and two racing
cutovers cannot both win. The id is shared across datasets on purpose: a read_committed reader stops at the
partition's first open transaction, so an open move of another dataset could hide a committed move of this
one from the check. Two moves at once fence each other; the fenced one changes nothing and starts again, check
included, after a random wait that doubles each time (so racing movers stop fencing each other in turn), until
`MOVE_RETRY_S` has passed: a move of another dataset does not fail this one, a move of this one does (the check).
A commit the broker fails (librdkafka: the transaction needs an abort) starts the move again too; since such a
commit may have landed all the same, the next attempt takes its own earlier records, found live, as the answer.
A set of aliases (a cascade replay's datasets) moves in one such transaction, with the check on each: a
read_committed reader sees every alias of the set moved, or none of them.

On a secured cluster the registry and the audit trail are written by one principal, `kappa-cutover` (`MOVER_USER`),
which no job version is: a job may read where an alias points, never move it.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import random
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from kappa.contracts.avro_serde import AvroDecoder, AvroEncoder
from kappa.contracts.registry import registry_of
from kappa.contracts.schema_files import load
from kappa.contracts.topic_declarations import FOREVER, Cleanup, Topic
from kappa.core.errors import KappaError
from kappa.core.security import Credential, librdkafka_config, user_credential
from kappa.core.settings import KappaSettings
from kappa.kafka.acls import Access

ALIASES = Topic(
    name="kappa.aliases",
    partitions=1,  # one partition: a total order of moves, read in a few milliseconds
    cleanup=Cleanup.COMPACT,
    value_schema="kappa.aliases.avsc",
    doc="The live version of each dataset (compacted by dataset); readers follow it.",
)
AUDIT = Topic(
    name="kappa.audit",
    partitions=1,
    cleanup=Cleanup.DELETE,
    retention_ms=FOREVER,
    value_schema="kappa.audit.avsc",
    doc="Every deployment and replay step: who, when, from and to (retained forever).",
)
CONTROL_TOPICS: tuple[Topic, ...] = (ALIASES, AUDIT)
MOVER_ID = "kappa.aliases.mover"  # the transactional id of every alias move (see the module's docstring)
MOVER_USER = "kappa-cutover"  # the one principal that writes the alias registry and the audit trail (secured)
MOVE_RETRY_S = 120.0  # a move fenced by other movers starts again until this has passed
MOVE_BACKOFF_S = (0.1, 5.0)  # the first and the longest wait before a fenced move starts again
MOVE_TIMEOUT_MS = 60_000  # the broker aborts a crashed mover's open transaction after this
READ_TO_END_S = MOVE_TIMEOUT_MS / 1000 + 10  # a reader may wait for such an abort before it sees the end
RETRIABLE_S = 10.0  # how long a new topic's leader election is waited out
COMMIT_RETRY_S = 30.0  # how long a commit that failed retriably (a coordinator moving, a timeout) is resumed
_NO_LEADER_YET = (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE)
# What librdkafka reports when a newer mover took the transactional id: this mover's transaction is aborted.
# A producer fenced while it produces raises the generic _FATAL ("Unable to produce message: Local: Fatal error"),
# not the fencing code (seen in CI: a cascade's set move racing a replay test's move on the shared stack). A
# transactional mover's fatal state is its fencing in practice, and a retry is safe: its move changed nothing, and
# the next attempt checks again.
_FENCED_CODES = frozenset(
    {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH, KafkaError._FATAL}
)

TOPIC_KIND, DELTA_KIND = "TOPIC", "DELTA"


def operator() -> str:
    """Who is acting when no `--by` is given: KAPPA_OPERATOR (e.g. set per user by a wrapper), else the login
    name. (Dagster passes `--by`: the run config's `by`, else the run's `dagster/user` tag.)"""
    return os.environ.get("KAPPA_OPERATOR") or getpass.getuser()


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class Alias:
    dataset: str
    kind: str  # TOPIC or DELTA
    job: str
    version: int
    physical: str
    previous_version: int | None
    changed_by: str
    changed_at: int
    reason: str


@dataclass(frozen=True)
class Move:
    """One alias of a move: where it goes, and where it must still point (None: nowhere yet)."""

    dataset: str
    job: str
    kind: str
    version: int
    physical: str
    expected_version: int | None


@dataclass(frozen=True)
class Step:
    job: str
    step: str
    from_version: int | None
    to_version: int
    outcome: str  # ok, refused, failed, interrupted
    by: str
    at: int
    details: str  # JSON

    @property
    def facts(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.details) if self.details else {}
        return parsed


class ControlReader:
    """Reads a one-partition control topic in log order (read_committed: no aborted move). Kept open, each
    `read_new()` returns what was appended since the last one; when nothing was, that costs one offsets
    request, not a new consumer."""

    def __init__(self, settings: KappaSettings, topic: Topic, schema: dict[str, Any]) -> None:
        self._settings = settings
        self._topic = topic
        self._partition = TopicPartition(topic.name, 0)
        self._consumer = Consumer(
            {
                **librdkafka_config(settings),
                "group.id": "kappa.control-reader",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                # The end is the partition's end: the last offsets of a transactional write are markers that
                # are never delivered, so "the offset before the high watermark" may never come.
                "enable.partition.eof": True,
                "log_level": 0,
            }
        )
        self._registry = registry_of(settings)
        self._decoder = AvroDecoder(self._registry, schema)
        self._end: int | None = None  # the partition end (past any markers) where the last read stopped

    def read_new(self) -> list[dict[str, Any]]:
        name = self._topic.name
        patience = time.monotonic() + RETRIABLE_S
        while True:
            try:
                if self._end is None:
                    meta = self._consumer.list_topics(name, timeout=10).topics.get(name)
                    if meta is None or meta.error is not None:
                        return []  # a cluster where nothing was deployed yet (`kappa topics apply` creates it)
                low, high = self._consumer.get_watermark_offsets(self._partition, timeout=10, cached=False)
                break
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                if error is not None and error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    return []
                # A topic created a moment ago has no leader yet (NOT_LEADER_FOR_PARTITION): that passes.
                if error is not None and error.code() in _NO_LEADER_YET and time.monotonic() < patience:
                    time.sleep(0.2)
                    continue
                raise KappaError(f"cannot read {name} at {self._settings.bootstrap}: {exc} (is Kafka up?)") from None
        if self._end is None:
            if high <= low:
                return []
            self._consumer.assign([TopicPartition(name, 0, low)])
        elif high <= self._end:
            return []
        records: list[dict[str, Any]] = []
        deadline = time.monotonic() + READ_TO_END_S
        while True:
            if time.monotonic() > deadline:
                raise KappaError(f"could not read {name} to its end within {READ_TO_END_S:.0f} s")
            message = self._consumer.poll(1.0)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    # The event carries the end it reached: what arrives after it raises the watermark past it.
                    reached = message.offset()
                    if reached is not None and 0 <= reached < high:
                        # Short of the end this call saw: an end reached earlier in the background (queued), or
                        # another mover's open transaction holding back what was committed after it. Reading
                        # on, every move committed before this call is returned (read your own move).
                        continue
                    self._end = reached if reached is not None and reached >= 0 else high
                    return records
                raise KappaError(f"reading {name}: {error}")
            if message.value() is not None:
                records.append(self._decoder.decode(message.value()))

    def close(self) -> None:
        self._consumer.close()
        self._registry.close()


def _read_all(settings: KappaSettings, topic: Topic, schema: dict[str, Any]) -> list[dict[str, Any]]:
    """Every record of a one-partition control topic, in log order."""
    reader = ControlReader(settings, topic, schema)
    try:
        return reader.read_new()
    finally:
        reader.close()


def _alias(record: dict[str, Any]) -> Alias:
    return Alias(**(record | {"changed_at": _millis(record["changed_at"])}))


class AliasWatch:
    """Every dataset's live alias, kept current by one open reader of `kappa.aliases`: what a follower asks every
    few seconds (`AliasConsumer`) costs one offsets request while nothing moves."""

    def __init__(self, settings: KappaSettings) -> None:
        self._reader = ControlReader(settings, ALIASES, load(settings.schemas_path / "kappa.aliases.avsc"))
        self._live: dict[str, Alias] = {}

    def live(self, dataset: str) -> Alias | None:
        return self.all().get(dataset)

    def all(self) -> dict[str, Alias]:
        """Every dataset's live alias, as of one read: a set moved together is seen moved together."""
        for record in self._reader.read_new():
            alias = _alias(record)
            self._live[alias.dataset] = alias
        return dict(self._live)

    def close(self) -> None:
        self._reader.close()


class AliasRegistry:
    """Read and move aliases; append to and read the audit trail."""

    def __init__(self, settings: KappaSettings) -> None:
        self.settings = settings
        self._alias_schema = load(settings.schemas_path / "kappa.aliases.avsc")
        self._step_schema = load(settings.schemas_path / "kappa.audit.avsc")

    # -------------------------------------------------------------- aliases
    def all(self) -> dict[str, Alias]:
        """Dataset -> its live alias."""
        latest: dict[str, Alias] = {}
        for record in _read_all(self.settings, ALIASES, self._alias_schema):
            latest[record["dataset"]] = _alias(record)
        return latest

    def live(self, dataset: str) -> Alias | None:
        return self.all().get(dataset)

    def history(self, dataset: str) -> list[Alias]:
        """The moves of one dataset's alias still in the (compacted) topic, oldest first."""
        records = _read_all(self.settings, ALIASES, self._alias_schema)
        return [_alias(record) for record in records if record["dataset"] == dataset]

    def move(
        self,
        dataset: str,
        *,
        job: str,
        kind: str,
        version: int,
        physical: str,
        expected_version: int | None,
        reason: str,
        by: str | None = None,
    ) -> Alias:
        """Point `dataset` at `version`, atomically, if it still points at `expected_version` (None: no alias)."""
        move = Move(dataset, job, kind, version, physical, expected_version)
        return self.move_set([move], reason=reason, by=by)[0]

    def move_set(self, moves: Sequence[Move], *, reason: str, by: str | None = None) -> list[Alias]:
        """Move every alias of `moves` in one transaction, each only if it still points where the move expects:
        a reader sees all of them moved or none, and one alias moved by someone else meanwhile fails the set."""
        if len({m.dataset for m in moves}) != len(moves):
            raise KappaError(f"a set moves each alias once: {', '.join(m.dataset for m in moves)}")
        deadline, backoff = time.monotonic() + MOVE_RETRY_S, MOVE_BACKOFF_S[0]
        attempted: list[Alias] = []  # what the attempts before wrote: one of them may have landed after all
        while True:
            try:
                return self._move_once(moves, reason, by, attempted)
            except MoveNotCommittedError as exc:
                attempted.extend(exc.attempted)
                if time.monotonic() >= deadline:
                    landed = (
                        " (one may have landed: `kappa replay status` shows the live versions)" if attempted else ""
                    )
                    raise KappaError(f"{exc}; gave up after {MOVE_RETRY_S:.0f} s of attempts{landed}") from None
            # Full jitter, doubling: a fixed short wait let three movers (CI's workers) fence each other in
            # turn five times over, since one move (fence, read the aliases, write, commit) takes longer.
            time.sleep(random.uniform(0, backoff))
            backoff = min(2 * backoff, MOVE_BACKOFF_S[1])

    def _move_once(
        self, moves: Sequence[Move], reason: str, by: str | None, attempted: Sequence[Alias] = ()
    ) -> list[Alias]:
        """One attempt in one transaction. `attempted`: the records of earlier attempts whose commit's outcome
        is unknown; if the aliases hold exactly one attempt's records, that attempt landed and is the answer."""
        names = ", ".join(m.dataset for m in moves)
        moved: list[Alias] = []
        with self._transaction(names, moved) as producer:
            current = self.all()  # read after fencing: no other mover can commit in between
            landed = _landed(moves, current, attempted)
            if landed is not None:
                return landed  # its commit failed as seen from here, yet reached the broker: nothing to write
            changed_at = now_ms()  # one time for the set: it is one move
            for move in moves:
                seen = current[move.dataset].version if move.dataset in current else None
                if seen != move.expected_version:
                    raise KappaError(
                        f"{move.dataset}: the alias points at v{seen} now, not v{move.expected_version}: someone "
                        f"moved it; nothing was moved{' in the set' if len(moves) > 1 else ''}. Check "
                        "`kappa replay status` and retry"
                    )
                alias = Alias(
                    dataset=move.dataset,
                    kind=move.kind,
                    job=move.job,
                    version=move.version,
                    physical=move.physical,
                    previous_version=seen,
                    changed_by=by or operator(),
                    changed_at=changed_at,
                    reason=reason,
                )
                producer.produce(ALIASES.name, key=move.dataset.encode(), value=self._encode(ALIASES, asdict(alias)))
                moved.append(alias)
        return moved

    # -------------------------------------------------------------- audit trail
    def record(
        self,
        job: str,
        step: str,
        *,
        to_version: int,
        from_version: int | None,
        outcome: str = "ok",
        details: dict[str, Any] | None = None,
        by: str | None = None,
    ) -> Step:
        entry = Step(
            job=job,
            step=step,
            from_version=from_version,
            to_version=to_version,
            outcome=outcome,
            by=by or operator(),
            at=now_ms(),
            details=json.dumps(details or {}, sort_keys=True, default=str),
        )
        producer = Producer({**self._writer(), "enable.idempotence": True, "acks": "all"})
        producer.produce(AUDIT.name, key=job.encode(), value=self._encode(AUDIT, asdict(entry)))
        if producer.flush(30):
            raise KappaError(f"could not record step {step} of {job} in {AUDIT.name} within 30 s (is Kafka up?)")
        return entry

    def steps(self, job: str) -> list[Step]:
        """The job's steps, oldest first."""
        entries = []
        for record in _read_all(self.settings, AUDIT, self._step_schema):
            if record["job"] == job:
                record["at"] = _millis(record["at"])
                entries.append(Step(**record))
        return entries

    # -------------------------------------------------------------- plumbing
    def _writer(self) -> dict[str, Any]:
        """The client configuration of whoever writes the registry and the audit: `MOVER_USER` when secured."""
        return librdkafka_config(self.settings, mover_login(self.settings))

    def _encode(self, topic: Topic, record: dict[str, Any]) -> bytes:
        schema = self._alias_schema if topic is ALIASES else self._step_schema
        with registry_of(self.settings) as registry:
            encoder = AvroEncoder(registry, topic.value_subject, schema, register=False)
        return encoder.encode(record)

    @contextlib.contextmanager
    def _transaction(self, dataset: str, written: Sequence[Alias] = ()) -> Iterator[Producer]:
        """A transaction of the movers' id; `written` (filled by the caller as it produces) goes with a failure
        that may have committed, so that the next attempt can recognise it."""
        producer = Producer(
            {
                **self._writer(),
                "transactional.id": MOVER_ID,
                "transaction.timeout.ms": MOVE_TIMEOUT_MS,
            }
        )
        try:
            producer.init_transactions(30)  # fences any earlier mover; its open transaction is aborted
            producer.begin_transaction()
        except KafkaException as exc:
            raise KappaError(f"cannot start the alias transaction for {dataset}: {exc} (is Kafka up?)") from None
        try:
            yield producer
        except BaseException as exc:
            # A fenced mover's abort fails too (the broker has aborted its transaction already): the first error
            # is the one to report.
            with contextlib.suppress(KafkaException):
                producer.abort_transaction(30)
            if isinstance(exc, KafkaException):  # e.g. fenced by a racing mover while producing
                raise _failed_move(dataset, exc) from None
            raise
        deadline = time.monotonic() + COMMIT_RETRY_S
        while True:
            try:
                producer.commit_transaction(30)
                return
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                if isinstance(error, KafkaError) and error.retriable() and time.monotonic() < deadline:
                    time.sleep(0.2)
                    continue  # librdkafka resumes the same commit
                if isinstance(error, KafkaError) and error.txn_requires_abort():
                    with contextlib.suppress(KafkaException):
                        producer.abort_transaction(30)
                raise _failed_commit(dataset, exc, written) from None


class MoveNotCommittedError(KappaError):
    """This move's transaction ended without a commit this mover saw: another mover took the transactional id,
    or the broker failed the commit (CI once saw "EndTxn commit failed: Unknown broker error", which librdkafka
    reports as needing an abort). It changed nothing, unless a commit that failed as seen from here reached
    the broker: `attempted` holds what it wrote, so that the next attempt recognises it."""

    def __init__(self, message: str, attempted: Sequence[Alias]) -> None:
        super().__init__(message)
        self.attempted = tuple(attempted)


def _failed_move(dataset: str, exc: KafkaException) -> KappaError:
    """An attempt that failed before its commit, its transaction aborted: fenced (start again) or a clear end."""
    error = exc.args[0] if exc.args else None
    if isinstance(error, KafkaError) and error.code() in _FENCED_CODES:
        return MoveNotCommittedError(f"moving the alias of {dataset} was not committed: {exc}", ())
    return KappaError(f"moving the alias of {dataset} failed, nothing changed: {exc}")


def _failed_commit(dataset: str, exc: KafkaException, written: Sequence[Alias]) -> KappaError:
    """An attempt whose commit failed: its outcome may be unknown. Fenced, aborted by the broker, or still
    retriable after COMMIT_RETRY_S: start again (the next mover's fencing ends the transaction, and the next
    attempt finds `written` live if it landed). Any other fatal error ends the move, saying what to check."""
    error = exc.args[0] if exc.args else None
    if isinstance(error, KafkaError) and (
        error.code() in _FENCED_CODES or error.txn_requires_abort() or error.retriable()
    ):
        return MoveNotCommittedError(f"moving the alias of {dataset} was not committed: {exc}", written)
    return KappaError(
        f"moving the alias of {dataset} failed at its commit: {exc}. The broker ends the transaction within "
        f"{MOVE_TIMEOUT_MS // 1000} s if it holds it open; `kappa replay status` shows the live versions"
    )


def _landed(moves: Sequence[Move], current: Mapping[str, Alias], attempted: Sequence[Alias]) -> list[Alias] | None:
    """The records of one earlier attempt when the aliases hold them all (that attempt's commit landed), else
    None. An attempt's records share their `changed_at`, so two attempts' records are never mixed up."""
    for changed_at in dict.fromkeys(a.changed_at for a in attempted):
        records = {a.dataset: a for a in attempted if a.changed_at == changed_at}
        if all(current.get(m.dataset) == records.get(m.dataset) for m in moves):
            return [records[m.dataset] for m in moves]
    return None


def _millis(value: Any) -> int:
    """fastavro decodes timestamp-millis as an aware datetime; the dataclasses keep epoch milliseconds."""
    return value if isinstance(value, int) else int(value.timestamp() * 1000)


def mover_login(settings: KappaSettings) -> Credential | None:
    """The cutover principal's login (None on a plaintext cluster), from its password file."""
    if not settings.secured:
        return None
    try:
        return user_credential(settings, MOVER_USER)
    except KappaError:
        raise KappaError(
            f"no Kafka credential for User:{MOVER_USER}, the one principal that moves aliases: run `kappa acls apply`"
        ) from None


def mover_access() -> Access:
    """What the cutover principal may do: write (and read back) the alias registry and the audit trail, in the
    movers' transactions."""
    topics = tuple(t.name for t in CONTROL_TOPICS)
    return Access(MOVER_USER, reads=topics, writes=topics, transactional_ids=(MOVER_ID,), why="alias moves")
