"""`kappa dlq inspect | replay`: dead-letter topics."""

from __future__ import annotations

import argparse
from typing import Any

from kappa.contracts.topic_declarations import DAY_MS, HOUR_MS
from kappa.core.settings import KappaSettings
from kappa.ops import dlq


def cmd_dlq_inspect(settings: KappaSettings, args: argparse.Namespace) -> int:
    report = dlq.inspect(settings, args.topic, samples=args.samples)
    jobs = ", ".join(f"{job} {n}" for job, n in sorted(report.by_job.items()))
    late = dlq.is_late_topic(report.topic)
    what = ("late record(s)", "set aside") if late else ("bad record(s)", "dead letter(s)")
    print(f"{report.topic}: {report.records} {what[0]}, {report.total} {what[1]}, reported by {jobs or '-'}")
    if report.log_starts:
        # Counts of what remains must not read as everything ever set aside.
        starts = ", ".join(f"offset {start} of partition {p}" for p, start in report.log_starts.items())
        retention = _retention(report.retention_ms)
        older = "late records" if late else "dead letters"
        print(f"older {older} were deleted by the topic's retention{retention}: the log starts at {starts}")
    for kind, count in report.by_kind.most_common():
        print(f"  {kind:<24} {count}")
        for letter in report.samples.get(kind, []):
            print(f"      {dlq.describe(letter)}")
    return 0


def _retention(ms: int | None) -> str:
    if ms is None or ms < 0:  # unknown, or none by time (retention.bytes or a delete-records request did it)
        return ""
    for unit, name in ((DAY_MS, "day"), (HOUR_MS, "hour")):
        if ms % unit == 0:
            return f" ({ms // unit} {name}{'s' if ms != unit else ''})"
    return f" ({ms} ms)"


def cmd_dlq_replay(settings: KappaSettings, args: argparse.Namespace) -> int:
    replayed, skipped = dlq.replay(settings, args.topic, kind=args.kind)
    print(
        f"re-injected {replayed} dead letter(s) of {args.topic}"
        + (f", {skipped} left (of other kinds, or partition-mismatch: produce those again, placed)" if skipped else "")
    )
    return 0


def add_dlq_commands(sub: Any) -> None:
    dlq = sub.add_parser("dlq", help="dead-letter topics")
    dlq_sub = dlq.add_subparsers(dest="dlq_command", required=True, metavar="action")
    inspect = dlq_sub.add_parser(
        "inspect", help="counts by error kind, with samples (a dataset's dead letters, or a .late topic)"
    )
    inspect.set_defaults(func=cmd_dlq_inspect)
    inspect.add_argument("--samples", type=int, default=3)
    replay = dlq_sub.add_parser("replay", help="re-inject dead letters into their source topic, each once")
    replay.set_defaults(func=cmd_dlq_replay)
    replay.add_argument("--kind", default=None, help="only this error kind (e.g. unknown-schema-id)")
    inspect.add_argument("topic", help="the dataset topic (its dead letters are in <topic>.dlq), or a .late topic")
    replay.add_argument("topic", help="the dataset topic (its dead letters are in <topic>.dlq)")
