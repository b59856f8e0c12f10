"""Python-side Kafka clients with the platform's defaults (durable, idempotent producer; clear errors)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from kappa.errors import KappaError
from kappa.settings import KappaSettings


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


def produce_all(
    settings: KappaSettings,
    topic: str,
    records: Iterable[Outgoing],
    on_progress: Callable[[int], None] | None = None,
) -> int:
    """Produce every record and wait for all acknowledgements; fail loudly if any was not delivered."""
    prod = producer(settings)
    failures: list[KafkaError] = []

    def delivered(err: KafkaError | None, _msg: Any) -> None:
        if err is not None:
            failures.append(err)

    sent = 0
    for rec in records:
        kwargs: dict[str, Any] = {"key": rec.key, "value": rec.value, "on_delivery": delivered}
        if rec.partition is not None:
            kwargs["partition"] = rec.partition
        if rec.headers:
            kwargs["headers"] = rec.headers
        if rec.timestamp_ms is not None:
            kwargs["timestamp"] = rec.timestamp_ms
        while True:
            try:
                prod.produce(topic, **kwargs)
                break
            except BufferError:  # local queue full: let deliveries drain, then retry
                prod.poll(0.5)
            except KafkaException as exc:
                raise KappaError(f"producing to {topic} failed: {exc}") from None
        sent += 1
        if sent % 10_000 == 0:
            prod.poll(0)
            if on_progress:
                on_progress(sent)
    remaining = prod.flush(120)
    if remaining:
        raise KappaError(f"{remaining} record(s) to {topic} were not delivered within 120 s (is Kafka up?)")
    if failures:
        raise KappaError(f"{len(failures)} record(s) to {topic} failed: {failures[0]}")
    return sent
