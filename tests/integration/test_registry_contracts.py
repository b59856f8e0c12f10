"""`kappa schemas apply | check` against the real registry: levels set, incompatible changes refused."""

import copy
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from kappa.contracts.compatibility import Compatibility
from kappa.contracts.registry import Registry, RegistryError, value_subject
from kappa.contracts.schema_rollout import apply_schemas, check_schemas
from kappa.contracts.topic_declarations import Cleanup, Topic
from kappa.core.settings import KappaSettings


def test_apply_sets_the_level_and_the_registry_refuses_an_incompatible_change(
    stack: KappaSettings, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    original = json.loads((stack.schemas_path / "clicks.avsc").read_text())
    (schemas / "clicks.avsc").write_text(json.dumps(original))
    topic = Topic(unique_name("contract"), partitions=1, cleanup=Cleanup.COMPACT, value_schema="clicks.avsc")
    subject = value_subject(topic.name)

    [applied] = apply_schemas(schemas, [topic], stack.registry)
    assert (applied.subject, applied.version, applied.new) == (subject, 1, True)
    assert apply_schemas(schemas, [topic], stack.registry)[0].new is False  # idempotent
    with Registry(stack.registry) as registry:
        assert registry.compatibility(subject) is Compatibility.BACKWARD_TRANSITIVE

    # A new required field without a default: old records could not be read any more.
    broken = copy.deepcopy(original)
    broken["fields"].append({"name": "campaign", "type": "string", "doc": "Marketing campaign."})
    (schemas / "clicks.avsc").write_text(json.dumps(broken))

    [report] = [r for r in check_schemas(schemas, [topic], stack.registry) if r.file == "clicks.avsc"]
    assert report.problems == [
        f"against {subject}: [new reads old] ClickEvent.campaign: the reader's field has no default and the "
        "writer does not have it (add a default, or keep the field)"
    ]
    with Registry(stack.registry) as registry:
        assert registry.test_compatibility(subject, broken) is False  # the registry agrees
    with pytest.raises(RegistryError, match="was refused for"):
        apply_schemas(schemas, [topic], stack.registry)

    # With a default it is a compatible evolution: version 2.
    broken["fields"][-1]["default"] = "none"
    (schemas / "clicks.avsc").write_text(json.dumps(broken))
    assert [r.problems for r in check_schemas(schemas, [topic], stack.registry) if r.file == "clicks.avsc"] == [[]]
    assert apply_schemas(schemas, [topic], stack.registry)[0].version == 2


def test_unreachable_registry_is_a_clear_error() -> None:
    with Registry("http://127.0.0.1:1/apis/ccompat/v7") as registry, pytest.raises(RegistryError) as err:
        registry.subjects()
    assert "not reachable at http://127.0.0.1:1/apis/ccompat/v7 (KAPPA_REGISTRY_URL)" in str(err.value)


READS: dict[str, Callable[[Registry], object]] = {
    "versions": lambda registry: registry.versions("clicks-value"),
    "schema by id": lambda registry: registry.schema_by_id(1),
    "lookup": lambda registry: registry.lookup("clicks-value", {"type": "string"}),
}


@pytest.mark.parametrize("read", READS)
def test_a_wrong_registry_url_is_not_read_as_nothing_registered(stack: KappaSettings, read: str) -> None:
    # The registry's server at a path where no registry API lives: it answers 404, but not as a registry.
    wrong = stack.registry.split("/apis/")[0] + "/registry"
    with Registry(wrong) as registry, pytest.raises(RegistryError) as err:
        READS[read](registry)
    assert f"no schema registry answered at {wrong} (KAPPA_REGISTRY_URL)" in str(err.value)
