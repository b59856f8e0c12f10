"""`kappa demo`: a fresh stack, the declared topics, a generated clickstream, every job, a summary from Delta.

The demo runs in its own folder (<state>/demo) so it never touches a stack or tables you keep, and it is
repeatable: it purges that folder before and (unless --keep) after.
"""

from __future__ import annotations

import shutil
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

from pyspark.sql import functions as F

from jobs.catalog import CLICKS, USER_PROFILES
from jobs.clickstream.generator import StreamConfig
from jobs.clickstream.produce import generate
from kappa.contracts.schema_rollout import apply_schemas
from kappa.core.errors import KappaError
from kappa.core.security import registry_login
from kappa.core.settings import KappaSettings
from kappa.kafka.clients import admin_client
from kappa.kafka.topic_admin import apply
from kappa.ops.dlq import inspect
from kappa.runtime.binding import deployed_job, ensure_live, topics_to_apply
from kappa.runtime.declaration import JobSpec
from kappa.runtime.discovery import discover, load_catalog, pipeline_order, writers_of
from kappa.runtime.outputs import output_of
from kappa.runtime.readers import table_path
from kappa.runtime.runner import run_job
from kappa.spark.session import SHORT_RUN_JVM, get_spark
from kappa.stack import LocalStack


def run_demo(base: KappaSettings, events: int, keep: bool, malformed_share: float = 0.01) -> None:
    demo_dir = base.state_dir / "demo"
    settings = base.model_copy(
        update={
            "stack_dir": demo_dir / "stack",
            "delta_root": str(demo_dir / "delta"),
            "checkpoint_root": str(demo_dir / "checkpoints"),
            # The demo's driver lives a minute or two: it starts faster with the short-run JIT (unless you chose).
            "spark_driver_java_options": base.spark_driver_java_options or SHORT_RUN_JVM,
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
        topics = load_catalog()
        changes = apply(admin_client(settings), topics_to_apply(settings, topics))
        print(f"[2/5] {len(changes)} topics created; ", end="")
        registered = apply_schemas(settings.schemas_path, topics, settings.registry, registry_login(settings))
        print(f"{len(registered)} schemas registered (BACKWARD_TRANSITIVE)")
        config = StreamConfig(events=events, users=max(20, events // 100), malformed_share=malformed_share)
        produced = generate(settings, config, CLICKS, USER_PROFILES, progress=None)
        print(
            f"[3/5] produced {produced.clicks} Avro clicks and {produced.profiles} profile versions in "
            f"{produced.seconds:.1f} s ({produced.malformed} clicks malformed on purpose)"
        )

        jobs = pipeline_order(discover())
        print(f"[4/5] replaying the retained log through {len(jobs)} jobs (availableNow; each starts when the jobs "
              "writing its inputs are done):")  # fmt: skip
        started = time.monotonic()
        get_spark(settings, "kappa-demo")  # the jobs' one Spark application
        _replay(settings, jobs)
        print(f"      the replay step took {time.monotonic() - started:.1f} s (Spark's start included)")
        _summary(settings, produced.clicks)
    finally:
        if keep:
            print(f"stack left running (`kappa down` with KAPPA_STACK_DIR={settings.stack_path} stops it)")
        else:
            stack.down(purge=True)
            shutil.rmtree(demo_dir, ignore_errors=True)
            print("stack stopped and demo data removed")


def _replay(settings: KappaSettings, jobs: list[JobSpec]) -> None:
    """Every job over the retained log, as `kappa jobs run --available-now` runs it, each in a thread of one
    Spark application and started as soon as the jobs writing its inputs are done: independent jobs share the
    cores instead of waiting for each other, and every job still reads its inputs whole. A failure (or Ctrl-C)
    stops the others after their current batch."""
    writers = writers_of(jobs)
    # Bound as `kappa jobs run` binds it: its versioned output, its inputs at their live versions. One after
    # the other, in pipeline order: each first deployment moves an alias, and moves at once fence each other.
    bound = {}
    for declared in jobs:
        bound[declared.name] = deployed_job(settings, declared.name)
        ensure_live(settings, bound[declared.name], bound[declared.name].version)
    stop = threading.Event()
    done: dict[str, Future[None]] = {}

    def replay(declared: JobSpec) -> None:
        for topic in (*declared.inputs, *declared.lookups):
            if writers.get(topic.name, declared.name) != declared.name:
                done[writers[topic.name]].result()  # its writer's failure is this job's too
        job = bound[declared.name]
        run = run_job(job, settings, available_now=True, stop=stop)
        output, records = output_of(job.output), run.input_rows.get(run.output_query, 0)
        took = f"{records} records in {run.seconds:.1f} s"
        print(f"      {job.name} v{job.version} -> {output.kind} {output.name}: {took}")

    with ThreadPoolExecutor(max_workers=len(jobs), thread_name_prefix="replay") as pool:
        for declared in jobs:  # in pipeline order: a job's writers are submitted before it
            done[declared.name] = pool.submit(replay, declared)
        try:
            for future in done.values():
                future.result()
        except BaseException:
            stop.set()
            raise


def _summary(settings: KappaSettings, sent: int) -> None:
    """What landed, read back from the Delta tables; the click count reconciled with the dead letters."""

    spark = get_spark(settings, "kappa-demo")
    jobs = discover()

    def table(job: str):  # type: ignore[no-untyped-def]
        return spark.read.format("delta").load(table_path(settings, jobs[job].output.name))  # the live version

    rows = table("raw_clicks").count()
    dead = inspect(settings, CLICKS.name, samples=1)
    if rows + dead.records != sent:
        raise KappaError(f"records in ({sent}) != rows in Delta ({rows}) + dead-lettered records ({dead.records})")
    kinds = ", ".join(f"{k} {n}" for k, n in dead.by_kind.most_common())
    print(f"      reconciled: {sent} in = {rows} in Delta + {dead.records} dead-lettered ({kinds}; "
          f"reported by {', '.join(sorted(dead.by_job))})")  # fmt: skip

    print("[5/5] read back from Delta. Top pages (page_stats, all hours):")
    top = table("page_stats").groupBy("page").agg(F.sum("views").alias("views"), F.max("distinct_users").alias("u"))
    for row in top.orderBy(F.desc("views"), "page").limit(5).collect():
        print(f"        {row['page']:<14} {row['views']:>6} views")
    sessions = (
        table("sessions_table")
        .agg(
            F.count("*").alias("n"),
            F.avg("clicks").alias("clicks"),
            F.percentile_approx((F.unix_millis("end_time") - F.unix_millis("start_time")) / 60_000, 0.5).alias(
                "minutes"
            ),
        )
        .first()
    )
    assert sessions is not None
    print(f"      sessions: {sessions['n']}, {sessions['clicks']:.1f} clicks on average, "
          f"median length {sessions['minutes']:.1f} min")  # fmt: skip
    segments = table("user_activity").groupBy("segment").count().orderBy(F.desc("count"), "segment").collect()
    print("      users by segment (user_activity): " + ", ".join(f"{r['segment']} {r['count']}" for r in segments))
    spark.stop()
