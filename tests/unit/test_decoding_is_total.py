"""Decoding is total: any key and value at all becomes a record or a dead letter with its reason, never an error.

Through the real Spark path (`decode_topic`, ANSI mode on, as every job runs it): random bytes, truncated and
corrupted frames, unknown, huge and negative schema ids, empty and null values, wrong and binary keys, 1 MB values.
"""

import io
import os
import zlib
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from fastavro import parse_schema, schemaless_writer
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.catalog import CLICKS
from kappa.contracts.dead_letter_format import DeadLetterKind
from kappa.contracts.schema_files import topic_value_schema
from kappa.contracts.wire_format import frame
from kappa.core.settings import load_settings
from kappa.spark.topic_io import decode_topic

SCHEMA = topic_value_schema(load_settings().schemas_path, CLICKS)
WRITER_ID = 7
KIND, MESSAGE, OFFSET = 0, 1, 4  # positions of the kind, message and source offset in a dead letter's headers


def click_bytes(event_id: str, user_id: str = "u1") -> bytes:
    record = {
        "event_id": event_id,
        "user_id": user_id,
        "page": "/a",
        "referrer": None,
        "event_time": datetime(2026, 1, 1, tzinfo=UTC),
        "device": "MOBILE",
    }
    buffer = io.BytesIO()
    schemaless_writer(buffer, parse_schema(SCHEMA), record)
    return frame(WRITER_ID, buffer.getvalue())


GOOD = click_bytes("e1")
# The shape that stopped every job for ever: not framed, 5 bytes or longer, bytes 2-5 read as 2^31 or more.
POISON_PILL = b"\x01\xff\xff\xff\xff\x00"


def kafka_rows(spark: SparkSession, records: list[tuple[bytes | None, bytes | None]]) -> DataFrame:
    rows = [(k, v, "clicks", 0, i, datetime(2026, 1, 1, tzinfo=UTC)) for i, (k, v) in enumerate(records)]
    return spark.createDataFrame(
        rows, "key binary, value binary, topic string, partition int, offset long, timestamp timestamp"
    )


def outcomes(spark: SparkSession, records: list[tuple[bytes | None, bytes | None]]) -> dict[int, str]:
    """Source offset -> `record` or the dead letter's kind, in one Spark job; raises if any offset is twice."""
    decoded = decode_topic(kafka_rows(spark, records), SCHEMA, {WRITER_ID: SCHEMA}, "fuzz", 1, key_field="event_id")
    headers = F.col("headers")
    every = (
        decoded.records.select(F.col("kafka_offset").alias("offset"), F.lit("record").alias("outcome"))
        .union(
            decoded.dead_letters.select(
                headers[OFFSET]["value"].cast("string").cast("long").alias("offset"),
                headers[KIND]["value"].cast("string").alias("outcome"),
            )
        )
        .union(decoded.tombstones.select(F.col("kafka_offset").alias("offset"), F.lit("tombstone").alias("outcome")))
    )
    found = [(r.offset, r.outcome) for r in every.collect()]
    assert "tombstone" not in {o for _, o in found}  # clicks declare no deletes: a null value is a dead letter
    assert len({o for o, _ in found}) == len(found), f"an input is in two outputs: {sorted(found)}"
    return dict(found)


def test_the_poison_pill_and_huge_values_are_dead_letters(spark: SparkSession) -> None:
    megabyte = os.urandom(1 << 20)
    unframed = b"\x01" + megabyte[1:]
    records: list[tuple[bytes | None, bytes | None]] = [
        (b"e1", POISON_PILL),
        (b"e1", b"\x00\xff\xff\xff\xff" + GOOD[5:]),  # framed, id 2^32 - 1
        (b"e1", b"\x00\x80\x00\x00\x00" + GOOD[5:]),  # framed, id 2^31 (negative as a signed int)
        (b"e1", frame(WRITER_ID, megabyte)),  # 1 MB of junk after a known id
        (b"e1", unframed),  # 1 MB without a header
        (b"e1", GOOD),
    ]
    assert outcomes(spark, records) == {
        0: DeadLetterKind.NOT_CONFLUENT_FRAMED,
        1: DeadLetterKind.UNKNOWN_SCHEMA_ID,
        2: DeadLetterKind.UNKNOWN_SCHEMA_ID,
        3: DeadLetterKind.UNDECODABLE,
        4: DeadLetterKind.NOT_CONFLUENT_FRAMED,
        5: "record",
    }


@st.composite
def corrupted(draw: st.DrawFn) -> bytes:
    """A good frame, cut short, with a byte changed, with bytes added, or with another schema id."""
    value = bytearray(GOOD)
    how = draw(st.sampled_from(["cut", "flip", "append", "schema id"]))
    if how == "cut":
        return bytes(value[: draw(st.integers(0, len(value) - 1))])
    if how == "flip":
        at = draw(st.integers(0, len(value) - 1))
        value[at] = draw(st.integers(0, 255))
        return bytes(value)
    if how == "append":
        return bytes(value) + draw(st.binary(min_size=1, max_size=16))
    schema_id = draw(st.integers(-(2**31), 2**32 - 1))  # negative ids as a signed writer would put them
    return b"\x00" + (schema_id % 2**32).to_bytes(4, "big") + bytes(value[5:])


