"""kappa.kafka.clients.Publisher without a broker: a bootstrap address where nothing listens (loopback) is an outage
from the start. It is said while it lasts, and what was not acknowledged within KAPPA_PRODUCE_TIMEOUT_S is named
by tag (a file's row numbers), never reported as delivered."""

import socket
from pathlib import Path

import pytest

from kappa.core.errors import KappaError
from kappa.core.settings import load_settings
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
