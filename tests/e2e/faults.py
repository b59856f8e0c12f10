"""What the fault tests share: seeded clicks to produce, the event ids a job wrote to Delta, an outage's length."""

from pathlib import Path

from deltalake import DeltaTable

from kappa.avro.registry import Registry, value_subject
from kappa.avro.schemas import topic_value_schema
from kappa.avro.serde import AvroEncoder
from kappa.generate import click_messages, clicks
from kappa.kafka_client import Outgoing, produce_all
from kappa.settings import KappaSettings
from kappa.topics import Topic

OUTAGE_S = 120  # what the platform promises to outlive


def encode_clicks(settings: KappaSettings, topic: Topic, count: int, first: int) -> tuple[list[Outgoing], set[str]]:
    """Clicks `first` to `first + count` of one generated stream, encoded; their event ids."""
    made = list(clicks(first + count, seed=41))[first:]
    with Registry(settings.registry) as registry:
        encoder = AvroEncoder(registry, value_subject(topic.name), topic_value_schema(settings.schemas_path, topic))
        return list(click_messages(iter(made), encoder.encode, topic.partitions)), {c.event_id for c in made}


def produce_clicks(settings: KappaSettings, topic: Topic, count: int, first: int) -> set[str]:
    records, ids = encode_clicks(settings, topic, count, first)
    produce_all(settings, topic.name, records)
    return ids


def event_ids(table: Path) -> list[str]:
    """The table's event ids; none while its first commit is still being written."""
    if not any((table / "_delta_log").glob("*.json")):
        return []
    return DeltaTable(str(table)).to_pyarrow_table(columns=["event_id"]).column("event_id").to_pylist()
