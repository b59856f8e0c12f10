"""Confluent-framed Avro in Spark, entirely in the JVM: no Python runs per record.

Spark's `from_avro` knows one writer schema and no Confluent header, while a topic whose schema evolved holds
records of several writer versions. `decode_confluent` strips the header, reads the schema id, and picks, per
record, a `from_avro` that resolves that writer version into the reader schema (Avro schema resolution: new
fields defaulted, enums widened, ints promoted). Records that cannot be decoded get a `dead_letter` reason
instead of a `record`, and nothing is lost: every input row is in exactly one of the two outputs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro, to_avro

from kappa.avro.wire import HEADER_SIZE, MAGIC
from kappa.deadletter import DeadLetterKind

RECORD = "record"
DEAD_LETTER = "dead_letter"  # struct<kind: string, message: string>, null when the record decoded


def schema_id_of(value: Column) -> Column:
    """Bytes 2-5 of the header, big-endian, as an int (hex -> base-10 string -> int, all in the JVM)."""
    return F.conv(F.hex(F.substring(value, 2, 4)), 16, 10).cast("int")


def decode_confluent(
    df: DataFrame,
    reader_schema: Mapping[str, Any],
    writer_schemas: Mapping[int, Mapping[str, Any]],
    value_col: str = "value",
) -> DataFrame:
    """Add `record` (the reader schema's struct) and `dead_letter` (why a row could not be decoded).

    `writer_schemas`: every writer version this topic may hold, by registry id (its subject's versions).
    Exactly one of `record` / `dead_letter` is non-null for every non-null value.
    """
    value = F.col(value_col)
    framed = (F.length(value) >= HEADER_SIZE) & (F.substring(value, 1, 1) == F.lit(bytes([MAGIC])))
    schema_id = schema_id_of(value)
    body = F.expr(f"substring(`{value_col}`, {HEADER_SIZE + 1})")
    reader_json = json.dumps(reader_schema)

    decoded: Column | None = None
    for writer_id, writer in sorted(writer_schemas.items()):
        options = {"mode": "PERMISSIVE", "avroSchema": reader_json}  # PERMISSIVE: bad bytes -> null, not a failure
        branch = from_avro(body, json.dumps(writer), options)
        decoded = (
            F.when(schema_id == writer_id, branch) if decoded is None else decoded.when(schema_id == writer_id, branch)
        )
    known_id = schema_id.isin(list(writer_schemas)) if writer_schemas else F.lit(False)
    record = F.when(framed & known_id, decoded) if decoded is not None else F.lit(None)

    # PERMISSIVE gives a struct of nulls (not a null struct) for bytes it cannot decode. A field the reader
    # schema declares non-nullable is never null in a good record, so a null there marks a bad one.
    required = [f["name"] for f in reader_schema["fields"] if not _nullable(f["type"])]
    probe = required or [f["name"] for f in reader_schema["fields"]]
    if required:
        garbled = F.exists(F.array(*[record.getField(n).isNull() for n in probe]), lambda x: x)
    else:  # every field nullable: only an all-null struct is taken for a failed decode
        garbled = F.forall(F.array(*[record.getField(n).isNull() for n in probe]), lambda x: x)
    record = F.when(record.isNotNull() & ~garbled, record)

    with_record = df.withColumn(RECORD, record)
    kind = (
        F.when(~framed, F.lit(DeadLetterKind.NOT_CONFLUENT_FRAMED.value))
        .when(~known_id, F.lit(DeadLetterKind.UNKNOWN_SCHEMA_ID.value))
        .when(F.col(RECORD).isNull(), F.lit(DeadLetterKind.UNDECODABLE.value))
    )
    message = (
        F.when(
            ~framed,
            F.concat(
                F.lit("value is "),
                F.length(value).cast("string"),
                F.lit(" byte(s); first byte "),
                F.coalesce(F.hex(F.substring(value, 1, 1)), F.lit("none")),
                F.lit(" (expected the 5-byte header 0x00 + schema id)"),
            ),
        )
        .when(
            ~known_id,
            F.concat(
                F.lit("schema id "),
                schema_id.cast("string"),
                F.lit(f" is not a registered version of this topic's subject (known: {sorted(writer_schemas)})"),
            ),
        )
        .when(
            F.col(RECORD).isNull(),
            F.concat(F.lit("Avro body does not decode with writer schema "), schema_id.cast("string")),
        )
    )
    # A null value is a tombstone (a delete in a compacted topic), not an error.
    dead = F.when(value.isNotNull() & kind.isNotNull(), F.struct(kind.alias("kind"), message.alias("message")))
    return with_record.withColumn(DEAD_LETTER, dead)


def _nullable(avro_type: object) -> bool:
    return isinstance(avro_type, list) and "null" in avro_type


def encode_confluent(struct: Column, schema: Mapping[str, Any], schema_id: int) -> Column:
    """A Spark struct -> Confluent-framed Avro bytes (header + `to_avro` with the registered schema)."""
    header = bytes([MAGIC]) + schema_id.to_bytes(4, "big")
    return F.concat(F.lit(header), to_avro(struct, json.dumps(schema)))


def struct_for(schema: Mapping[str, Any]) -> Column:
    """A struct of the DataFrame's columns named like the schema's fields, in the schema's order."""
    return F.struct(*[F.col(field["name"]) for field in schema["fields"]])
