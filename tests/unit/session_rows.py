"""Hand-made `sessions` changes as the view jobs receive them (records and tombstones, kappa.spark.changes)."""

from datetime import UTC, datetime

from pyspark.sql import DataFrame, SparkSession

CHANGES = (
    "key string, session_id string, user_id string, start_time timestamp, end_time timestamp, clicks int, "
    "distinct_pages int, entry_page string, exit_page string, segment string, kafka_partition int, "
    "kafka_offset long, kafka_timestamp timestamp, deleted boolean, final boolean"
)
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(hh: int, mm: int = 0) -> datetime:
    return datetime(2026, 1, 1, hh, mm, tzinfo=UTC)


def ms(hh: int, mm: int = 0) -> int:
    return int(at(hh, mm).timestamp() * 1000)


def upsert(
    offset: int, sid: str, user: str, start: datetime, end: datetime, clicks: int, segment: str, final: bool = False
) -> tuple[object, ...]:
    """A session's value; `final`: its last record (sessionize writes nothing of it after that)."""
    return (sid, sid, user, start, end, clicks, 1, "/in", "/out", segment, 0, offset, T0, False, final)


def tombstone(offset: int, sid: str) -> tuple[object, ...]:
    return (sid, sid, None, None, None, None, None, None, None, None, 0, offset, T0, True, None)


def changes(spark: SparkSession, *rows: tuple[object, ...]) -> DataFrame:
    return spark.createDataFrame(list(rows), CHANGES)


# Batch 0: u1 has two sessions (s2 the later one, PRO), u2 one; s1 is written twice (the later offset counts).
BATCH_0 = (
    upsert(0, "s1", "u1", at(10), at(10, 10), 4, "FREE"),
    upsert(1, "s2", "u1", at(12), at(12, 10), 3, "PRO"),
    upsert(2, "s3", "u2", at(9), at(9, 30), 7, "TRIAL"),
    upsert(3, "s1", "u1", at(10), at(10, 20), 5, "FREE"),
)
# Batch 1: a late click merges s2 into s1 (s1 grows, s2 is tombstoned); u2's only session is tombstoned; a tombstone
# of a session never seen; s4 is created and tombstoned within the batch.
BATCH_1 = (
    upsert(4, "s1", "u1", at(10), at(12, 10), 9, "FREE"),
    tombstone(5, "s2"),
    tombstone(6, "s3"),
    tombstone(7, "s9"),
    upsert(8, "s4", "u3", at(8), at(8, 5), 2, "PRO"),
    tombstone(9, "s4"),
)
