"""kappa.kafka.clients.Publisher without a broker: a bootstrap address where nothing listens (loopback) is an outage
from the start. It is said while it lasts, and what was not acknowledged within KAPPA_PRODUCE_TIMEOUT_S is named
by tag (a file's row numbers), never reported as delivered."""

import socket
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException

from kappa.core.errors import KappaError
from kappa.core.settings import load_settings
from kappa.kafka import clients
from kappa.kafka.clients import Outgoing, Publisher


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_records_kafka_never_acknowledged_are_named_unconfirmed_and_the_outage_is_said(tmp_path: Path) -> None:
    settings = load_settings(state_dir=tmp_path, bootstrap_servers=f"127.0.0.1:{_closed_port()}", produce_timeout_s=3.0)
    lines: list[str] = []
    publisher = Publisher(settings, say=lines.append)
    for row in (1, 2, 5):
        publisher.send("nowhere", Outgoing(f"k{row}".encode(), b"v", partition=0), tag=row)
    assert publisher.flush() == 0  # each record failed once its timeout passed: nothing left waiting
    assert publisher.unconfirmed() == [1, 2, 5]
    assert (publisher.sent, publisher.confirmed) == (3, 0)
    assert lines, "the outage was never said"
    assert all(line.startswith(f"Kafka at {settings.bootstrap} is out of reach (") for line in lines)
    assert all(" record(s) wait for it, retried for up to " in line for line in lines)
    with pytest.raises(KappaError, match=r"3 record\(s\) unconfirmed: .* \(they may or may not be in the topic\)"):
        publisher.close(timeout_s=1)


class _StalledProducer:
    """librdkafka as it was seen once in test_outages: its broker back, it renews no connection by itself, so its
    records are answered only after someone asks for metadata (which connects). `fails_metadata`: the broker is still
    away, so the request itself fails."""

    def __init__(self, fails_metadata: bool = False) -> None:
        self.waiting: list[Callable[..., None]] = []
        self.metadata_requests = 0
        self.fails_metadata = fails_metadata

    def produce(self, _topic: str, *, on_delivery: Callable[..., None], **_record: object) -> None:
        self.waiting.append(on_delivery)

    def poll(self, _timeout: float) -> int:
        return 0

    def flush(self, _timeout: float) -> int:
        if self.metadata_requests and not self.fails_metadata:
            for delivered in self.waiting:
                delivered(None, None)
            self.waiting.clear()
        return len(self.waiting)

    def list_topics(self, timeout: float) -> None:
        self.metadata_requests += 1
        if self.fails_metadata:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))


def _publisher_over(producer: _StalledProducer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Publisher:
    monkeypatch.setattr(clients, "STALL_PROBE_S", 0.05)
    publisher = Publisher(load_settings(state_dir=tmp_path, bootstrap_servers=f"127.0.0.1:{_closed_port()}"))
    publisher._producer = producer  # type: ignore[assignment]
    for row in (1, 2):
        publisher.send("clicks", Outgoing(b"k", b"v", partition=0), tag=row)
    return publisher


def test_records_nobody_answers_make_the_publisher_ask_for_metadata_and_then_they_are_answered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stalled = _StalledProducer()
    publisher = _publisher_over(stalled, tmp_path, monkeypatch)
    assert publisher.flush(timeout_s=30) == 0
    assert stalled.metadata_requests == 1  # answered after the first: no second
    assert (publisher.confirmed, publisher.unconfirmed()) == (2, [])


def test_a_metadata_request_that_fails_leaves_the_records_waiting_until_the_flush_times_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stalled = _StalledProducer(fails_metadata=True)
    publisher = _publisher_over(stalled, tmp_path, monkeypatch)
    assert publisher.flush(timeout_s=0.3) == 2  # no exception: the outage goes on, the records wait
    assert 2 <= stalled.metadata_requests <= 7  # one per STALL_PROBE_S of 0.3 s (0.05 s), not one per slice
    assert publisher.unconfirmed() == [1, 2]
