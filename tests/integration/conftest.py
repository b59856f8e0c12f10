"""Every integration test runs against the session's real stack: start it before the first one."""

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kappa.contracts.schema_rollout import apply_schemas
from kappa.contracts.topic_declarations import Cleanup, Topic
from kappa.core.settings import KappaSettings
from kappa.kafka.aliases import CONTROL_TOPICS
from kappa.kafka.clients import admin_client
from kappa.kafka.topic_admin import apply
from kappa.runtime.discovery import find_catalog
from kappa.spark.session import get_spark


@pytest.fixture(autouse=True)
def _stack_is_up(stack: KappaSettings) -> None:
    return None


@pytest.fixture
def control_topics(stack: KappaSettings) -> None:
    """`kappa.aliases` and `kappa.audit` with their schemas, whichever tests ran on the session stack before."""
    apply(admin_client(stack), list(CONTROL_TOPICS))
    apply_schemas(stack.schemas_path, list(CONTROL_TOPICS), stack.registry)


@pytest.fixture
def avro_topic(stack: KappaSettings, unique_name: Callable[[str], str]) -> Callable[..., Topic]:
    """`avro_topic("clicks")`: a new topic with a unique name, its value schema registered, and its DLQ.

    Declared like the catalog's dataset of that schema (its key field, its partition field, whether null values
    delete), with a subject of its own: records of a topic with a partition field go where `partition_for` puts
    them, or its readers set them aside.
    """

    def make(base: str, value_schema: str = "clicks.avsc", partitions: int = 2) -> Topic:
        like = next((t for t in find_catalog().datasets if t.value_schema == value_schema), None)
        topic = Topic(
            unique_name(base), partitions=partitions, cleanup=Cleanup.COMPACT, value_schema=value_schema,
            key_field=like.key_field if like else None, deletes=like.deletes if like else False,
            partition_field=like.partition_field if like else None,
        )  # fmt: skip
        dlq = Topic(f"{topic.name}.dlq", partitions=1, cleanup=Cleanup.DELETE)
        apply(admin_client(stack), [topic, dlq])
        apply_schemas(stack.schemas_path, [topic], stack.registry)
        return topic

    return make


def partitions_of(checkpoint: str | Path) -> tuple[int, int]:
    """(the shuffle partitions a stateful query ran with, as its offset log records them; its state store's
    partitions, as folders): what shows that a run really used the partition count a test names."""
    root = Path(checkpoint)
    metadata = json.loads((root / "offsets" / "0").read_text().splitlines()[1])
    stored = [p for p in (root / "state" / "0").iterdir() if p.name.isdigit()]
    return int(metadata["conf"]["spark.sql.shuffle.partitions"]), len(stored)


@pytest.fixture
def session_conf_restored(stack: KappaSettings) -> Iterator[None]:
    """For a test that runs a job with other Spark settings on the shared session (a job's run applies its
    settings' SQL configuration to it): the session's own settings again afterwards."""
    yield
    get_spark(stack, "kappa-tests")
