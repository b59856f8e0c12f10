"""`kappa demo`: a fresh stack, the declared topics, generated clicks, a Spark job into Delta, a summary.

The demo runs in its own folder (<state>/demo) so it never touches a stack or tables you keep, and it is
repeatable: it purges that folder before and (unless --keep) after.
"""

from __future__ import annotations

import shutil
import time

from kappa.avro.contracts import apply_schemas
from kappa.avro.registry import Registry, value_subject
from kappa.avro.schemas import topic_value_schema
from kappa.avro.serde import AvroEncoder
from kappa.dlq import inspect
from kappa.errors import KappaError
from kappa.generate import click_messages, clicks
from kappa.kafka_client import admin_client, produce_all
from kappa.runtime.runner import run_job
from kappa.settings import KappaSettings
from kappa.spark import get_spark
from kappa.stack import LocalStack
from kappa.topics import apply


def run_demo(base: KappaSettings, events: int, keep: bool, malformed_share: float = 0.01) -> None:
    from jobs.catalog import CLICKS, TOPICS
    from jobs.raw_clicks.declaration import JOB as RAW_CLICKS

    demo_dir = base.state_dir / "demo"
    settings = base.model_copy(
        update={
            "stack_dir": demo_dir / "stack",
            "delta_root": str(demo_dir / "delta"),
            "checkpoint_root": str(demo_dir / "checkpoints"),
        }
    )
    stack = LocalStack(settings)
    stack.down(purge=True)
    shutil.rmtree(demo_dir, ignore_errors=True)  # tables and checkpoints of an earlier demo
    t0 = time.monotonic()
    timings = stack.up()
    detail = ", ".join(f"{k} {v:.1f} s" for k, v in timings.items())
    print(f"[1/5] stack healthy in {time.monotonic() - t0:.1f} s ({detail})")
    try:
        changes = apply(admin_client(settings), TOPICS)
        print(f"[2/5] {len(changes)} topics created; ", end="")
        registered = apply_schemas(settings.schemas_path, TOPICS, settings.registry)
        print(f"{len(registered)} schemas registered (BACKWARD_TRANSITIVE)")
        t0 = time.monotonic()
        with Registry(settings.registry) as registry:
            schema = topic_value_schema(settings.schemas_path, CLICKS)
            encoder = AvroEncoder(registry, value_subject(CLICKS.name), schema)
            records = click_messages(clicks(events), encoder.encode, CLICKS.partitions, malformed_share)
            sent = produce_all(settings, CLICKS.name, records)
        print(
            f"[3/5] produced {sent} Avro click events to '{CLICKS.name}' in {time.monotonic() - t0:.1f} s "
            f"({malformed_share:.0%} malformed on purpose)"
        )

        run = run_job(RAW_CLICKS, settings, available_now=True)
        print(f"[4/5] Spark job {run.job} v{run.version}: Kafka -> Delta in {run.seconds:.1f} s")

        spark = get_spark(settings, "kappa-demo")
        table_path = RAW_CLICKS.output.path(settings, RAW_CLICKS.version)  # type: ignore[union-attr]
        table = spark.read.format("delta").load(table_path)
        rows = table.count()
        dead = inspect(settings, CLICKS.name, samples=1)
        if rows + dead.total != sent:
            raise KappaError(f"records in ({sent}) != rows in Delta ({rows}) + dead letters ({dead.total})")
        kinds = ", ".join(f"{k} {n}" for k, n in dead.by_kind.most_common())
        print(f"      reconciled: {sent} in = {rows} in Delta + {dead.total} dead-lettered ({kinds})")
        users = table.select("user_id").distinct().count()
        print(f"[5/5] Delta table {table_path}: {rows} rows, {users} users. Top pages:")
        for row in table.groupBy("page").count().orderBy("count", "page", ascending=[False, True]).limit(5).collect():
            print(f"        {row['page']:<14} {row['count']:>6} views")
        spark.stop()
    finally:
        if keep:
            print(f"stack left running (`kappa down` with KAPPA_STACK_DIR={settings.stack_path} stops it)")
        else:
            stack.down(purge=True)
            shutil.rmtree(demo_dir, ignore_errors=True)
            print("stack stopped and demo data removed")
