"""Every integration test runs against the session's real stack: start it before the first one."""

import os
from collections.abc import Callable

import pytest

from kappa.aliases import CONTROL_TOPICS
from kappa.avro.contracts import apply_schemas
from kappa.kafka_client import admin_client
from kappa.settings import KappaSettings
from kappa.topics import Cleanup, Topic, apply


def stack_env(stack: KappaSettings, **extra: str) -> dict[str, str]:
    """The environment a subprocess needs to reach the session's stack (settings only from KAPPA_*)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAPPA_")}
    env.update(
        KAPPA_KAFKA_PORT=str(stack.kafka_port),
        KAPPA_CONTROLLER_PORT=str(stack.controller_port),
        KAPPA_REGISTRY_PORT=str(stack.registry_port),
        KAPPA_STACK_DIR=str(stack.stack_path),
        KAPPA_SPARK_SHUFFLE_PARTITIONS=str(stack.spark_shuffle_partitions),
        KAPPA_SPARK_DRIVER_JAVA_OPTIONS=stack.spark_driver_java_options,
    )
    env.update(extra)
    return env


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
    """`avro_topic("clicks")`: a new topic with a unique name, its value schema registered, and its DLQ."""

    def make(base: str, value_schema: str = "click_event.avsc", partitions: int = 2) -> Topic:
        topic = Topic(unique_name(base), partitions=partitions, cleanup=Cleanup.COMPACT, value_schema=value_schema)
        dlq = Topic(f"{topic.name}.dlq", partitions=1, cleanup=Cleanup.DELETE)
        apply(admin_client(stack), [topic, dlq])
        apply_schemas(stack.schemas_path, [topic], stack.registry)
        return topic

    return make
