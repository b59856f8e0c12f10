"""The reference pipeline's topics, declared once: its jobs (and the tests) import them.

Partitioning: events of one user go to one partition (explicitly partitioned by user id), so a user's order
is the log's order in every run. Four partitions suit a 2-core machine; raise them on a cluster.
"""

from kappa.contracts.topic_declarations import DAY_MS, FOREVER, Cleanup, Topic

# How far back a replay of a compacted entity topic can go with every version intact: compaction erases
# history, so a compacted topic keeps each version only while it is younger than min.compaction.lag.ms.
PROFILE_REPLAY_WINDOW_MS = 30 * DAY_MS

CLICKS = Topic(
    name="clicks",
    partitions=4,
    # Keyed by event id and compacted: at-least-once duplicates collapse, the log stays replayable forever.
    cleanup=Cleanup.COMPACT,
    retention_ms=FOREVER,
    value_schema="clicks.avsc",
    key_field="event_id",
    partition_field="user_id",
    doc="Raw click events from the web tier (source, retained).",
)

USER_PROFILES = Topic(
    name="user_profiles",
    partitions=4,
    cleanup=Cleanup.COMPACT,
    min_compaction_lag_ms=PROFILE_REPLAY_WINDOW_MS,
    value_schema="user_profiles.avsc",
    key_field="user_id",
    partition_field="user_id",
    doc="Profile versions keyed by user id (compacted entity topic; every version kept for 30 days).",
)

ENRICHED_CLICKS = Topic(
    name="enriched_clicks",
    partitions=4,
    cleanup=Cleanup.COMPACT,
    value_schema="enriched_clicks.avsc",
    key_field="event_id",
    doc="Clicks with the profile valid at their event time, keyed by event id (output of enrich_clicks).",
)

ENRICHED_CLICKS_REALTIME = Topic(
    name="enriched_clicks_realtime",
    partitions=4,
    cleanup=Cleanup.COMPACT,
    value_schema="enriched_clicks.avsc",
    key_field="event_id",
    doc=(
        "Clicks with their user's latest published profile, within milliseconds (output of "
        "enrich_clicks_realtime): provisional; enriched_clicks holds the authoritative, replayable answer."
    ),
)

SESSIONS = Topic(
    name="sessions",
    partitions=4,
    cleanup=Cleanup.COMPACT,
    value_schema="sessions.avsc",
    key_field="session_id",
    deletes=True,  # a session merged into another is deleted by a tombstone
    doc="Event-time sessions keyed by session id; updated as they grow, tombstoned when merged away.",
)

# Nothing lists these topics again: the platform finds every topic a job reads or writes, and every topic declared
# here (kappa.runtime.discovery.find_catalog). A job's output topic is a dataset; its physical topics are versioned
# per job version (`enriched_clicks.v1`, with `.late` and the dead letters of its inputs), made by
# `kappa.runtime.binding`. A source (a dataset no job writes) gets its dead-letter topic.
