"""`kappa produce <topic> FILE`: a file's rows (JSON lines, CSV, Parquet) into a declared topic."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from kappa.cli.parsing import add_command
from kappa.core.settings import KappaSettings
from kappa.ops.produce_file import FileFormat, detect_format, produce_file
from kappa.runtime.discovery import find_topic, load_catalog


def cmd_produce(settings: KappaSettings, args: argparse.Namespace) -> int:
    topic = find_topic(args.topic, load_catalog())
    report = produce_file(settings, topic, args.file, detect_format(args.file, args.format), rejects_path=args.rejects)
    print(f"produced {report.produced} records to {report.topic} (schema id {report.schema_id})")
    if report.rejected:
        print(f"rejected {report.rejected} rows: see {report.rejects_path}")
        return 1  # scripts notice: some rows did not go out
    return 0


def add_produce_command(sub: Any) -> None:
    produce = add_command(
        sub,
        "produce",
        cmd_produce,
        "produce a file's rows into a declared topic, encoded with its registered value schema; rows that do not "
        "fit the schema go to a rejects file (exit status 1)",
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