@st.composite
def kafka_records(draw: st.DrawFn) -> tuple[bytes | None, bytes | None]:
    key = draw(st.one_of(st.just(b"e1"), st.just(b"e1"), st.none(), st.binary(max_size=8), st.just(b"\xff\xfe")))
    value = draw(
        st.one_of(
            st.just(GOOD),
            st.just(GOOD),
            st.none(),
            st.just(b""),
            st.binary(max_size=64),  # junk of any shape
            st.binary(min_size=5, max_size=12).map(lambda b: b"\x01" + b),  # the poison pill's family
            corrupted(),
        )
    )
    return key, value


TRIED: Counter[str] = Counter()  # every outcome over all examples: the closing figures of issue 16


def test_any_bytes_become_a_record_or_a_dead_letter(spark: SparkSession) -> None:
    @hypothesis_settings(
        max_examples=25,
        deadline=None,  # a Spark job per example
        derandomize=True,  # the same examples in every CI run
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(st.lists(kafka_records(), min_size=50, max_size=200))  # a batch per example: a Spark job each
    def decode(records: list[tuple[bytes | None, bytes | None]]) -> None:
        got = outcomes(spark, records)
        assert set(got) == set(range(len(records)))  # every record in exactly one output
        for offset, (key, value) in enumerate(records):
            expected = expected_outcome(key, value)
            if expected is not None:
                assert got[offset] == expected, (key, value)
        TRIED.update(got.values())

    decode()
    print(f"\ndecoding fuzz: {sum(TRIED.values())} records, outcomes {dict(TRIED)}, crashes 0")
    # The generator reaches every outcome, or the property says little.
    assert set(TRIED) == {
        "record",
        DeadLetterKind.NOT_CONFLUENT_FRAMED,
        DeadLetterKind.UNKNOWN_SCHEMA_ID,
        DeadLetterKind.UNDECODABLE,
        DeadLetterKind.TOMBSTONE_ON_SOURCE,
        DeadLetterKind.KEY_MISMATCH,
    }


def expected_outcome(key: bytes | None, value: bytes | None) -> Any:
    """The outcome the header alone decides (None where only decoding the body can tell), computed by hand."""
    if value is None:
        return DeadLetterKind.TOMBSTONE_ON_SOURCE
    if len(value) < 5 or value[0] != 0:
        return DeadLetterKind.NOT_CONFLUENT_FRAMED
    if int.from_bytes(value[1:5], "big") != WRITER_ID:
        return DeadLetterKind.UNKNOWN_SCHEMA_ID
    if value == GOOD:
        return "record" if key == b"e1" else DeadLetterKind.KEY_MISMATCH
    return None


def test_a_record_outside_its_users_partition_is_a_dead_letter_that_says_where_it_belongs(spark: SparkSession) -> None:
    """clicks are placed by user_id: in every partition but the user's, the same record is refused, by every
    reader (decoding decides), with its place and the user's; a wrong key is reported as that, first."""
    home = zlib.crc32(b"ann") % 4  # independently of partition_for
    value = click_bytes("e1", user_id="ann")
    records = [(b"e1", value, p) for p in range(4)] + [(b"e2", value, (home + 1) % 4)]
    rows = [(k, v, "clicks", p, i, datetime(2026, 1, 1, tzinfo=UTC)) for i, (k, v, p) in enumerate(records)]
    raw = spark.createDataFrame(
        rows, "key binary, value binary, topic string, partition int, offset long, timestamp timestamp"
    )
    decoded = decode_topic(raw, SCHEMA, {WRITER_ID: SCHEMA}, "t", 1, key_field="event_id", placed_by=("user_id", 4))
    assert [r.kafka_offset for r in decoded.records.collect()] == [home]
    headers = F.col("headers")
    letters = decoded.dead_letters.select(
        headers[OFFSET]["value"].cast("string").cast("long").alias("offset"),
        headers[KIND]["value"].cast("string").alias("kind"),
        headers[MESSAGE]["value"].cast("string").alias("message"),
    )
    why = "partition {} is not the partition of user_id 'ann' ({} of 4, as the platform's producers place it)"
    misplaced = {(p, "partition-mismatch", why.format(p, home)) for p in range(4) if p != home}
    key_first = (4, "key-mismatch", "key 'e2' is not the record's event_id 'e1'")
    assert {(r.offset, r.kind, r.message) for r in letters.collect()} == {*misplaced, key_first}


def test_a_number_places_its_record_by_its_text_as_the_producers_place_it(spark: SparkSession) -> None:
    """`kappa produce` places a record by its partition field's text (`partition_for(key_text(value))`): an int
    field is placed by its digits, so decoding checks the same partition."""
    schema = {"type": "record", "name": "Reading", "fields": [{"name": "id", "type": "string"},
                                                               {"name": "sensor", "type": "int"}]}  # fmt: skip
    home = zlib.crc32(b"1234") % 4  # independently of partition_for
    buffer = io.BytesIO()
    schemaless_writer(buffer, parse_schema(schema), {"id": "r1", "sensor": 1234})
    value = frame(WRITER_ID, buffer.getvalue())
    rows = [(b"r1", value, "readings", p, p, datetime(2026, 1, 1, tzinfo=UTC)) for p in range(4)]
    raw = spark.createDataFrame(
        rows, "key binary, value binary, topic string, partition int, offset long, timestamp timestamp"
    )
    decoded = decode_topic(raw, schema, {WRITER_ID: schema}, "t", 1, key_field="id", placed_by=("sensor", 4))
    assert [r.kafka_offset for r in decoded.records.collect()] == [home]
    assert decoded.dead_letters.count() == 3
