"""`kappa replay ...` and `kappa alias ...`: the replay protocol of DESIGN.md, one command per step."""

from __future__ import annotations

import argparse
from typing import Any


def add_replay_commands(sub: Any) -> None:
    """Register the replay and alias commands on the top-level subparsers."""
    parser: argparse.ArgumentParser = sub.add_parser("replay", help="replay a job's new version, cut over, roll back")
    parser.add_subparsers(dest="replay_command", required=True, metavar="action")
