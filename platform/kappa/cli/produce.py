"""`kappa produce <topic> FILE`: a file's rows (JSON lines, CSV, Parquet) into a declared topic."""

from __future__ import annotations

import argparse
import signal
from pathlib import Path
from typing import Any

from kappa.cli.parsing import add_command
from kappa.core.settings import KappaSettings
from kappa.ops.file_rows import FileFormat, detect_format
from kappa.ops.produce_file import produce_file
from kappa.ops.receipts import ranges
from kappa.runtime.discovery import find_topic, load_catalog

UNCONFIRMED_EXIT = 3  # some rows may or may not be in the topic: run the command again
INTERRUPTED_EXIT = 130


def cmd_produce(settings: KappaSettings, args: argparse.Namespace) -> int:
    topic = find_topic(args.topic, load_catalog())
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a SIGTERM stops it as Ctrl-C does: said, not lost
    file_format = detect_format(args.file, args.format)
    report = produce_file(settings, topic, args.file, file_format, rejects_path=args.rejects, rate=args.rate)
    if report.already_complete:
        print(
            f"nothing to do: all {report.found} rows of {args.file} are in {report.topic}, produced by an earlier run "
            f"(delete its receipt {report.receipt_path} to produce the file again)"
        )
        return 0
    found = f"; {report.found} rows were in the topic already, from an earlier run" if report.found else ""
    print(f"produced {report.produced} records to {report.topic} (schema id {report.schema_id}){found}")
    if report.rejected:
        print(f"rejected {report.rejected} rows: see {report.rejects_path}")
    if report.unconfirmed:
        when = "before the interrupt" if report.interrupted else f"within {settings.produce_timeout_s:g} s"
        print(
            f"unconfirmed: {len(report.unconfirmed)} rows ({ranges(report.unconfirmed)}) were sent but not "
            f"acknowledged {when} (KAPPA_PRODUCE_TIMEOUT_S): they may or may not be in {report.topic}. Run the same "
            "command again once Kafka answers: it adds exactly those the topic does not hold "
            f"(receipt {report.receipt_path})"
        )
    if report.interrupted:
        print(f"interrupted: run the same command again to produce the rest (receipt {report.receipt_path})")
        return INTERRUPTED_EXIT
    if report.unconfirmed:
        return UNCONFIRMED_EXIT
    return 1 if report.rejected else 0  # scripts notice: some rows did not go out


def add_produce_command(sub: Any) -> None:
    produce = add_command(
        sub,
        "produce",
        cmd_produce,
        "produce a file's rows into a declared topic, encoded with its registered value schema, each row once "
        "however often it is run (a receipt beside the file); rows that do not fit the schema go to a rejects file "
        "(exit status 1); a Kafka outage is waited out for KAPPA_PRODUCE_TIMEOUT_S, and rows still unacknowledged "
        "then are named (exit status 3: run it again)",
    )
    produce.add_argument("topic", help="a declared topic (jobs/catalog.py)")
    produce.add_argument(
        "file", type=Path, metavar="FILE", help="the rows: JSON lines, CSV with a header row, or Parquet"
    )
    produce.add_argument(
        "--format",
        choices=[f.value for f in FileFormat],
        default=None,
        help="the file's format (default: from its extension: .jsonl/.json/.ndjson, .csv, .parquet)",
    )
    produce.add_argument(
        "--rejects",
        type=Path,
        default=None,
        metavar="PATH",
        help="where rejected rows go, with their row number and reason (default: <FILE>.rejected.jsonl)",
    )
    produce.add_argument(
        "--rate", type=float, default=None, metavar="ROWS_PER_S", help="at most this many rows a second"
    )
