"""`kappa`: the platform's command line. Settings are built once here and passed down; each command group
lives in its own module of this package.

Every failure a user can act on is a KappaError: printed as one message, exit status 2, no stack trace.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from kappa.cli.acls import add_acls_commands
from kappa.cli.delta_tables import add_tables_commands
from kappa.cli.demo import add_demo_command, add_generate_command
from kappa.cli.dlq import add_dlq_commands
from kappa.cli.jobs import add_jobs_commands
from kappa.cli.produce import add_produce_command
from kappa.cli.replay import add_replay_commands
from kappa.cli.schemas import add_schemas_commands
from kappa.cli.stack import add_stack_commands
from kappa.cli.top import add_top_command
from kappa.cli.topics import add_topics_commands
from kappa.core.errors import KappaError
from kappa.core.settings import load_settings


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kappa", description="Kappa-architecture platform")
    sub = parser.add_subparsers(dest="command", required=True, metavar="command")
    add_stack_commands(sub)
    add_topics_commands(sub)
    add_acls_commands(sub)
    add_schemas_commands(sub)
    add_dlq_commands(sub)
    add_jobs_commands(sub)
    add_top_command(sub)
    add_generate_command(sub)
    add_produce_command(sub)
    add_replay_commands(sub)
    add_tables_commands(sub)
    add_demo_command(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = load_settings()
        return int(args.func(settings, args))
    except KappaError as exc:
        print(f"kappa: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("kappa: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
