"""What a principal can and cannot do on a secured stack, tried with plain clients (not the platform's code paths),
and a scan of written files for secrets. Helpers of tests/e2e/test_cascade_replay.py."""

from __future__ import annotations

import gzip
from collections.abc import Iterable
from pathlib import Path

import zstandard
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from kappa.core.security import librdkafka_config, user_credential
from kappa.core.settings import KappaSettings


def login(stack: KappaSettings, user: str) -> dict[str, object]:
    """A client configuration of `user`, with the password its file in the stack's secrets folder holds."""
    return {**librdkafka_config(stack, user_credential(stack, user)), "log_level": 0}


def end_offsets(stack: KappaSettings, topic: str, partitions: int) -> list[int]:
    """The topic's end offsets, asked as the platform's admin."""
    consumer = Consumer({**librdkafka_config(stack), "group.id": "least-privilege-probe", "log_level": 0})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=15)[1] for p in range(partitions)]
    finally:
        consumer.close()


def produce_as(stack: KappaSettings, user: str, topic: str) -> str | None:
    """Produce one record to `topic` as `user`: the error Kafka answered with (its name), None if it landed."""
    outcome: list[KafkaError | None] = []
    producer = Producer({**login(stack, user), "acks": "all", "message.timeout.ms": 20_000})
    producer.produce(topic, key=b"intruder", value=b"\x00\x00\x00\x00\x01written by another principal",
                     on_delivery=lambda error, _message: outcome.append(error))  # fmt: skip
    producer.flush(30)
    assert outcome, f"no answer to a record for {topic} within 30 s"
    return None if outcome[0] is None else outcome[0].name()


def take_transactional_id_as(stack: KappaSettings, user: str, transactional_id: str) -> str | None:
    """Start transactions under `transactional_id` as `user`: the error's name, None if Kafka allowed it."""
    producer = Producer({**login(stack, user), "transactional.id": transactional_id})
    try:
        producer.init_transactions(30)
    except KafkaException as exc:
        return str(exc.args[0].name())
    return None


def read_as(stack: KappaSettings, user: str, topic: str) -> str | None:
    """Subscribe to `topic` as `user` (in a group of its own) and read a record: the error's name, None if one was
    read. (A consumer assigned a topic it may not read just never fetches; a subscription is told.)"""
    consumer = Consumer({**login(stack, user), "group.id": f"{user}.probe", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})  # fmt: skip
    try:
        consumer.subscribe([topic])
        for _ in range(30):
            message = consumer.poll(1.0)
            if message is None:
                continue
            error = message.error()
            return None if error is None else str(error.name())
        raise AssertionError(f"{user} read nothing of {topic} and was told nothing within 30 s")
    finally:
        consumer.close()


def readable(path: Path) -> bytes:
    """A file's bytes as a reader of it sees them: Spark's event logs (zstd) and rotated logs (gzip) unpacked."""
    if path.suffix == ".zstd":
        with path.open("rb") as packed:
            return zstandard.ZstdDecompressor().stream_reader(packed).read()
    if path.suffix == ".gz":
        return gzip.decompress(path.read_bytes())
    return path.read_bytes()


def secrets_in(folders: Iterable[Path], secrets: list[str], skip: Path) -> list[str]:
    """`<file>: <which secret>` for every file under `folders` (but under `skip`, the secrets folder itself)
    whose contents hold one of `secrets`: logs, state and run records, Delta logs, checkpoints, Spark's event logs,
    Dagster's sqlite storage."""
    needles = {s.encode(): f"secret #{n}" for n, s in enumerate(secrets)}
    found = []
    for folder in folders:
        for path in sorted(folder.rglob("*")):
            if not path.is_file() or path.is_relative_to(skip):
                continue
            data = readable(path)
            found += [f"{path}: {name}" for needle, name in needles.items() if needle in data]
    return found
