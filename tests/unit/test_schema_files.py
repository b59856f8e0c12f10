"""Every schema in schemas/ parses, follows the house rules, and is compatible with its git history."""

import json
from pathlib import Path

import pytest

from kappa.contracts.schema_files import house_rules, load
from kappa.contracts.schema_rollout import check_schemas
from kappa.core.settings import project_root
from kappa.runtime.discovery import load_catalog

SCHEMAS = project_root() / "schemas" if project_root() else Path("schemas")
FILES = sorted(SCHEMAS.glob("*.avsc"))


def test_there_is_a_schema_for_every_declared_topic_value() -> None:
    declared = {t.value_schema for t in load_catalog() if t.value_schema}
    assert declared <= {f.name for f in FILES}
    assert {"clicks.avsc", "user_profiles.avsc", "enriched_clicks.avsc", "sessions.avsc"} <= declared


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_schema_parses_and_follows_house_rules(path: Path) -> None:
    assert house_rules(load(path)) == []


def test_every_schema_is_compatible_with_its_git_history() -> None:
    reports = check_schemas(SCHEMAS, load_catalog(), registry_url=None)
    assert {r.file for r in reports} == {f.name for f in FILES}
    assert [(r.file, r.problems) for r in reports if r.problems] == []


def test_house_rules_catch_missing_docs_namespaces_and_closed_enums(tmp_path: Path) -> None:
    schema = {
        "type": "record",
        "name": "Bad",
        "namespace": "elsewhere",
        "fields": [
            {"name": "a", "type": "string"},
            {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["X"]}, "doc": "an enum"},
        ],
    }
    path = tmp_path / "bad.avsc"
    path.write_text(json.dumps(schema))
    assert house_rules(load(path)) == [
        "Bad: namespace must be io.kappa.clickstream (got elsewhere)",
        "Bad: the record has no doc",
        "Bad.a: the field has no doc",
        "Bad.e: the enum has no doc",
        "Bad.e: enum E has no default, so it can never gain a symbol",
    ]


def test_invalid_schema_files_are_clear_errors(tmp_path: Path) -> None:
    from kappa.contracts.schema_files import SchemaFileError

    (tmp_path / "nojson.avsc").write_text("{")
    (tmp_path / "noavro.avsc").write_text('{"type": "record", "name": "X", "fields": [{"name": "a", "type": "strin"}]}')
    with pytest.raises(SchemaFileError, match="not valid JSON"):
        load(tmp_path / "nojson.avsc")
    with pytest.raises(SchemaFileError, match="not a valid Avro schema"):
        load(tmp_path / "noavro.avsc")


def test_schema_files_are_named_after_their_datasets() -> None:
    """`clicks.avsc` holds `clicks`: a newcomer finds a dataset's schema by its name. A dataset may share another's
    schema (the real-time lane's enriched clicks are `enriched_clicks` records); no file is left that nothing uses."""
    topics = [t for t in load_catalog() if t.value_schema]
    names = {t.name for t in topics}
    assert {f.name for f in FILES} == {t.value_schema for t in topics}
    for topic in topics:
        assert topic.value_schema is not None
        assert topic.value_schema.removesuffix(".avsc") in names, (topic.name, topic.value_schema)
