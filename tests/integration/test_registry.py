"""The registry answers confluent-kafka's SchemaRegistryClient at the Confluent-compatible URL."""

import json
from collections.abc import Callable

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from kappa.core.settings import KappaSettings

SCHEMA = {
    "type": "record",
    "name": "Probe",
    "namespace": "io.kappa.test",
    "fields": [{"name": "id", "type": "string", "doc": "probe id"}],
}


def test_register_and_fetch_by_id_and_subject(stack: KappaSettings, unique_name: Callable[[str], str]) -> None:
    client = SchemaRegistryClient({"url": stack.registry})
    subject = unique_name("probe") + "-value"
    schema_id = client.register_schema(subject, Schema(json.dumps(SCHEMA), "AVRO"))

    assert json.loads(client.get_schema(schema_id).schema_str) == SCHEMA
    latest = client.get_latest_version(subject)
    assert latest.schema_id == schema_id
    assert latest.version == 1
    assert subject in client.get_subjects()
    # Registering the same schema again is idempotent: same id, no new version.
    assert client.register_schema(subject, Schema(json.dumps(SCHEMA), "AVRO")) == schema_id
