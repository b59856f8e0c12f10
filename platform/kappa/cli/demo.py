"""`kappa generate` and `kappa demo`: a seeded clickstream, and the whole pipeline on it.

Both are the reference pipeline's (jobs/clickstream/, beside the jobs it feeds): the commands import it lazily.
"""

from __future__ import annotations

import argparse
from typing import Any

from kappa.cli.parsing import add_command
from kappa.core.settings import KappaSettings


def cmd_generate(settings: KappaSettings, args: argparse.Namespace) -> int:
    # Lazy: jobs/ is the user's code, found at run time (and it imports this library).
    from jobs.catalog import CLICKS, USER_PROFILES
    from jobs.clickstream.generator import StreamConfig
    from jobs.clickstream.produce import generate

    config = StreamConfig(
        events=args.events,
        users=args.users,
        pages=args.pages,
        seed=args.seed,
        late_share=args.late_share,
        late_by_ms=int(args.late_by_minutes * 60_000),
        malformed_share=args.malformed_share,
    )
    report = generate(settings, config, CLICKS, USER_PROFILES, rate=args.rate)
    print(
        f"produced {report.clicks} clicks ({report.malformed} malformed) and {report.profiles} profile versions "
        f"in {report.seconds:.1f} s ({report.clicks / max(report.seconds, 1e-9):,.0f} clicks/s)"
    )
    return 0


def cmd_demo(settings: KappaSettings, args: argparse.Namespace) -> int:
    # Lazy: jobs/ is the user's code (as above), and the demo imports pyspark, only where a Spark session runs.
    from jobs.clickstream.demo import run_demo

    run_demo(settings, events=args.events, keep=args.keep, malformed_share=args.malformed_share)
    return 0


def add_generate_command(sub: Any) -> None:
    gen = add_command(
        sub, "generate", cmd_generate, "produce a seeded clickstream (clicks + user_profiles) into the topics"
    )
    gen.add_argument("--events", type=int, default=10_000, help="number of clicks")
    gen.add_argument("--users", type=int, default=500)
    gen.add_argument("--pages", type=int, default=200)
    gen.add_argument("--seed", type=int, default=7, help="same seed, same stream")
    gen.add_argument("--rate", type=float, default=None, help="records per second (default: as fast as possible)")
    gen.add_argument("--late-share", type=float, default=0.01, help="share of clicks that arrive very late")
    gen.add_argument("--late-by-minutes", type=float, default=45.0, help="how late the late clicks are")
    gen.add_argument("--malformed-share", type=float, default=0.0, help="share of clicks broken on purpose")


def add_demo_command(sub: Any) -> None:
    demo = add_command(sub, "demo", cmd_demo, "run the demo on a fresh embedded stack and print what landed in Delta")
    demo.add_argument("--events", type=int, default=5000)
    demo.add_argument("--keep", action="store_true", help="leave the demo stack running")
    demo.add_argument("--malformed-share", type=float, default=0.01, help="share of broken records (dead letters)")
