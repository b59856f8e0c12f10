"""Every integration test runs against the session's real stack: start it before the first one."""

from collections.abc import Callable

import pytest

from kappa.avro.contracts import apply_schemas
from kappa.kafka_client import admin_client
from kappa.settings import KappaSettings
from kappa.topics import Cleanup, Topic, apply


@pytest.fixture(autouse=True)
def _stack_is_up(stack: KappaSettings) -> None:
    return None


@pytest.fixture
def avro_topic(stack: KappaSettings, unique_name: Callable[[str], str]) -> Callable[..., Topic]:
    """`avro_topic("clicks")`: a new topic with a unique name, its value schema registered, and its DLQ."""

    def make(base: str, value_schema: str = "click_event.avsc", partitions: int = 2) -> Topic:
        topic = Topic(unique_name(base), partitions=partitions, cleanup=Cleanup.COMPACT, value_schema=value_schema)
        dlq = Topic(f"{topic.name}.dlq", partitions=1, cleanup=Cleanup.DELETE)
        apply(admin_client(stack), [topic, dlq])
        apply_schemas(stack.schemas_path, [topic], stack.registry)
        return topic

    return make
