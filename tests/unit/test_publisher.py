"""kappa.kafka.clients.Publisher without a broker: a bootstrap address where nothing listens (loopback) is an outage
from the start. It is said while it lasts, and what was not acknowledged within KAPPA_PRODUCE_TIMEOUT_S is named
by tag (a file's row numbers), never reported as delivered."""

import socket
import time
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


class _Producer:
    """librdkafka as test_outages' producer once behaved, its broker back: it renews no connection by itself, so its
    records are answered (on a poll or a flush) only once a metadata request has connected it (`connected`).
    `kafka_away`: the request fails, the broker is still away. `capacity`: its local queue, full beyond that."""

    def __init__(self, connected: bool = False, kafka_away: bool = False, capacity: int = 100_000) -> None:
        self.connected = connected
        self.kafka_away = kafka_away
        self.capacity = capacity
        self.waiting: list[Callable[..., None]] = []
        self.metadata_requests = 0

    def produce(self, _topic: str, *, on_delivery: Callable[..., None], **_record: object) -> None:
        if len(self.waiting) >= self.capacity:
            raise BufferError("Local: Queue full")
        self.waiting.append(on_delivery)

    def poll(self, _timeout: float) -> int:
        return self.flush(0)

    def flush(self, _timeout: float) -> int:
        if self.connected:
            for delivered in self.waiting:
                delivered(None, None)
            self.waiting.clear()
        return len(self.waiting)

    def list_topics(self, timeout: float) -> None:
        self.metadata_requests += 1
        if self.kafka_away:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))
        self.connected = True


def _publisher_over(producer: _Producer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Publisher:
    monkeypatch.setattr(clients, "STALL_PROBE_S", 0.05)
    publisher = Publisher(load_settings(state_dir=tmp_path, bootstrap_servers=f"127.0.0.1:{_closed_port()}"))
    publisher._producer = producer  # type: ignore[assignment]
    return publisher


def _send(publisher: Publisher, *rows: int) -> None:
    for row in rows:
        publisher.send("clicks", Outgoing(b"k", b"v", partition=0), tag=row)


def test_a_flush_whose_records_nobody_answers_asks_for_metadata_and_then_they_are_answered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stalled = _Producer()
    publisher = _publisher_over(stalled, tmp_path, monkeypatch)
    _send(publisher, 1, 2)
    assert publisher.flush(timeout_s=30) == 0
    assert stalled.metadata_requests == 1  # answered after the first: no second
    assert (publisher.confirmed, publisher.unconfirmed()) == (2, [])


def test_a_metadata_request_that_fails_leaves_the_records_waiting_until_the_flush_times_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stalled = _Producer(kafka_away=True)
    publisher = _publisher_over(stalled, tmp_path, monkeypatch)
    _send(publisher, 1, 2)
    assert publisher.flush(timeout_s=0.3) == 2  # no exception: the outage goes on, the records wait
    assert 1 <= stalled.metadata_requests <= 7  # at most one per STALL_PROBE_S (0.05 s) over the 0.3 s flush
    assert publisher.unconfirmed() == [1, 2]


def test_a_send_after_records_stalled_for_the_probe_interval_asks_for_metadata(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stalled = _Producer()
    publisher = _publisher_over(stalled, tmp_path, monkeypatch)
    _send(publisher, 1)
    assert stalled.metadata_requests == 0
    time.sleep(0.1)
    _send(publisher, 2)  # the file goes on: the stall is seen here, not only at the end of the file
    assert stalled.metadata_requests == 1
    assert publisher.flush(timeout_s=1) == 0


def test_records_sent_after_an_idle_spell_start_their_own_stall_clock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    answering = _Producer(connected=True)
    publisher = _publisher_over(answering, tmp_path, monkeypatch)
    answering.poll = lambda _timeout: 0  # type: ignore[method-assign]  # answered on a flush only
    _send(publisher, 1)
    assert publisher.flush(timeout_s=1) == 0
    time.sleep(0.1)  # nothing waits: no stall, however long
    _send(publisher, 2)
    assert answering.metadata_requests == 0


def test_waiting_for_one_record_asks_for_metadata_when_nothing_is_answered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stalled = _Producer()
    publisher = _publisher_over(stalled, tmp_path, monkeypatch)
    _send(publisher, 1)
    publisher.await_acknowledgement(1)  # returns only once answered
    assert (stalled.metadata_requests, publisher.confirmed) == (1, 1)


def test_a_full_local_queue_that_nothing_drains_asks_for_metadata(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stalled = _Producer(capacity=1)
    publisher = _publisher_over(stalled, tmp_path, monkeypatch)
    _send(publisher, 1, 2)  # the second waits for room in the queue, which the request's answers make
    assert stalled.metadata_requests == 1
    assert publisher.flush(timeout_s=1) == 0
    assert publisher.confirmed == 2
