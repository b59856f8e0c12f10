"""A replay of enrich_clicks on the demo data set, as an operator runs it, and what the checks cost it.

1. Load the demo's data set (`kappa demo`'s StreamConfig: `--events` clicks, one user per 100, 1% malformed)
   into a pipeline copy's topics on a bench stack of its own; enrich_clicks v1 runs (`jobs run
   --available-now`) and becomes live.
2. The logic changes (profile lateness 20 -> 5 minutes). Each round bumps the version and runs
   `kappa replay start enrich_clicks` (check, prepare, catch-up with availableNow, verify) in a subprocess,
   alternating *with* the data contracts (the row-level rules while decoding, the quality suite in verify) and
   *without* them (settings pointing at a schemas folder with the .avsc files only). The reconciliation
   against the live version runs in both: it is the protocol, not a contract.
3. Time a cutover: `kappa replay cutover`, the whole command as an operator launches it (after `replay golive`:
   a cutover needs the version running and caught up).

Per round: wall time of the command, catch-up rows, seconds and events/s and verification seconds, read
from the audit trail the command writes (`kappa.audit`). The checks' overhead compares the best wall time
of each mode. Run: `make bench-replay` (BENCH_ARGS="--events 200000" for a larger set).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from jobs.clickstream.generator import StreamConfig
from kappa.kafka.aliases import AliasRegistry, Step
from tests.benchmarks.common import bench_stack, report, run_main
from tests.integration.replay_pipeline import Deployment, deploy_copy, produce

JOB = "enrich_clicks"
DECLARATION = "enrich_clicks/declaration.py"
DEMO_EVENTS = 5000  # `kappa demo`'s default


def demo_config(events: int) -> StreamConfig:
    """The data set `kappa demo --events N` generates."""
    return StreamConfig(events=events, users=max(20, events // 100), malformed_share=0.01)


def step(registry: AliasRegistry, dataset: str, name: str, version: int) -> Step:
    [found] = [
        s
        for s in registry.steps(JOB)
        if s.step == name and s.to_version == version and s.facts.get("dataset") == dataset
    ][-1:]
    return found


def replay_round(d: Deployment, registry: AliasRegistry, dataset: str, version: int, mode: str) -> dict[str, Any]:
    """`kappa replay start` of one version; its timings from the command and the audit trail."""
    d.edit(DECLARATION, f"version={version - 1},", f"version={version},")
    started = time.perf_counter()
    d.kappa("replay", "start", JOB, timeout=3600)
    wall = time.perf_counter() - started
    catch_up = step(registry, dataset, "catch-up", version)
    verify = step(registry, dataset, "verify", version)
    assert verify.outcome == "ok", verify.details
    suite = (verify.facts.get("quality") or {}).get("suite")
    assert (suite is not None) == (mode == "with"), f"{mode} the contracts, verify ran suite {suite}"
    facts = catch_up.facts
    return {
        "version": version,
        "contracts": mode,
        "wall_s": round(wall, 1),
        "catch_up_rows": facts["input_rows"],
        "catch_up_s": facts["seconds"],
        "catch_up_events_per_s": facts["events_per_second"],
        "verify_s": round((verify.at - catch_up.at) / 1000, 1),
        "suite": suite or "none",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=DEMO_EVENTS, help="clicks in the data set (demo: 5000)")
    parser.add_argument("--rounds", type=int, default=2, help="replays per mode; the best counts")
    parser.add_argument("--keep", action="store_true", help="leave the bench stack running")
    args = parser.parse_args()
    if args.rounds < 1 or args.events < 1:
        parser.error("--rounds and --events must be at least 1")

    with bench_stack(keep=args.keep) as stack, tempfile.TemporaryDirectory(prefix="bench-replay-") as tmp:
        prefix = f"br{int(time.time())}_"
        d = deploy_copy(stack, Path(tmp, "pipeline"), prefix)  # with the data contracts, as the pipeline
        bare = Path(tmp, "schemas-without-contracts")  # the same schemas, no expectation suites
        bare.mkdir()
        for avsc in d.settings(stack).schemas_path.glob("*.avsc"):
            shutil.copy(avsc, bare / avsc.name)
        without = Deployment(d.code, d.prefix, {**d.env, "KAPPA_SCHEMAS_DIR": str(bare)})

        produce(stack, d, slice(0, None), demo_config(args.events))
        started = time.perf_counter()
        d.kappa("jobs", "run", JOB, "--available-now", timeout=3600)
        first_run = time.perf_counter() - started
        dataset = f"{prefix}enriched_clicks"
        registry = AliasRegistry(stack)
        d.edit(DECLARATION, '"profile_lateness_minutes": 20', '"profile_lateness_minutes": 5')

        rounds = []
        version = 1
        for _ in range(args.rounds):
            for mode, deployment in (("with", d), ("without", without)):
                version += 1
                rounds.append(replay_round(deployment, registry, dataset, version, mode))

        # A cutover to the last version that ran with the contracts.
        target = max(r["version"] for r in rounds if r["contracts"] == "with")
        d.edit(DECLARATION, f"version={version},", f"version={target},")
        d.kappa("replay", "golive", JOB, "--version", str(target))  # a cutover needs the version running
        started = time.perf_counter()
        d.kappa("replay", "cutover", JOB, "--version", str(target))
        cutover_s = time.perf_counter() - started
        d.kappa("jobs", "stop", JOB, "--version", str(target))
        alias = registry.live(dataset)
        assert alias is not None
        assert alias.version == target
        assert step(registry, dataset, "cutover", target).outcome == "ok"

        best = {mode: min(r["wall_s"] for r in rounds if r["contracts"] == mode) for mode in ("with", "without")}
        rate = {
            mode: max(r["catch_up_events_per_s"] for r in rounds if r["contracts"] == mode)
            for mode in ("with", "without")
        }
        summary = [
            {
                "events": args.events,
                "v1_first_run_s": round(first_run, 1),
                "replay_wall_s_with_checks": best["with"],
                "replay_wall_s_without": best["without"],
                "checks_overhead_wall": f"{best['with'] / best['without'] - 1:+.1%}",
                "catch_up_events_per_s_with": rate["with"],
                "catch_up_events_per_s_without": rate["without"],
                "cutover_command_s": round(cutover_s, 2),
            }
        ]
        report("bench_replay", rounds, summary=summary)


if __name__ == "__main__":
    run_main(main)
