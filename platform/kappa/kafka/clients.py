"""Python-side Kafka clients with the platform's defaults (durable, idempotent producer; clear errors)."""

from __future__ import annotations

import contextlib
import functools
import socket
import ssl
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from kappa.core.errors import KappaError
from kappa.core.security import librdkafka_config
from kappa.core.settings import KappaSettings


def admin_client(settings: KappaSettings) -> AdminClient:
    # log_level 0: failures reach the caller as exceptions with context; librdkafka's own lines add noise.
    return AdminClient({**librdkafka_config(settings), "socket.timeout.ms": 10_000, "log_level": 0})


def require_kafka(settings: KappaSettings, timeout_s: float = 15.0) -> AdminClient:
    """An admin client for a Kafka that answers, or a clear message saying where none does, or why it refused."""
    seen: list[KafkaError] = []  # what librdkafka reported on the way: a refused login, a wrong protocol
    config: dict[str, Any] = {**librdkafka_config(settings), "socket.timeout.ms": 10_000, "log_level": 0}
    config["error_cb"] = seen.append
    admin = AdminClient(config)
    try:
        admin.describe_cluster(request_timeout=timeout_s).result(timeout=timeout_s + 5)
    except KafkaException as exc:
        admin.poll(0.5)  # serves the error callbacks: what librdkafka saw on the way
        raise KappaError(_unreachable(settings, [exc.args[0], *seen])) from None
    return admin


def _unreachable(settings: KappaSettings, errors: list[KafkaError]) -> str:
    where = f"Kafka at {settings.bootstrap}"
    for error in errors:
        if error.code() in (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED):
            return (
                f"{where} refused the login of User:{settings.kafka_user} ({error.str()}): check KAPPA_KAFKA_USER "
                "and its password (KAPPA_KAFKA_PASSWORD_FILE)"
            )
        if error.code() == KafkaError._SSL:
            return f"{where}: TLS failed ({error.str()}): KAPPA_KAFKA_CA_FILE names the CA that signed its certificate"
    if not settings.secured and _speaks_tls(settings.bootstrap.split(",")[0]):
        return (
            f"{where} did not answer a plaintext client: it speaks TLS, so it requires TLS and a login "
            "(KAPPA_SECURITY=sasl_ssl and the login's settings, README: Security)"
        )
    return (
        f"Kafka is not reachable at {settings.bootstrap} (KAPPA_BOOTSTRAP_SERVERS, or KAPPA_KAFKA_PORT for the "
        f"local stack): start it with `kappa up`, or point the settings at your cluster ({errors[0].str()})"
    )


