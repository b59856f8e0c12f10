"""`kappa generate`: the seeded clickstream, Avro-encoded, into `clicks` and `user_profiles`, in log order."""

from __future__ import annotations

import itertools
import random
import sys
import time
from dataclasses import dataclass
from typing import TextIO

from jobs.clickstream.generator import Click, StreamConfig, clickstream, malformed_value
from kappa.contracts.avro_serde import AvroEncoder
from kappa.contracts.registry import registry_of, value_subject
from kappa.contracts.schema_files import topic_value_schema
from kappa.contracts.topic_declarations import Topic
from kappa.core.settings import KappaSettings
from kappa.kafka.clients import Outgoing, Publisher
from kappa.kafka.partitioning import partition_for
from kappa.ops.progress_bar import Progress


@dataclass(frozen=True)
class GenerateReport:
    clicks: int
    profiles: int
    malformed: int
    seconds: float


def generate(
    settings: KappaSettings,
    config: StreamConfig,
    clicks_topic: Topic,
    profiles_topic: Topic,
    rate: float | None = None,
    progress: TextIO | None = sys.stderr,
    emissions: slice | None = None,
) -> GenerateReport:
    """Produce the stream; `rate` caps records per second (None: as fast as possible). `emissions` produces
    only that part of the stream (e.g. slice(0, 2000), then slice(2000, None): a log that grows later)."""
    rng = random.Random(config.seed * 31)
    # The registered schemas, never registered here: `kappa schemas apply` registers them (checked first).
    with registry_of(settings) as registry:
        click_encoder, profile_encoder = (
            AvroEncoder(registry, value_subject(t.name), topic_value_schema(settings.schemas_path, t), register=False)
            for t in (clicks_topic, profiles_topic)
        )
    bar = Progress(progress, unit="clicks")
    say = None if progress is None else lambda line: bar.write(f"kappa generate: {line}")
    publisher = Publisher(settings, say=say)  # waits out a Kafka outage for KAPPA_PRODUCE_TIMEOUT_S, saying so
    counts = {"clicks": 0, "profiles": 0, "malformed": 0}
    # A user's profile version reaches Kafka before any later click of the user. The producer orders records
    # within a partition only, and clicks and profiles are two topics: produced at full speed, a click batch can
    # land tens of milliseconds (minutes of event time) before a version that precedes it in the log, a
    # disorder beyond enrich_clicks' contract. So a click waits for its user's version sent just before it.
    unacknowledged: dict[str, int] = {}  # user -> tag of its last version sent, until acknowledged
    started = time.monotonic()
    step = max(1, config.events // 50)
    stream = clickstream(config)
    if emissions is not None:
        stream = itertools.islice(stream, emissions.start, emissions.stop)
    for n, emission in enumerate(stream):
        record = emission.record
        if isinstance(record, Click):
            if (version := unacknowledged.pop(record.user_id, None)) is not None:
                publisher.await_acknowledgement(version)
            value = click_encoder.encode(record.as_avro())
            if config.malformed_share and rng.random() < config.malformed_share:
                value = malformed_value(rng, value)
                counts["malformed"] += 1
            publisher.send(
                clicks_topic.name,
                Outgoing(
                    record.event_id.encode(),
                    value,
                    partition=partition_for(record.user_id, clicks_topic.partitions),
                    timestamp_ms=record.event_time_ms,
                ),
            )
            counts["clicks"] += 1
            if counts["clicks"] % step == 0:
                bar.update(counts["clicks"] / config.events, counts["clicks"])
        else:
            publisher.send(
                profiles_topic.name,
                Outgoing(
                    record.user_id.encode(),
                    profile_encoder.encode(record.as_avro()),
                    partition=partition_for(record.user_id, profiles_topic.partitions),
                    # When the version was published: enrich_clicks' lateness contract reads it.
                    timestamp_ms=emission.log_time_ms,
                ),
                tag=n,
            )
            unacknowledged[record.user_id] = n
            counts["profiles"] += 1
        if rate:
            ahead = (n + 1) / rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
    publisher.close()
    bar.finish()
    return GenerateReport(counts["clicks"], counts["profiles"], counts["malformed"], time.monotonic() - started)
