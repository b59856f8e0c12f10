"""What Spark counts in the JVM as each batch of a live query runs, for the metrics (Spark's observed metrics),
named in one place: kappa.spark observes it, kappa.runtime.metrics reads it from the query's progress event.

The age of each input record when its batch read it: from the record's Kafka timestamp to the wall clock then
(kappa.spark.clock), counted on a grid of ages. The metrics add the
batch's own duration, known once it commits, to make it the record's latency to the output's commit.
"""

from __future__ import annotations

RECORD_AGE_OBSERVED = "kappa_record_age:"  # + the input topic's name: one observation per input
RECORD_AGE_COUNT = "records"
RECORD_AGE_SUM_MS = "age_sum_ms"
# Ages in seconds; a record counts in the first cell (previous point, point] its age falls into. The grid steps
# 1, 2, 3, 5 per decade (every point is a count the JVM makes per record and a streaming query plans per batch):
# a record counted at its cell's upper point is at most twice its age (from 0.5 to 1).
RECORD_AGE_GRID_S = (
    0.05, 0.1, 0.2, 0.3, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 30.0, 50.0, 100.0, 200.0, 300.0, 500.0, 1000.0, 3000.0,
)  # fmt: skip


def record_age_column(point_s: float) -> str:
    """The observed column counting the batch's records at most `point_s` seconds old."""
    return f"age_le_{round(point_s * 1000)}ms"
