"""Several jobs as queries of one Spark application: the experiment behind `bench_latency.py --one-application`.

Issue 17 asks whether the local profile should run the pipeline's jobs as separate queries of one Spark
application instead of one driver JVM each. This runs each named job's declared version (bound as `kappa jobs
start` binds it: same checkpoint, consumer group, output and trigger) in its own thread of one process, on one
SparkSession, until SIGTERM; each stops after its current batch. Not a platform command: the measurement decides
whether the platform gets one.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
from types import FrameType

from kappa.deployment import deployed_job
from kappa.runtime import JobSpec, start_point
from kappa.runtime.declaration import version_checkpoints
from kappa.runtime.runner import _run_until_stopped, configure_logging
from kappa.settings import load_settings
from kappa.spark import get_spark


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("jobs", help="comma-separated job names")
    parser.add_argument("--fair", action="store_true", help="Spark's FAIR scheduler, one pool per job")
    args = parser.parse_args()
    configure_logging()
    settings = load_settings()
    stop = threading.Event()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if args.fair:  # read when the SparkContext starts; each query's batches then run in a pool of its own
        os.environ["PYSPARK_SUBMIT_ARGS"] = "--conf spark.scheduler.mode=FAIR pyspark-shell"
    spark = get_spark(settings, "kappa-pipeline")
    specs = [deployed_job(settings, name) for name in args.jobs.split(",")]
    for spec in specs:  # as `kappa jobs run` does before Spark starts
        start_point.pin(version_checkpoints(settings, spec.name, spec.version), spec.name, spec.version, None)

    def run(spec: JobSpec) -> None:
        if args.fair:  # a query's jobs inherit the local properties of the thread that starts it
            spark.sparkContext.setLocalProperty("spark.scheduler.pool", spec.name)
        _run_until_stopped(spec, settings, spark, stop, version=None, available_now=False, starting=None,
                           max_offsets_per_trigger=None, on_batch=None)  # fmt: skip

    threads = [threading.Thread(target=run, args=(spec,)) for spec in specs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    spark.stop()


if __name__ == "__main__":
    main()
