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

from kappa.core.errors import KappaError
from kappa.core.settings import KappaSettings
from kappa.kafka.reading import extents, read_to_end, reading_consumer

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


def end_offsets(settings: KappaSettings, topic: str) -> dict[int, int]:
    """Each partition's end offset now: where a first run's records will start."""
    with reading_consumer(settings, committed_only=False) as consumer:
        return {p: extent.end for p, extent in extents(consumer, topic).items()}


def rows_in_topic(settings: KappaSettings, topic: str, since: dict[int, int], digest: str) -> set[int]:
    """The rows of the file with this digest that the topic holds from `since` to its end offsets now (a partition
    `since` does not name, one the topic gained after the first run, from its start). Read as the jobs read their
    inputs, aborted transactions included: a row they would see is a row in the topic."""
    found: set[int] = set()
    prefix = f"{digest}:".encode()
    with reading_consumer(settings, committed_only=False) as consumer:
        for message in read_to_end(consumer, topic, extents(consumer, topic), starts=since):
            headers: list[tuple[str, bytes | None]] = list(message.headers() or [])  # type: ignore[arg-type]
            for name, value in headers:
                if name == HEADER and value is not None and value.startswith(prefix):
                    found.add(int(value[len(prefix) :]))
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
