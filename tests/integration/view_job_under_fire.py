"""A small view job for the exactly-once test: page views per page, ACCUMULATE-merged into Delta.

Run as `python -m tests.integration.view_job_under_fire <topic> <table> <checkpoint>` with the stack's
settings in the environment; the test kills it with SIGKILL at random points and starts it again.
"""

from __future__ import annotations

import os
import sys
import time

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kappa.contracts.topic_declarations import Cleanup, Topic
from kappa.core.settings import load_settings
from kappa.spark.delta_merge import DeltaMerge, MergeMode, foreach_batch
from kappa.spark.session import get_spark
from kappa.spark.topic_io import read_topic

APP_ID = "page_views_under_fire.v1"


def main(topic_name: str, table: str, checkpoint: str) -> None:
    settings = load_settings()
    spark = get_spark(settings, "view-under-fire")
    topic = Topic(topic_name, partitions=2, cleanup=Cleanup.COMPACT, value_schema="clicks.avsc")
    clicks = read_topic(spark, settings, topic, job="page_views_under_fire", job_version=1, max_offsets_per_trigger=250)
    merge = DeltaMerge(table, keys=("page",), app_id=APP_ID, mode=MergeMode.ACCUMULATE, summed=("views",))
    write = foreach_batch(merge, prepare=lambda batch: batch.groupBy("page").agg(F.count("*").alias("views")))

    # Fault injection: hold each batch open after its MERGE committed, before Spark records it as done:
    # the window in which a crash makes Spark run the same batch id again.
    pause = float(os.environ.get("PAUSE_AFTER_MERGE_S", "0"))

    def announced(batch: DataFrame, batch_id: int) -> None:
        print(f"BATCH {batch_id} START", flush=True)  # the test kills the job right after such a line
        write(batch, batch_id)
        print(f"BATCH {batch_id} DONE", flush=True)
        time.sleep(pause)

    query = (
        clicks.records.writeStream.foreachBatch(announced)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    print("DRAINED", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
