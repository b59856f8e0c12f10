"""`kappa top`: the running job versions live in the terminal (kappa.ops.top)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from kappa.cli.parsing import add_command
from kappa.cli.table import render
from kappa.core.settings import KappaSettings
from kappa.ops.top import HISTORY, Top

HEADER = ("job", "version", "state", "rec/s", "lag", "p99 batch", "last batch", "restarts", "rate", "lag trend")
CLEAR = "\x1b[H\x1b[2J"  # cursor home, clear the screen: one frame in place, as top draws


def frame(top: Top, interval_s: float) -> list[str]:
    rows = top.rows()
    if not rows:
        return [f"no job version runs (no live run record in {top.settings.deployments_path})"]
    window = f"p99 batch and sparklines over the last {HISTORY * interval_s:g} s, a sample every {interval_s:g} s"
    lines = [time.strftime("kappa top  %H:%M:%S  ") + window, *render(HEADER, rows, "<><>>>>><<")]
    lines += [f"{job} v{version}: {why}" for (job, version), why in sorted(top.unreachable.items())]
    return lines


def cmd_top(settings: KappaSettings, args: argparse.Namespace) -> int:
    top = Top(settings)
    top.poll()
    if args.once:  # two samples: a rate needs an interval
        time.sleep(args.interval)
        top.poll()
        print("\n".join(frame(top, args.interval)))
        return 0
    redraw = sys.stdout.isatty()
    try:
        while True:
            time.sleep(args.interval)
            top.poll()
            print((CLEAR if redraw else "") + "\n".join(frame(top, args.interval)), flush=True)
    except KeyboardInterrupt:  # Ctrl-C is how top ends
        return 0


def add_top_command(sub: Any) -> None:
    top = add_command(sub, "top", cmd_top, "the running job versions live: rate, lag, p99 batch time, sparklines")
    top.add_argument("--interval", type=float, default=2.0, help="seconds between samples (default 2)")
    top.add_argument("--once", action="store_true", help="print one frame (after two samples) and exit")
