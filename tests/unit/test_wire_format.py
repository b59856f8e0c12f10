import re

import pytest

from kappa.contracts.dead_letter_format import DeadLetterKind
from kappa.contracts.wire_format import WireFormatError, frame, unframe


def test_frame_is_magic_byte_then_big_endian_id() -> None:
    assert frame(258, b"body") == b"\x00\x00\x00\x01\x02body"
    assert unframe(b"\x00\x00\x00\x01\x02body") == (258, b"body")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (None, "value is null"),
        (b"\x00\x00\x01", "3 byte(s), shorter than the 5-byte header"),
        (b"\x01\x00\x00\x00\x01body", "first byte is 0x01, not the magic byte 0x00"),
    ],
)
def test_unframed_input_is_named(data: bytes | None, message: str) -> None:
    with pytest.raises(WireFormatError, match=re.escape(message)) as err:
        unframe(data)
    assert err.value.kind is DeadLetterKind.NOT_CONFLUENT_FRAMED
