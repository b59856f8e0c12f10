"""`kappa produce <topic> FILE`: a data engineer's own rows (JSON lines, CSV, Parquet) into a declared topic.

Each row is checked against the topic's value schema and encoded in the Confluent wire format with the id the
schema already has under its subject: nothing is registered here (`kappa schemas apply` does that). Records are
keyed and partitioned as the topic declares, like `kappa generate` does. A row that cannot be converted or does
not validate is not produced: it goes, with its row (and line) number and the reason, to the rejects file, and
the run goes on. A file that is not of its format at all, or whose columns do not fit the schema, is refused
before anything is produced.

The file is streamed (lines, or Parquet record batches): its size does not matter. Reading it is
kappa.ops.file_rows, its CSV cells kappa.ops.csv_cells, the schema's side kappa.ops.record_shape, the progress bar
kappa.ops.progress_bar; this module runs them: rows in, records out, rejects aside, a receipt kept.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, TextIO

from kappa.contracts.avro_serde import AvroEncoder
from kappa.contracts.registry import registry_of, value_subject
from kappa.contracts.schema_files import topic_value_schema
from kappa.contracts.topic_declarations import Topic
from kappa.contracts.wire_format import WireFormatError
from kappa.core.errors import KappaError
from kappa.core.settings import KappaSettings
from kappa.kafka.clients import Outgoing, Publisher, require_kafka
from kappa.kafka.topic_admin import describe
from kappa.ops import receipts
from kappa.ops.avro_types import RowError
from kappa.ops.file_rows import FileFormat, RowSource, detect_format, open_source
from kappa.ops.progress_bar import Progress
from kappa.ops.record_shape import RecordShape, check_declaration, placement

REJECTS_SUFFIX = ".rejected.jsonl"
INTERRUPT_FLUSH_S = 10.0  # after Ctrl-C: how long the rows already sent get to be acknowledged
PAUSE_SLICE_S = 0.2  # a paced run looks for an interrupt this often while it waits between rows


def default_rejects_path(path: Path) -> Path:
    """Beside the input: `clicks.csv` -> `clicks.csv.rejected.jsonl`."""
    return path.with_name(path.name + REJECTS_SUFFIX)


# --- rejects, and the run ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rejected:
    row: int
    line: int | None
    reason: str
    input: Any

    def as_json(self) -> str:
        entry: dict[str, Any] = {"row": self.row}
        if self.line is not None:
            entry["line"] = self.line
        entry.update(reason=self.reason, input=self.input)
        return json.dumps(entry, ensure_ascii=False, default=str)


class RejectsFile:
    """The run's rejected rows, one JSON object a line. Opened before the first row (a path that cannot be written
    fails the run before anything is produced, not half-way); removed at the end if nothing was rejected, so
    the file, when there is one, holds this run's rejects and no earlier run's."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.count = 0
        try:
            self._file: TextIO = path.open("w", encoding="utf-8")
        except OSError as exc:
            raise KappaError(f"cannot write the rejects file {path}: {exc.strerror or exc} (--rejects PATH)") from None

    def write(self, rejected: Rejected) -> None:
        self._file.write(rejected.as_json() + "\n")
        self.count += 1

    def close(self) -> None:
        self._file.close()
        if not self.count:
            self.path.unlink(missing_ok=True)

    def __enter__(self) -> RejectsFile:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def produce_rows(
    source: RowSource,
    shape: RecordShape,
    topic: Topic,
    encode: Callable[[dict[str, Any]], bytes],
    send: Callable[[Outgoing, int], None],
    rejects: RejectsFile,
    progress: Progress | None = None,
    skip: Collection[int] = (),
    rate: float | None = None,
    stop: Callable[[], bool] | None = None,
) -> int:
    """Every row of the source either sent (encoded, keyed, placed; with its row number) or written to the rejects
    file, except the rows in `skip` (in the topic already); the number sent. `rate`: at most that many rows a
    second. `stop`: once it says true, no further row is read."""
    sent = paced = 0
    started = time.monotonic()
    for row in source.rows():
        if stop is not None and stop():
            break
        if row.row in skip:
            continue  # before the pacing: a re-run does not wait through the rows the topic holds already
        if rate:
            paced += 1
            ahead = paced / rate - (time.monotonic() - started)
            if ahead > 0 and not _pause(ahead, stop):
                break
        try:
            if row.values is None:
                raise RowError(row.problem or "unreadable")
            record = shape.record(row.values)
            try:
                value = encode(record)
            except Exception as exc:  # what validates can still fail to encode (text that is not Unicode, say)
                raise RowError(f"does not encode: {exc}") from None
            key, partition = placement(topic, record)
        except RowError as exc:
            rejects.write(Rejected(row.row, row.line, str(exc), row.raw))
        else:
            send(Outgoing(key, value, partition=partition), row.row)
            sent += 1
        if progress is not None:
            progress.update(source.fraction, row.row)
    return sent


