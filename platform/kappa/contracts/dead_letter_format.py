"""Dead letters: what a record that could not be processed carries, in Python and in Spark alike.

A dead letter keeps the original key and value bytes and says, in headers, why and where it came from. The
`<topic>.dlq` topic of a dataset holds them; `kappa dlq inspect` counts them, `kappa dlq replay` re-injects them.
"""

from __future__ import annotations

from enum import StrEnum


class DeadLetterKind(StrEnum):
    NOT_CONFLUENT_FRAMED = "not-confluent-framed"  # too short, or the first byte is not the magic byte 0
    UNKNOWN_SCHEMA_ID = "unknown-schema-id"  # the 4-byte id is not a registered version of the topic's subject
    UNDECODABLE = "undecodable"  # the Avro body does not decode with its writer schema (truncated, garbage)
    TOMBSTONE_ON_SOURCE = "tombstone-on-source"  # a null value on a topic whose declaration has no deletes
    KEY_MISMATCH = "key-mismatch"  # decoded, but the Kafka key is not the record's declared key field
    PARTITION_MISMATCH = "partition-mismatch"  # decoded, but not in the partition its partition field places it in
    CONTRACT_VIOLATION = "contract-violation"  # decoded, but breaks a row-level data contract
    LATE_EVENT = "late-event"  # beyond the allowed lateness
    # A stateful rule names its own late kinds too (e.g. enrich_clicks' "late-profile"): any kind not above.


# Each batch's side rows by kind, as a job's query observes them (kappa.spark.side_outputs.observe_side_rows) and
# its metrics export them (kappa.runtime.metrics): the observation's name and its count of every kind.
SIDE_ROWS_OBSERVED = "kappa_side_rows"
SIDE_ROWS_ALL = "all"
OTHER_SIDE_KIND = "other"  # a job's own kinds (its rule's), counted together


def side_rows_by_kind(observed: dict[str, int]) -> dict[str, int]:
    """A batch's observed side-row counts -> kind -> rows (kinds with none left out; a job's own kinds summed under
    OTHER_SIDE_KIND)."""
    known = {k.value: int(observed.get(k.value) or 0) for k in DeadLetterKind}
    other = int(observed.get(SIDE_ROWS_ALL) or 0) - sum(known.values())
    return {kind: n for kind, n in (*known.items(), (OTHER_SIDE_KIND, other)) if n > 0}


# Header names, one place. Values are UTF-8 strings.
H_KIND = "kappa.error.kind"
H_MESSAGE = "kappa.error.message"
H_SOURCE_TOPIC = "kappa.source.topic"
H_SOURCE_PARTITION = "kappa.source.partition"
H_SOURCE_OFFSET = "kappa.source.offset"
H_SOURCE_TIMESTAMP = "kappa.source.timestamp"  # the original record's timestamp, ms since the epoch
H_JOB = "kappa.job"
H_JOB_VERSION = "kappa.job.version"
H_TIME = "kappa.dead-lettered.at"  # processing time: metadata, never compared
# Contract violations only: the broken expectations' names (comma-separated) and the suite they belong to.
H_CONTRACT_BROKEN = "kappa.contract.broken"
H_CONTRACT_SUITE = "kappa.contract.suite"
HEADERS = (
    H_KIND, H_MESSAGE, H_SOURCE_TOPIC, H_SOURCE_PARTITION, H_SOURCE_OFFSET, H_SOURCE_TIMESTAMP, H_JOB, H_JOB_VERSION,
    H_TIME,
)  # fmt: skip


def dlq_topic(topic: str) -> str:
    """Where records of `topic` that could not be decoded or broke their contract go."""
    return f"{topic}.dlq"


def late_topic(output_topic: str) -> str:
    """Where the job writing `output_topic` sets aside input records beyond its lateness contract."""
    return f"{output_topic}.late"
