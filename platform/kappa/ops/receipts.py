"""Which of a file's rows a topic holds already, so that `kappa produce` run again adds each row exactly once.

A record whose acknowledgement never came (Kafka away longer than KAPPA_PRODUCE_TIMEOUT_S, an interrupt, a killed
producer) may or may not be in the topic. So every record `kappa produce` writes carries a header, `kappa.row` =
`<file digest>:<row number>` (the digest: sha256 of the file's bytes), and before its first record a run writes a
receipt beside the file (`<FILE>.produced.json`: the topic, the digest, the topic's end offsets then). A later run
of the same bytes into the same topic reads the topic from those offsets, finds the rows already there by their
header, and produces only the others. A run whose every row was acknowledged marks its receipt complete: producing
that file into that topic again adds nothing, until the receipt is deleted (to produce it again on purpose).

Why a marker rather than a transaction per file: the jobs read their inputs as Spark's Kafka source does by
default (read_uncommitted), so an aborted transaction's records would reach them anyway; the marker asks nothing of
the readers, and also covers a producer killed half-way. A row removed from a topic meanwhile (retention, or
compaction under a later record of the same key) is not found, and is produced again.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, TopicPartition

from kappa.core.errors import KappaError
from kappa.core.settings import KappaSettings

HEADER = "kappa.row"
RECEIPT_SUFFIX = ".produced.json"
_DIGEST_CHARS = 16
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Receipt:
    topic: str
    digest: str  # of the file's bytes (file_digest)
    since: dict[int, int]  # partition -> the topic's end offset before the first run's first record
    complete: bool = False  # every row acknowledged (or found in the topic) by some run
    rows: int = 0  # the rows the file has in the topic, once complete
    runs: list[str] = field(default_factory=list)  # when each run started (ISO 8601, UTC)


def receipt_path(path: Path) -> Path:
    """Beside the file: `clicks.csv` -> `clicks.csv.produced.json`."""
    return path.with_name(path.name + RECEIPT_SUFFIX)


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    try:
        with path.open("rb") as f:
            while chunk := f.read(_CHUNK):
                digest.update(chunk)
    except OSError as exc:
        raise KappaError(f"cannot read {path}: {exc.strerror or exc}") from None
    return digest.hexdigest()[:_DIGEST_CHARS]


def row_header(digest: str, row: int) -> tuple[str, bytes]:
    return HEADER, f"{digest}:{row}".encode()


def load(path: Path, topic: str, digest: str) -> Receipt | None:
    """The receipt of these bytes into this topic; None when there is none (or it is of other bytes or another
    topic: a file edited since is another file)."""
    try:
        data = json.loads(path.read_text())
        receipt = Receipt(**data | {"since": {int(p): int(o) for p, o in data["since"].items()}})
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise KappaError(f"the receipt {path} is unreadable ({exc}): delete it to produce the whole file") from None
    return receipt if (receipt.topic, receipt.digest) == (topic, digest) else None


def save(path: Path, receipt: Receipt) -> None:
    """Atomically (a reader never sees half of it)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(json.dumps(asdict(receipt), indent=2) + "\n")
        tmp.replace(path)
    except OSError as exc:
        raise KappaError(f"cannot write the receipt {path}: {exc.strerror or exc}") from None


def _consumer(settings: KappaSettings) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": settings.bootstrap,
            "group.id": "kappa-produce-receipt",  # never commits: assigned partitions, read once
            "enable.auto.commit": False,
            "socket.timeout.ms": 10_000,
            "log_level": 0,
        }
    )


def end_offsets(settings: KappaSettings, topic: str, partitions: int, timeout_s: float = 15.0) -> dict[int, int]:
    consumer = _consumer(settings)
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)[1] for p in range(partitions)
        }
    except KafkaException as exc:
        raise KappaError(f"cannot read the end offsets of {topic} at {settings.bootstrap}: {exc}") from None
    finally:
        consumer.close()


def rows_in_topic(settings: KappaSettings, topic: str, since: dict[int, int], digest: str) -> set[int]:
    """The rows of the file with this digest that the topic holds from `since` to its end offsets now."""
    ends = end_offsets(settings, topic, len(since))
    wanted = {p: (start, ends[p]) for p, start in since.items() if ends[p] > start}
    found: set[int] = set()
    prefix = f"{digest}:".encode()
    consumer = _consumer(settings)
    try:
        consumer.assign([TopicPartition(topic, p, start) for p, (start, _end) in wanted.items()])
        left = dict(wanted)
        while left:
            messages = consumer.consume(10_000, timeout=15)
            if not messages:  # the last offsets may hold no record (compacted away, a transaction's marker)
                at = consumer.position([TopicPartition(topic, p) for p in left])
                left = {tp.partition: left[tp.partition] for tp in at if tp.offset < left[tp.partition][1]}
                if left:
                    raise KappaError(f"reading {topic} for this file's rows stopped before its end: is Kafka up?")
            for message in messages:
                if message.error() is not None:
                    continue
                headers: list[tuple[str, bytes | None]] = list(message.headers() or [])  # type: ignore[arg-type]
                for name, value in headers:
                    if name == HEADER and value is not None and value.startswith(prefix):
                        found.add(int(value[len(prefix) :]))
                part, offset = message.partition(), message.offset()
                if part in left and offset is not None and offset + 1 >= left[part][1]:
                    del left[part]
    except KafkaException as exc:
        raise KappaError(f"cannot read {topic} for this file's rows: {exc}") from None
    finally:
        consumer.close()
    return found


def ranges(rows: list[int], shown: int = 8) -> str:
    """`1-3, 7, 9-12`: sorted row numbers as ranges, the first `shown` of them, and how many more."""
    spans: list[tuple[int, int]] = []
    for row in sorted(rows):
        if spans and row == spans[-1][1] + 1:
            spans[-1] = (spans[-1][0], row)
        else:
            spans.append((row, row))
    text = ", ".join(f"{a}-{b}" if b > a else str(a) for a, b in spans[:shown])
    return text + (f" and {len(spans) - shown} more ranges" if len(spans) > shown else "")
