"""read_to_end's errors: a client failure mid-read is one line naming the topic, never a KafkaException."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from kappa.core.errors import KappaError
from kappa.kafka.reading import Extent, read_to_end


class FailingConsumer:
    """A consumer whose `fail` call raises what librdkafka raises on a fatal error; the rest of it works."""

    def __init__(self, fail: str) -> None:
        self.fail = fail

    def _maybe_fail(self, name: str) -> None:
        if name == self.fail:
            raise KafkaException(KafkaError(KafkaError._FATAL, "fatal: the broker fenced this client"))

    def assign(self, partitions: list[Any]) -> None:
        pass

    def consume(self, num_messages: int, timeout: float) -> list[Any]:
        self._maybe_fail("consume")
        return []

    def position(self, partitions: list[Any]) -> list[Any]:
        self._maybe_fail("position")
        return partitions


@pytest.mark.parametrize("call", ["consume", "position"])
def test_a_client_failure_mid_read_is_one_line_naming_the_topic(call: str) -> None:
    reading = read_to_end(FailingConsumer(call), "clicks", {0: Extent(0, 5)})  # type: ignore[arg-type]
    with pytest.raises(KappaError, match=r"^reading clicks failed: fatal: the broker fenced this client$"):
        next(reading)
