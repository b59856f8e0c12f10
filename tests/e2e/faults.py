"""What the fault tests share: seeded clicks to produce, the event ids a job wrote to Delta, an outage's length."""

from pathlib import Path
from typing import Any

from deltalake import DeltaTable

from jobs.clickstream.generator import Click, click_messages, clicks
from kappa.contracts.avro_serde import AvroEncoder
from kappa.contracts.registry import registry_of, value_subject
from kappa.contracts.schema_files import topic_value_schema
from kappa.contracts.topic_declarations import Topic
from kappa.core.settings import KappaSettings
from kappa.kafka.clients import Outgoing, produce_all

OUTAGE_S = 120  # what the platform promises to outlive


def encode_clicks(settings: KappaSettings, topic: Topic, count: int, first: int) -> tuple[list[Outgoing], set[str]]:
    """Clicks `first` to `first + count` of one generated stream, encoded; their event ids."""
    made = list(clicks(first + count, seed=41))[first:]
    with registry_of(settings) as registry:
        encoder = AvroEncoder(registry, value_subject(topic.name), topic_value_schema(settings.schemas_path, topic))
        return list(click_messages(iter(made), encoder.encode, topic.partitions)), {c.event_id for c in made}


def click_row(c: Click) -> dict[str, Any]:
    """A click as a row of a user's JSON-lines file for `kappa produce` (event_time in epoch milliseconds)."""
    return {"event_id": c.event_id, "user_id": c.user_id, "page": c.page, "referrer": c.referrer,
            "event_time": c.event_time_ms, "device": c.device}  # fmt: skip


def produce_clicks(settings: KappaSettings, topic: Topic, count: int, first: int) -> set[str]:
    records, ids = encode_clicks(settings, topic, count, first)
    produce_all(settings, topic.name, records)
    return ids


def event_ids(table: Path) -> list[str]:
    """The table's event ids; none while its first commit is still being written."""
    if not any((table / "_delta_log").glob("*.json")):
        return []
    return DeltaTable(str(table)).to_pyarrow_table(columns=["event_id"]).column("event_id").to_pylist()


def live_keys(settings: KappaSettings, topic: str) -> set[str]:
    """The keys a compacted topic holds now: each key's latest record, without those a tombstone deleted."""
    latest = dict(records(settings, topic))
    return {key for key, alive in latest.items() if alive}


def records(settings: KappaSettings, topic: str) -> list[tuple[str, bool]]:
    """Every record of the topic now, in each partition's order: (its key, whether it has a value)."""
    from kappa.kafka.reading import whole_topic

    return [(bytes(m.key() or b"").decode(), m.value() is not None) for m in whole_topic(settings, topic)]


def topic_named(settings: KappaSettings, pattern: str) -> str:
    """The one topic whose whole name matches `pattern` (a regular expression)."""
    import re

    from kappa.kafka.clients import admin_client

    admin = admin_client(settings)
    [name] = [t for t in admin.list_topics(timeout=15).topics if re.fullmatch(pattern, t)]
    return name
