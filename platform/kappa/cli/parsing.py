"""What every command group shares: the signature of a command, and adding one."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from kappa.core.settings import KappaSettings

# A command: the settings built once by `kappa`, its parsed arguments -> the exit status.
Command = Callable[[KappaSettings, argparse.Namespace], int]


def add_command(sub: Any, name: str, func: Command, help_: str) -> argparse.ArgumentParser:
    """A top-level command `kappa <name>` on the subparsers `sub`, running `func`."""
    parser: argparse.ArgumentParser = sub.add_parser(name, help=help_, description=help_)
    parser.set_defaults(func=func)
    return parser
