"""Python Avro serde in the Confluent wire format (fastavro), with writer-to-reader schema resolution.

Used by the data generator, the dead-letter tools and tests. Jobs decode in the JVM (kappa.spark.confluent_avro).
"""

from __future__ import annotations

import io
from typing import Any

from fastavro import parse_schema, schemaless_reader, schemaless_writer

from kappa.contracts.dead_letter_format import DeadLetterKind
from kappa.contracts.registry import Registry, UnknownSchemaIdError
from kappa.contracts.wire_format import WireFormatError, frame, unframe


class AvroEncoder:
    """Encodes records with one schema under one subject; registers (or looks up) the schema once."""

    def __init__(self, registry: Registry, subject: str, schema: dict[str, Any], register: bool = True) -> None:
        self.schema = schema
        self._parsed = parse_schema(schema)
        found = registry.register(subject, schema) if register else registry.lookup(subject, schema)
        if found is None:
            raise WireFormatError(
                DeadLetterKind.UNKNOWN_SCHEMA_ID,
                f"the schema is not registered under {subject} (`kappa schemas apply`)",
            )
        self.schema_id = found

    def encode(self, record: dict[str, Any]) -> bytes:
        buffer = io.BytesIO()
        schemaless_writer(buffer, self._parsed, record)
        return frame(self.schema_id, buffer.getvalue())


class AvroDecoder:
    """Decodes framed records of any registered writer schema into the reader schema."""

    def __init__(self, registry: Registry, reader_schema: dict[str, Any]) -> None:
        self._registry = registry
        self._reader = parse_schema(reader_schema)
        self._writers: dict[int, Any] = {}

    def _writer(self, schema_id: int) -> Any:
        if schema_id not in self._writers:
            try:
                self._writers[schema_id] = parse_schema(self._registry.schema_by_id(schema_id))
            except UnknownSchemaIdError as exc:
                raise WireFormatError(DeadLetterKind.UNKNOWN_SCHEMA_ID, str(exc)) from None
        return self._writers[schema_id]

    def decode(self, data: bytes | None) -> dict[str, Any]:
        schema_id, body = unframe(data)
        writer = self._writer(schema_id)
        stream = io.BytesIO(body)
        try:
            record = schemaless_reader(stream, writer, self._reader)
        except Exception as exc:  # fastavro raises EOFError, ValueError, IndexError, … on bad bytes
            raise WireFormatError(
                DeadLetterKind.UNDECODABLE, f"Avro body does not decode with writer schema {schema_id}: {exc!r}"
            ) from None
        if stream.tell() != len(body):
            raise WireFormatError(
                DeadLetterKind.UNDECODABLE,
                f"{len(body) - stream.tell()} byte(s) left after the record (writer schema {schema_id})",
            )
        assert isinstance(record, dict)  # the reader schema is a record
        return record
