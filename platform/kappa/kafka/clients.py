"""Python-side Kafka clients with the platform's defaults (durable, idempotent producer; clear errors)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from kappa.core.errors import KappaError
from kappa.core.settings import KappaSettings


def admin_client(settings: KappaSettings) -> AdminClient:
    # log_level 0: failures reach the caller as exceptions with context; librdkafka's own lines add noise.
    return AdminClient({"bootstrap.servers": settings.bootstrap, "socket.timeout.ms": 10_000, "log_level": 0})


def require_kafka(settings: KappaSettings, timeout_s: float = 15.0) -> AdminClient:
    """An admin client for a Kafka that answers, or a clear message saying where none does."""
    admin = admin_client(settings)
    try:
        admin.describe_cluster(request_timeout=timeout_s).result(timeout=timeout_s + 5)
    except KafkaException as exc:
        raise KappaError(
            f"Kafka is not reachable at {settings.bootstrap} (KAPPA_BOOTSTRAP_SERVERS, or KAPPA_KAFKA_PORT for the "
            f"local stack): start it with `kappa up`, or point the settings at your cluster ({exc.args[0].str()})"
        ) from None
    return admin


def producer(settings: KappaSettings, **overrides: Any) -> Producer:
    config: dict[str, Any] = {
        "bootstrap.servers": settings.bootstrap,
        "enable.idempotence": True,  # no duplicates or reordering from retries
        "acks": "all",
        "linger.ms": 20,
        "batch.num.messages": 10_000,
        "compression.type": "lz4",
        "message.timeout.ms": 60_000,
    }
    config.update(overrides)
    return Producer(config)


@dataclass(frozen=True)
class Outgoing:
    key: bytes | None
    value: bytes | None
    partition: int | None = None
    headers: list[tuple[str, bytes]] | None = None
    timestamp_ms: int | None = None


class Publisher:
    """A producer that counts what it sent and fails loudly on close if anything was not delivered."""

    def __init__(self, settings: KappaSettings, **overrides: Any) -> None:
        self._producer = producer(settings, **overrides)
        self._failures: list[KafkaError] = []
        self.sent = 0

    def _delivered(self, err: KafkaError | None, _msg: Any) -> None:
        if err is not None:
            self._failures.append(err)

    def send(self, topic: str, rec: Outgoing) -> None:
        kwargs: dict[str, Any] = {"key": rec.key, "value": rec.value, "on_delivery": self._delivered}
        if rec.partition is not None:
            kwargs["partition"] = rec.partition
        if rec.headers:
            kwargs["headers"] = rec.headers
        if rec.timestamp_ms is not None:
            kwargs["timestamp"] = rec.timestamp_ms
        while True:
            try:
                self._producer.produce(topic, **kwargs)
                break
            except BufferError:  # local queue full: let deliveries drain, then retry
                self._producer.poll(0.5)
            except KafkaException as exc:
                raise KappaError(f"producing to {topic} failed: {exc}") from None
        self.sent += 1
        if self.sent % 10_000 == 0:
            self._producer.poll(0)

    def close(self, timeout_s: float = 120) -> int:
        """Wait for every acknowledgement; return how many records were sent."""
        remaining = self._producer.flush(timeout_s)
        if remaining:
            raise KappaError(f"{remaining} record(s) were not delivered within {timeout_s:.0f} s (is Kafka up?)")
        if self._failures:
            raise KappaError(f"{len(self._failures)} record(s) failed: {self._failures[0]}")
        return self.sent


def produce_all(settings: KappaSettings, topic: str, records: Iterable[Outgoing]) -> int:
    """Produce every record to one topic and wait for all acknowledgements."""
    publisher = Publisher(settings)
    for rec in records:
        publisher.send(topic, rec)
    return publisher.close()