def producer(settings: KappaSettings, **overrides: Any) -> Producer:
    config: dict[str, Any] = {
        **librdkafka_config(settings),
        "enable.idempotence": True,  # no duplicates or reordering from retries
        "acks": "all",
        "linger.ms": 20,
        "batch.num.messages": 10_000,
        "compression.type": "lz4",
        # A record is retried until acknowledged for this long: a broker outage shorter than it loses nothing.
        "message.timeout.ms": int(settings.produce_timeout_s * 1000),
        "log_level": 0,  # librdkafka's own lines (one per failed connection) would drown the Publisher's
        # With every broker down, librdkafka's default re-bootstrap drops the brokers it knows and adds the bootstrap
        # ones again, three times a second for as long as the outage lasts (380 times in a 2-minute outage). A
        # producer's brokers do not all change address while it runs: it keeps them and reconnects to them.
        "metadata.recovery.strategy": "none",
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


# An outage is all brokers down; while it lasts, each failed reconnection (librdkafka retries on its own) is an
# attempt, reported at most once every OUTAGE_LINE_S. One broker of several down is no outage: its partitions move.
_ATTEMPT = {KafkaError._TRANSPORT, KafkaError._RESOLVE, KafkaError._ALL_BROKERS_DOWN}
OUTAGE_LINE_S = 10.0
# Records waiting this long without any being answered make the Publisher ask Kafka for metadata, which makes
# librdkafka connect to a broker if none is up. Without it, test_outages' producer once waited for its records'
# timeout (600 s) with its broker back for 300 s, and not one connection attempt said in between.
STALL_PROBE_S = 5.0


class Publisher:
    """A producer that knows, for each record it sent, whether Kafka acknowledged it.

    Records wait out an outage of Kafka for `produce_timeout_s` (one line every OUTAGE_LINE_S on `say` while Kafka
    is out of reach); a record whose acknowledgement does not come within it is *unconfirmed*: it may or may not be
    in the topic. Each record may carry a tag (a file's row number): `unconfirmed` lists the tags of those not
    acknowledged, so a caller can say exactly which rows."""

    def __init__(self, settings: KappaSettings, say: Callable[[str], None] | None = None, **overrides: Any) -> None:
        self.settings = settings
        self._say = say
        self._producer = producer(settings, error_cb=self._error, **overrides)
        self._failures: list[KafkaError] = []
        self._pending: set[int] = set()  # tags sent, not yet acknowledged
        self._unconfirmed: set[int] = set()  # tags whose delivery failed (timed out: ambiguous)
        self._last_line = 0.0
        self._outage_since: float | None = None
        self._last_answer = time.monotonic()  # the last acknowledgement or failure, or when records began to wait
        self.sent = 0
        self.confirmed = 0

    def _error(self, err: KafkaError) -> None:
        now = time.monotonic()
        if err.fatal():  # the producer is done for: librdkafka fails its queued records, which `unconfirmed` names
            if self._say is not None:
                self._say(f"the producer failed and sends nothing more: {err.str()}")
            return
        if err.code() == KafkaError._ALL_BROKERS_DOWN:
            self._outage_since = self._outage_since or now
        if self._outage_since is None or err.code() not in _ATTEMPT:
            return
        if self._say is not None and now - self._last_line >= OUTAGE_LINE_S:
            self._last_line = now
            waiting, left = self._waiting(), self.settings.produce_timeout_s - (now - self._outage_since)
            self._say(
                f"Kafka at {self.settings.bootstrap} is out of reach ({err.str()}): {waiting} record(s) wait for "
                f"it, retried for up to {max(left, 0):.0f} s more (KAPPA_PRODUCE_TIMEOUT_S)"
            )

    def _delivered(self, err: KafkaError | None, _msg: Any, tag: int | None = None) -> None:
        self._last_answer = time.monotonic()
        if tag is not None:
            self._pending.discard(tag)
        if err is not None:
            self._failures.append(err)
            if tag is not None:
                self._unconfirmed.add(tag)
            return
        self.confirmed += 1
        if self._outage_since is not None:
            if self._say is not None:
                self._say(f"Kafka at {self.settings.bootstrap} answers again: acknowledgements resume")
            self._outage_since = None
            self._last_line = 0.0

    def send(self, topic: str, rec: Outgoing, tag: int | None = None, stop: Callable[[], bool] | None = None) -> None:
        """Send one record (acknowledged later, in `confirmed` or `unconfirmed`). While Kafka's local queue is full
        it waits for room; `stop` saying true then ends the wait with KeyboardInterrupt, raised here, in Python,
        and not inside a delivery callback."""
        on_delivery = self._delivered if tag is None else functools.partial(self._delivered, tag=tag)
        kwargs: dict[str, Any] = {"key": rec.key, "value": rec.value, "on_delivery": on_delivery}
        if rec.partition is not None:
            kwargs["partition"] = rec.partition
        if rec.headers:
            kwargs["headers"] = rec.headers
        if rec.timestamp_ms is not None:
            kwargs["timestamp"] = rec.timestamp_ms
        if not self._waiting():  # none waited: the stall clock starts now
            self._last_answer = time.monotonic()
        while True:
            try:
                self._producer.produce(topic, **kwargs)
                break
            except BufferError:  # local queue full (Kafka slow, or away): let deliveries drain, then retry
                if stop is not None and stop():
                    raise KeyboardInterrupt("interrupted while Kafka's local queue was full") from None
                self._producer.poll(0.5)
                self._unstall()
            except KafkaException as exc:
                raise KappaError(f"producing to {topic} failed: {exc}") from None
        if tag is not None:
            self._pending.add(tag)
        self.sent += 1
        self._producer.poll(0)  # serve acknowledgements and outage reports as they come
        self._unstall()

    def await_acknowledgement(self, tag: int) -> None:
        """Serve acknowledgements until the record sent with `tag` is acknowledged, or has failed (its failure
        is then reported like any other: `unconfirmed`, `close`). Orders what Kafka alone does not: records of
        different partitions, e.g. of two topics."""
        while tag in self._pending:
            self._producer.flush(0.01)  # a flush sends at once (not after linger.ms): 2.2 s vs 5.2 s for 4,000 clicks
            self._unstall()

    def flush(self, timeout_s: float | None = None, stop: Callable[[], bool] | None = None) -> int:
        """Wait for acknowledgements (by default as long as a record is retried, and a margin; less if `stop`
        turns true); how many records are still waiting."""
        wait = self.settings.produce_timeout_s + 30 if timeout_s is None else timeout_s
        deadline = time.monotonic() + wait
        while True:
            remaining = int(self._producer.flush(max(0.0, min(deadline - time.monotonic(), 1.0))))
            if not remaining or time.monotonic() >= deadline or (stop is not None and stop()):
                return remaining
            self._unstall()

    def _unstall(self) -> None:
        """While records wait and none has been answered for STALL_PROBE_S, a metadata request (one per
        STALL_PROBE_S): with no broker up, librdkafka connects to one for it. Kafka still away is no error here: the
        outage is said by `_error`, and the records wait on."""
        now = time.monotonic()
        if self._waiting() and now - self._last_answer >= STALL_PROBE_S:
            self._last_answer = now  # the next request after another STALL_PROBE_S without an answer
            with contextlib.suppress(KafkaException):
                self._producer.list_topics(timeout=1.0)

    def _waiting(self) -> int:
        """Records sent and not answered yet (neither acknowledged nor failed)."""
        return self.sent - self.confirmed - len(self._failures)

    def unconfirmed(self) -> list[int]:
        """The tags of the records not acknowledged: failed (a timed-out delivery may still have landed) or still
        waiting. Sorted."""
        return sorted(self._unconfirmed | self._pending)

    def close(self, timeout_s: float | None = None) -> int:
        """Wait for every acknowledgement; return how many records were sent."""
        remaining = self.flush(timeout_s)
        if remaining:
            raise KappaError(f"{remaining} record(s) were not acknowledged in time: is Kafka up?")
        if self._failures:
            raise KappaError(
                f"{len(self._failures)} record(s) unconfirmed: {self._failures[0]} (they may or may not be in the "
                "topic)"
            )
        return self.sent


def produce_all(settings: KappaSettings, topic: str, records: Iterable[Outgoing]) -> int:
    """Produce every record to one topic and wait for all acknowledgements."""
    publisher = Publisher(settings)
    for rec in records:
        publisher.send(topic, rec)
    return publisher.close()


def _speaks_tls(address: str) -> bool:
    """Whether `host:port` completes a TLS handshake (a secured listener, which closes a plaintext client's
    connection without a word). Used to explain a failure, never to connect."""
    host, _, port = address.rpartition(":")
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # only whether it speaks TLS, not whom to trust
    try:
        with socket.create_connection((host, int(port)), timeout=3) as raw, context.wrap_socket(raw):
            return True
    except (OSError, ValueError):
        return False
