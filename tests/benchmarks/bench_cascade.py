"""A cascade replay of enrich_clicks and the datasets below it, as an operator runs it: wall time, events/s and
the set's cutover.

1. A pipeline copy on a bench stack of its own, `--events` clicks of the demo's data set (`kappa demo`'s
   StreamConfig: one user per 100, 1% malformed). The live set v1 (enrich_clicks, sessionize and the three
   Delta views) runs continuously (`kappa jobs start`: one job host, the production launcher) until it has read
   everything; it keeps running through the replay, as in production.
2. The logic changes (profile lateness 20 -> 5 minutes) as enrich_clicks v2. `kappa replay plan` gives its
   estimate; `kappa replay start enrich_clicks --downstream` replays and verifies the five members one after
   the other. Timed: the command's wall time; per member, from the audit trail, its catch-up rows, seconds and
   events/s and its verification's seconds.
3. `kappa replay golive --downstream`, the set catches up, then `kappa replay cutover --downstream` is timed:
   the whole command (a Python start included), the command's own figure for its checks and the move (the plan,
   each member's verification, deployment and lag), and the one transaction that moves the five aliases.

The cascade's events/s is every member's catch-up rows over the command's wall time (the clicks are read by
enrich_clicks, and what each job writes is read again below it). Run: `make bench-cascade`
(BENCH_ARGS="--events 1000000").
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from kappa.kafka.aliases import AliasRegistry
from kappa.lifecycle import deployments
from tests.benchmarks.bench_replay import DECLARATION, DEMO_EVENTS, demo_config
from tests.benchmarks.common import bench_stack, report, run_main
from tests.integration.replay_pipeline import deploy_copy, produce

JOBS = ("enrich_clicks", "page_stats", "sessionize", "sessions_table", "user_activity")  # pipeline order


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=DEMO_EVENTS, help="clicks in the data set (demo: 5000)")
    parser.add_argument("--keep", action="store_true", help="leave the bench stack running")
    args = parser.parse_args()

    with bench_stack(keep=args.keep) as stack, tempfile.TemporaryDirectory(prefix="bench-cascade-") as tmp:
        d = deploy_copy(stack, Path(tmp, "pipeline"), f"bc{int(time.time())}_", tables=True)
        settings = d.settings(stack)
        try:
            produce(stack, d, slice(0, None), demo_config(args.events))
            started = time.perf_counter()
            for job in JOBS:
                d.kappa("jobs", "start", job)
            wait_caught_up(stack, d, dict.fromkeys(JOBS, 1))
            live_set_s = time.perf_counter() - started

            d.edit(DECLARATION, "version=1,", "version=2,")
            d.edit(DECLARATION, '"profile_lateness_minutes": 20', '"profile_lateness_minutes": 5')
            plan = json.loads(d.kappa("replay", "plan", "enrich_clicks", "--json").stdout)
            started = time.perf_counter()
            d.kappa("replay", "start", "enrich_clicks", "--downstream", timeout=7200)
            cascade_s = time.perf_counter() - started
            members = [member(AliasRegistry(stack), m) for m in plan["members"]]

            d.kappa("replay", "golive", "enrich_clicks", "--downstream")
            wait_caught_up(stack, d, {m["job"]: m["version"] for m in plan["members"]})
            started = time.perf_counter()
            cut = d.kappa("replay", "cutover", "enrich_clicks", "--downstream")
            cutover_s = time.perf_counter() - started
            took = re.search(r"one transaction \(([\d.]+) s\).*the command took ([\d.]+) s", cut.stdout)
            assert took is not None, cut.stdout
        finally:
            deployments.stop_all(settings, timeout_s=60)
        rows = sum(m["catch_up_rows"] for m in members)
        summary = [
            {
                "events": args.events,
                "members": len(members),
                "live_set_first_run_s": round(live_set_s, 1),
                "plan_estimate_s": plan["estimate_s"],
                "cascade_wall_s": round(cascade_s, 1),
                "cascade_rows": rows,
                "cascade_events_per_s": round(rows / cascade_s),
                "clicks_per_s": round(args.events / cascade_s),
                "cutover_command_s": round(cutover_s, 2),
                "cutover_checks_and_move_s": float(took.group(2)),
                "cutover_transaction_s": float(took.group(1)),
            }
        ]
        report("bench_cascade", members, summary=summary)


def member(registry: AliasRegistry, planned: dict[str, Any]) -> dict[str, Any]:
    """One member's figures, from the audit trail its `replay start` wrote."""
    steps = [s for s in registry.steps(planned["job"]) if s.to_version == planned["version"]]
    catch_up = [s for s in steps if s.step == "catch-up" and s.outcome == "ok"][-1]
    verify = [s for s in steps if s.step == "verify"][-1]
    assert verify.outcome == "ok", verify.details
    return {
        "job": planned["job"],
        "version": planned["version"],
        "estimate_s": planned["estimate_s"],
        "catch_up_rows": catch_up.facts["input_rows"],
        "catch_up_s": catch_up.facts["seconds"],
        "catch_up_events_per_s": catch_up.facts["events_per_second"],
        "verify_s": round((verify.at - catch_up.at) / 1000, 1),
    }


def wait_caught_up(stack: Any, d: Any, versions: dict[str, int]) -> None:
    deadline = time.monotonic() + 3600
    while not d.caught_up(stack, versions):
        if time.monotonic() > deadline:
            raise SystemExit(f"{versions} did not catch up within an hour")
        time.sleep(2)


if __name__ == "__main__":
    run_main(main)
