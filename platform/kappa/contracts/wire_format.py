"""The Confluent wire format: magic byte 0, a 4-byte big-endian schema id, then the Avro binary body."""

from __future__ import annotations

import struct

from kappa.contracts.dead_letter_format import DeadLetterKind
from kappa.core.errors import KappaError

MAGIC = 0
HEADER_SIZE = 5
_HEADER = struct.Struct(">bI")


class WireFormatError(KappaError):
    """A record that cannot be decoded; `kind` names the dead-letter category."""

    def __init__(self, kind: DeadLetterKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def frame(schema_id: int, body: bytes) -> bytes:
    return _HEADER.pack(MAGIC, schema_id) + body


def unframe(data: bytes | None) -> tuple[int, bytes]:
    """(schema id, Avro body) of a framed record, or a WireFormatError saying what is wrong."""
    if data is None or len(data) < HEADER_SIZE:
        size = "null" if data is None else f"{len(data)} byte(s)"
        raise WireFormatError(DeadLetterKind.NOT_CONFLUENT_FRAMED, f"value is {size}, shorter than the 5-byte header")
    magic, schema_id = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise WireFormatError(
            DeadLetterKind.NOT_CONFLUENT_FRAMED, f"first byte is {data[0]:#04x}, not the magic byte 0x00"
        )
    return schema_id, data[HEADER_SIZE:]
