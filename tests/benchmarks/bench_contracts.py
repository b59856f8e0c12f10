"""The row-level data contract's cost: replay throughput of raw_clicks with and without it, same data.

1. Load: `--events` seeded clicks (jobs.clickstream.produce, as `kappa generate` does) into `clicks` on a bench
   stack of its own ports and folder (`--port-offset` shifts them).
2. Replay raw_clicks (`run_job(available_now=True)`: Kafka -> decode -> Delta and dead letters, one query)
   with fresh checkpoints and tables, alternating: *with* the clicks suite (schemas/expectations/clicks.json,
   enforced while decoding) and *without* it (the same job, settings pointing at a schemas folder holding the
   .avsc files only). Best of `--runs` each; overhead = 1 - with/without in events per second.

The target: the contract costs replays at most 10%.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

from deltalake import DeltaTable as DeltaTable_

from jobs.catalog import CLICKS, USER_PROFILES
from jobs.clickstream.generator import StreamConfig
from jobs.clickstream.produce import generate
from jobs.raw_clicks.declaration import JOB as RAW_CLICKS
from kappa.contracts.expectations import suite_for
from kappa.contracts.schema_rollout import apply_schemas
from kappa.contracts.topic_declarations import dead_letters_of
from kappa.core.security import registry_login
from kappa.core.settings import KappaSettings, load_settings
from kappa.kafka.clients import admin_client
from kappa.kafka.topic_admin import apply
from kappa.runtime.binding import deployment_topics
from kappa.runtime.outputs import DeltaTable
from kappa.runtime.runner import run_job
from kappa.stack import LocalStack
from tests.benchmarks.common import report, run_main, timed

TARGET_OVERHEAD = 0.10


def settings_for(offset: int, schemas_dir: Path | None = None) -> KappaSettings:
    base = load_settings()
    root = base.state_dir / f"bench-contracts-{offset}"
    extra: dict[str, Any] = {"schemas_dir": schemas_dir} if schemas_dir else {}
    return load_settings(
        kafka_port=28092 + offset,
        controller_port=28192 + offset,
        registry_port=28081 + offset,
        stack_dir=root / "stack",
        delta_root=str(root / "delta"),
        checkpoint_root=str(root / "checkpoints"),
        kafka_heap="1g",
        **extra,
    )


def without_expectations(settings: KappaSettings, into: Path) -> Path:
    """A schemas folder with the Avro schemas and no expectation suites."""
    for avsc in settings.schemas_path.glob("*.avsc"):
        shutil.copy(avsc, into / avsc.name)
    return into


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=2, help="replays per mode; the best counts")
    parser.add_argument("--port-offset", type=int, default=0)
    parser.add_argument("--keep", action="store_true", help="leave the bench stack running (and its data)")
    args = parser.parse_args()

    with_contract = settings_for(args.port_offset)
    assert suite_for(with_contract, CLICKS.name) is not None, "the clicks suite is the thing measured"
    stack = LocalStack(with_contract)
    stack.down(purge=True)
    stack.up()
    try:
        apply(admin_client(with_contract), [CLICKS, USER_PROFILES, dead_letters_of(CLICKS)])
        apply_schemas(
            with_contract.schemas_path, [CLICKS, USER_PROFILES], with_contract.registry, registry_login(with_contract)
        )
        loaded = generate(with_contract, StreamConfig(events=args.events, seed=11), CLICKS, USER_PROFILES)
        print(f"loaded {args.events:,} clicks: {loaded}", flush=True)
        with tempfile.TemporaryDirectory() as plain_dir:
            plain = settings_for(args.port_offset, without_expectations(with_contract, Path(plain_dir)))
            assert suite_for(plain, CLICKS.name) is None
            modes = {"without contract": plain, "with contract": with_contract}
            best: dict[str, float] = {}
            table_rows: dict[str, int] = {}
            for run in range(args.runs):
                for mode, settings in modes.items():
                    name = f"raw_clicks_bench_{uuid.uuid4().hex[:6]}"  # fresh checkpoints and table
                    job = dataclasses.replace(RAW_CLICKS, name=name, output=DeltaTable(name))
                    apply(admin_client(settings), deployment_topics(job, job.version))  # its late records' topic
                    seconds = timed(lambda j=job, s=settings: run_job(j, s, available_now=True))  # type: ignore[misc]
                    assert isinstance(job.output, DeltaTable)
                    table_rows[mode] = DeltaTable_(job.output.path(settings, job.version)).count()
                    print(f"run {run + 1} {mode}: {seconds:.1f} s, {table_rows[mode]:,} rows in Delta", flush=True)
                    best[mode] = min(best.get(mode, seconds), seconds)
        rows_out = [
            {"mode": mode, "events": args.events, "seconds": round(best[mode], 1),
             "events_per_s": args.events / best[mode], "rows_in_delta": table_rows[mode]}
            for mode in modes
        ]  # fmt: skip
        overhead = 1 - best["without contract"] / best["with contract"]
        report(
            "bench_contracts",
            rows_out,
            overhead=[{"overhead_pct": round(100 * overhead, 1), "target_pct": 100 * TARGET_OVERHEAD,
                       "met": overhead <= TARGET_OVERHEAD}],
        )  # fmt: skip
    finally:
        if not args.keep:
            stack.down(purge=True)


if __name__ == "__main__":
    run_main(main)
