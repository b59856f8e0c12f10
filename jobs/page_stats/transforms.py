"""Pure DataFrame transforms of page_stats: click facts with their time on page, and the statistics per page and hour.

Time on page of a click: the event time of the same user's next click (by event time, ties by event id) minus its
own, when that is at most the session gap; otherwise null (the user left, or this was their last click).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from kappa.spark.delta_views import last_per_key

# The private facts: one row per click (event id), with what the statistics need. `was_*` is the (page, hour) the
# click counted in before its last change (null for a new click), so that group is recomputed too.
FACTS_SCHEMA = (
    "event_id string, user_id string, page string, hour_start timestamp, event_time timestamp, "
    "time_on_page_ms long, was_page string, was_hour_start timestamp, touched_batch long"
)
KEYS = ("page", "hour_start")
CLICK_COLUMNS = ("event_id", "user_id", "page", "event_time")


def _ms(column: str) -> Column:
    return F.unix_millis(F.col(column))


def click_changes(enriched: DataFrame, facts: DataFrame, gap_ms: int) -> DataFrame:
    """A batch of decoded enriched clicks and the stored click facts -> the facts rows to write.

    Those are every click of the batch (its latest version: a repeated event id updates the click) and every
    stored click whose time on page changes because of them.
    """
    clicks = last_per_key(enriched, ["event_id"]).select(*CLICK_COLUMNS)  # one row per event id
    earlier = facts.join(clicks.select("event_id"), "event_id", "left_semi")  # their stored versions, if any
    # Per touched user, the clicks whose time on page may change: from one gap before the first touched click
    # (its predecessors) to the last one (old positions included: a moved click leaves a gap behind).
    span = (
        clicks.select("user_id", "event_time")
        .unionByName(earlier.select("user_id", "event_time"))
        .groupBy("user_id")
        .agg((F.min(_ms("event_time")) - gap_ms).alias("lo_ms"), F.max(_ms("event_time")).alias("hi_ms"))
    )  # one row per touched user
    # Their neighbours up to one gap after the span: enough to find the next click of every click in it.
    neighbours = (
        facts.join(clicks.select("event_id"), "event_id", "left_anti")
        .join(span, "user_id")
        .where(_ms("event_time").between(F.col("lo_ms"), F.col("hi_ms") + gap_ms))
        .select(*CLICK_COLUMNS, F.lit(False).alias("in_batch"))
    )
    timeline = clicks.withColumn("in_batch", F.lit(True)).unionByName(neighbours).join(span, "user_id")
    order = Window.partitionBy("user_id").orderBy("event_time", "event_id")
    gap_to_next = F.lead(_ms("event_time")).over(order) - _ms("event_time")
    recomputed = (
        timeline.withColumn("time_on_page_ms", F.when(gap_to_next <= gap_ms, gap_to_next))
        .where(_ms("event_time") <= F.col("hi_ms"))  # beyond the span the next click may not have been read
        .withColumn("hour_start", F.date_trunc("hour", F.col("event_time")))
    )  # one row per click in a touched span
    stored = facts.select(
        "event_id",
        F.col("page").alias("was_page"),
        F.col("hour_start").alias("was_hour_start"),
        F.col("time_on_page_ms").alias("stored_time_on_page_ms"),
    )
    return (
        recomputed.join(stored, "event_id", "left")
        .where(F.col("in_batch") | ~F.col("time_on_page_ms").eqNullSafe(F.col("stored_time_on_page_ms")))
        .select(
            "event_id", "user_id", "page", "hour_start", "event_time", "time_on_page_ms", "was_page", "was_hour_start"
        )
    )  # one row per click to write


def touched_groups(touched_facts: DataFrame) -> DataFrame:
    """Touched click facts -> the (page, hour) rows they count in now and counted in before."""
    now = touched_facts.select(*KEYS)
    before = touched_facts.select(F.col("was_page").alias("page"), F.col("was_hour_start").alias("hour_start"))
    return now.unionByName(before).where(F.col("page").isNotNull()).distinct()  # one row per (page, hour)


def page_stats(facts: DataFrame) -> DataFrame:
    """Click facts -> one row per (page, hour): views, distinct users, median time on page.

    The median is exact: the middle value, or the mean of the two middle values truncated to a millisecond;
    null when no click of the hour has a time on page.
    """
    return facts.groupBy(*KEYS).agg(
        F.count("*").alias("views"),
        F.countDistinct("user_id").alias("distinct_users"),
        F.percentile(F.col("time_on_page_ms"), F.lit(0.5)).cast("long").alias("median_time_on_page_ms"),
    )  # one row per (page, hour)
