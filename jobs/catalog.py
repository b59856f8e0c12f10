"""Every topic of the reference pipeline, declared once. Jobs, the CLI and the tests import these.

Partitioning: events of one user go to one partition (keyed or explicitly partitioned by user id), so a
user's order is the log's order in every run. Four partitions suit a 2-core machine; raise them on a cluster.
"""

from kappa.topics import FOREVER, Cleanup, Topic

DAY_MS = 24 * 60 * 60 * 1000
# How far back a replay of a compacted entity topic can go with every version intact (DESIGN: compaction
# erases history, so a compacted topic keeps each version younger than min.compaction.lag.ms).
PROFILE_REPLAY_WINDOW_MS = 30 * DAY_MS
DLQ_RETENTION_MS = 30 * DAY_MS

CLICKS = Topic(
    name="clicks",
    partitions=4,
    # Keyed by event id and compacted: at-least-once duplicates collapse, the log stays replayable forever.
    cleanup=Cleanup.COMPACT,
    retention_ms=FOREVER,
    value_schema="click_event.avsc",
    doc="Raw click events from the web tier (source, retained).",
)

USER_PROFILES = Topic(
    name="user_profiles",
    partitions=4,
    cleanup=Cleanup.COMPACT,
    min_compaction_lag_ms=PROFILE_REPLAY_WINDOW_MS,
    value_schema="user_profile.avsc",
    doc="Profile versions keyed by user id (compacted entity topic; every version kept for 30 days).",
)

CLICKS_DLQ = Topic(
    name="clicks.dlq",
    partitions=1,
    cleanup=Cleanup.DELETE,
    retention_ms=DLQ_RETENTION_MS,
    doc="Click records that could not be decoded or broke their contract, with headers naming the error.",
)

TOPICS: tuple[Topic, ...] = (CLICKS, USER_PROFILES, CLICKS_DLQ)
