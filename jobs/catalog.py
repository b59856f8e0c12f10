"""Every topic of the reference pipeline, declared once. Jobs, the CLI and the tests import these.

Partitioning: events of one user go to one partition (explicitly partitioned by user id), so a user's order
is the log's order in every run. Four partitions suit a 2-core machine; raise them on a cluster.
"""

from kappa.deadletter import dlq_topic
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

ENRICHED_CLICKS = Topic(
    name="enriched_clicks",
    partitions=4,
    cleanup=Cleanup.COMPACT,
    value_schema="enriched_click.avsc",
    doc="Clicks with the profile valid at their event time, keyed by event id (output of enrich_clicks).",
)

SESSIONS = Topic(
    name="sessions",
    partitions=4,
    cleanup=Cleanup.COMPACT,
    value_schema="session.avsc",
    doc="Event-time sessions keyed by session id; updated as they grow, tombstoned when merged away.",
)

DATASETS: tuple[Topic, ...] = (CLICKS, USER_PROFILES, ENRICHED_CLICKS, SESSIONS)


def dead_letters_of(topic: Topic) -> Topic:
    """The dead-letter topic of a dataset: original bytes plus headers naming the error; 30 days."""
    return Topic(
        name=dlq_topic(topic.name),
        partitions=1,
        cleanup=Cleanup.DELETE,
        retention_ms=DLQ_RETENTION_MS,
        doc=f"Records of {topic.name} that could not be decoded or broke their contract.",
    )


def late_events_of(topic: Topic) -> Topic:
    """The side topic of events too late for a job's allowed lateness: original bytes plus headers."""
    return Topic(
        name=f"{topic.name}.late",
        partitions=1,
        cleanup=Cleanup.DELETE,
        retention_ms=DLQ_RETENTION_MS,
        doc=f"Input records the job writing {topic.name} set aside as beyond its lateness contract, counted.",
    )


TOPICS: tuple[Topic, ...] = (
    DATASETS + tuple(dead_letters_of(t) for t in DATASETS) + (late_events_of(ENRICHED_CLICKS), late_events_of(SESSIONS))
)
