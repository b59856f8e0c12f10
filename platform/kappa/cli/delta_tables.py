"""`kappa tables maintain`: compact and vacuum the Delta tables the jobs write (kappa.lifecycle.maintenance)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from kappa.core.settings import KappaSettings
from kappa.lifecycle import maintenance
from kappa.runtime.discovery import discover


def cmd_tables_maintain(settings: KappaSettings, args: argparse.Namespace) -> int:
    # Lazy: imports pyspark, only where a Spark session runs (this module is imported without one).
    from kappa.runtime.runner import configure_logging
    from kappa.spark.session import get_spark

    versions = maintenance.table_versions(settings, discover(), args.tables)  # an unknown name fails before Spark
    if not versions:
        print("no Delta table on disk yet: nothing to maintain")
        return 0
    configure_logging()
    spark = get_spark(settings, "kappa-tables-maintain")

    def said(m: maintenance.Maintained) -> None:  # a line per table as it is done (JSON: all at the end)
        if not args.json:
            print(maintenance.describe(m))

    done = maintenance.maintain(settings, spark, versions, on_table=said)
    if args.json:
        print(json.dumps([m.as_json() for m in done]))
    return 0


def add_tables_commands(sub: Any) -> None:
    tables = sub.add_parser("tables", help="the Delta tables the jobs write")
    tables_sub = tables.add_subparsers(dest="tables_command", required=True, metavar="action")
    maintain = tables_sub.add_parser(
        "maintain",
        help="compact (unless the writer runs: it compacts its own) and vacuum every version of each table on disk",
    )
    maintain.set_defaults(func=cmd_tables_maintain)
    maintain.add_argument("tables", nargs="*", help="the tables (default: all)")
    maintain.add_argument("--json", action="store_true", help="one JSON list of what was done, for a scheduler")
