"""`kappa demo`: a fresh stack, the declared topics, generated clicks, a Spark job into Delta, a summary.

The demo runs in its own folder (<state>/demo) so it never touches a stack or tables you keep, and it is
repeatable: it purges that folder before and (unless --keep) after.
"""

from __future__ import annotations

import json
import time

from kappa.errors import KappaError
from kappa.generate import clicks
from kappa.kafka_client import Outgoing, admin_client, produce_all
from kappa.partitioning import partition_for
from kappa.settings import KappaSettings
from kappa.spark import get_spark
from kappa.stack import LocalStack
from kappa.topics import apply


def run_demo(base: KappaSettings, events: int, keep: bool) -> None:
    from jobs.catalog import CLICKS, TOPICS
    from jobs.raw_clicks import job as raw_clicks

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
    t0 = time.monotonic()
    timings = stack.up()
    detail = ", ".join(f"{k} {v:.1f} s" for k, v in timings.items())
    print(f"[1/5] stack healthy in {time.monotonic() - t0:.1f} s ({detail})")
    try:
        for change in apply(admin_client(settings), TOPICS):
            print(f"[2/5] topic {change.topic}: {change.kind}")
        t0 = time.monotonic()
        records = (
            Outgoing(
                key=c.event_id.encode(),
                value=json.dumps(c.as_json_dict()).encode(),
                partition=partition_for(c.user_id, CLICKS.partitions),
                timestamp_ms=c.event_time_ms,
            )
            for c in clicks(events)
        )
        sent = produce_all(settings, CLICKS.name, records)
        print(f"[3/5] produced {sent} click events to '{CLICKS.name}' in {time.monotonic() - t0:.1f} s")

        spark = get_spark(settings, "kappa-demo")
        t0 = time.monotonic()
        raw_clicks.start(spark, settings, available_now=True).awaitTermination()
        print(f"[4/5] Spark job raw_clicks v{raw_clicks.VERSION}: Kafka -> Delta in {time.monotonic() - t0:.1f} s")

        table = spark.read.format("delta").load(raw_clicks.table_path(settings))
        rows = table.count()
        if rows != sent:
            raise KappaError(f"the Delta table has {rows} rows but {sent} events were produced")
        users = table.select("user_id").distinct().count()
        print(f"[5/5] Delta table {raw_clicks.table_path(settings)}: {rows} rows, {users} users. Top pages:")
        for row in table.groupBy("page").count().orderBy("count", "page", ascending=[False, True]).limit(5).collect():
            print(f"        {row['page']:<14} {row['count']:>6} views")
        spark.stop()
    finally:
        if keep:
            print(f"stack left running (`kappa down` with KAPPA_STACK_DIR={settings.stack_path} stops it)")
        else:
            stack.down(purge=True)
            print("stack stopped and demo data removed")