@dataclass(frozen=True)
class ProduceReport:
    topic: str
    produced: int  # acknowledged by Kafka in this run
    rejected: int
    schema_id: int
    rejects_path: Path
    receipt_path: Path
    found: int = 0  # rows in the topic already (an earlier run's), not produced again
    unconfirmed: list[int] = dataclasses.field(default_factory=list)  # sent, not acknowledged: maybe in the topic
    interrupted: bool = False  # stopped by Ctrl-C / SIGTERM before the file's end
    already_complete: bool = False  # an earlier run produced every row: nothing was done


def _encoder(settings: KappaSettings, topic: Topic, schema: dict[str, Any]) -> AvroEncoder:
    """The encoder of the schema id already registered; never registers (schemas go out by `kappa schemas apply`)."""
    subject = value_subject(topic.name)
    with registry_of(settings) as registry:
        try:
            return AvroEncoder(registry, subject, schema, register=False)
        except WireFormatError:
            raise KappaError(
                f"the schema {topic.value_schema} is not registered under {subject}: run `kappa schemas apply` "
                "first (nothing was produced)"
            ) from None


def _require_topic(settings: KappaSettings, topic: Topic) -> None:
    """The topic exists with its declared partitions (records placed by `partition_for` need exactly those)."""
    [state] = describe(require_kafka(settings), [topic])
    if state.partitions is None:
        raise KappaError(f"topic {topic.name} does not exist on {settings.bootstrap}: run `kappa topics apply`")
    if state.partitions != topic.partitions:
        raise KappaError(
            f"topic {topic.name} has {state.partitions} partitions but is declared with {topic.partitions}: "
            "see `kappa topics list`"
        )


def _pause(seconds: float, stop: Callable[[], bool] | None) -> bool:
    """Sleep `seconds`, looking at `stop` every PAUSE_SLICE_S; False if it said stop first."""
    if stop is None:
        time.sleep(seconds)
        return True
    until = time.monotonic() + seconds
    while (left := until - time.monotonic()) > 0:
        if stop():
            return False
        time.sleep(min(left, PAUSE_SLICE_S))
    return not stop()


class Interrupts:
    """Ctrl-C and SIGTERM, while `noting()`, are only noted (`noted`, or call the object): the run stops at its
    next row, waits briefly for what it sent, and says so.

    Raised as KeyboardInterrupt they would land wherever Python runs next, which in a producing loop is mostly a
    delivery callback that librdkafka calls from `poll`: confluent-kafka then loses the exception, and `poll`
    fails with "SystemError: ... returned NULL without setting an exception" (seen in CI). The handler only sets
    an attribute: it takes no lock, so it can never wait for one its own thread holds. A signal that is ignored
    (a run in the background) stays ignored; outside the main thread no handler can be set, and nothing is noted.
    """

    def __init__(self) -> None:
        self.noted = False

    def __call__(self) -> bool:
        return self.noted

    def _note(self, _signum: int, _frame: object) -> None:
        self.noted = True

    @contextmanager
    def noting(self) -> Iterator[Interrupts]:
        replaced: dict[signal.Signals, Any] = {}
        try:
            if threading.current_thread() is threading.main_thread():
                for s in (signal.SIGINT, signal.SIGTERM):
                    current = signal.getsignal(s)
                    if current is signal.SIG_IGN or current is None:  # ignored, or set outside Python: kept
                        continue
                    replaced[s] = current
                    signal.signal(s, self._note)
            yield self
        finally:
            for s, handler in replaced.items():
                signal.signal(s, handler)


def produce_file(
    settings: KappaSettings,
    topic: Topic,
    path: Path,
    file_format: FileFormat | None = None,
    rejects_path: Path | None = None,
    progress: TextIO | None = sys.stderr,
    rate: float | None = None,
) -> ProduceReport:
    """Produce the file's rows into the topic, each row once however often it is run (kappa.ops.receipts).
    Everything that would refuse the whole file (its format, its columns, the schema not registered, the topic
    missing) is checked before the first record is sent. A Kafka outage is waited out for KAPPA_PRODUCE_TIMEOUT_S
    (a line on `progress` while it lasts); rows still unacknowledged then, or at an interrupt, are reported by
    number in `unconfirmed`, and a later run adds those of them the topic does not hold."""
    file_format = file_format or detect_format(path)
    rejects_path = rejects_path or default_rejects_path(path)
    if rejects_path.resolve() == path.resolve():
        raise KappaError(f"the rejects file cannot be the input {path}")
    schema = topic_value_schema(settings.schemas_path, topic)
    shape = RecordShape(schema)
    check_declaration(topic, shape)
    source = open_source(path, file_format, shape)
    encoder = _encoder(settings, topic, schema)
    _require_topic(settings, topic)
    digest, where = receipts.file_digest(path), receipts.receipt_path(path)
    receipt = receipts.load(where, topic.name, digest)
    report = partial(ProduceReport, topic.name, schema_id=encoder.schema_id, rejects_path=rejects_path,
                     receipt_path=where)  # fmt: skip
    if receipt is not None and receipt.complete:
        return report(0, 0, found=receipt.rows, already_complete=True)
    found: set[int] = set()
    if receipt is None:  # the first run of these bytes into this topic: where its records will start
        since = receipts.end_offsets(settings, topic.name)
        receipt = receipts.Receipt(topic.name, digest, since)
    else:
        found = receipts.rows_in_topic(settings, topic.name, receipt.since, digest)
    receipt = replace(receipt, runs=[*receipt.runs, datetime.now(UTC).isoformat(timespec="seconds")])
    receipts.save(where, receipt)

    bar = Progress(progress)

    def say(line: str) -> None:
        bar.write(f"kappa produce: {line}")

    publisher = Publisher(settings, say=say)
    with RejectsFile(rejects_path) as rejects, Interrupts().noting() as interrupts:

        def send(record: Outgoing, row: int) -> None:
            headers = [receipts.row_header(digest, row)]
            publisher.send(topic.name, replace(record, headers=headers), tag=row, stop=interrupts)

        try:
            produce_rows(source, shape, topic, encoder.encode, send, rejects, bar, skip=found, rate=rate,
                         stop=interrupts)  # fmt: skip
        except KeyboardInterrupt:  # Kafka's queue was full when the interrupt came (Publisher.send)
            interrupts.noted = True
        except KappaError as exc:  # the file broke off: what was sent before is delivered, and said
            publisher.flush(stop=interrupts)
            raise KappaError(f"{exc}; the {publisher.confirmed} records before it were produced") from None
        finally:
            bar.finish()
        # Interrupted: rows were left unread. An interrupt during the last wait only cuts the wait short: what is
        # still unacknowledged then is reported as unconfirmed.
        interrupted = interrupts.noted
        if interrupted:
            say(f"interrupted: waiting up to {INTERRUPT_FLUSH_S:g} s for the rows sent so far to be acknowledged")
        publisher.flush(INTERRUPT_FLUSH_S if interrupted else None, stop=None if interrupted else interrupts)
    unconfirmed = publisher.unconfirmed()
    if not unconfirmed and not interrupted:
        receipts.save(where, replace(receipt, complete=True, rows=len(found) + publisher.confirmed))
    return report(publisher.confirmed, rejects.count, found=len(found), unconfirmed=unconfirmed,
                  interrupted=interrupted)  # fmt: skip
