"""Our compatibility checker against Apache Avro's own (`avro.compatibility`), on generated schema evolutions.

`kappa schemas check` explains an incompatibility with the field and the rule it breaks. Apache Avro's checker
gives only a verdict for that purpose (its messages and locations come as unordered sets, not paired with the
rule), so ours explains and Avro's is the reference for the verdict: they must agree on every pair of versions,
read in both directions.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType
from avro.errors import AvroException
from avro.schema import parse
from fastavro.schema import SchemaParseException
from hypothesis import given, settings
from hypothesis import strategies as st

from kappa.contracts.compatibility import can_read, normalize
from tests.unit import test_avro_compat as rule_cases

# The rule tests' schema, with a union and a nested record besides its string, int and enum.
BASE: dict[str, Any] = {
    **rule_cases.BASE,
    "fields": [
        *rule_cases.BASE["fields"],
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "inner", "type": {"type": "record", "name": "Inner", "fields": [{"name": "x", "type": "long"}]}},
    ],
}
# The changes a schema's author makes: add a field (with or without a default), drop one, change its type
# (promotions, non-promotions, into and out of unions), add or remove enum symbols, change a nested field.
EDITS: list[tuple[str, str, Any]] = [
    ("add", "extra", {"type": "string"}),
    ("add", "extra", {"type": "string", "default": ""}),
    ("add", "maybe", {"type": ["null", "int"], "default": None}),
    ("drop", "count", None),
    ("drop", "note", None),
    ("drop", "id", None),
    ("type", "count", "long"),
    ("type", "count", "double"),
    ("type", "count", "string"),
    ("type", "count", ["null", "int"]),
    ("type", "id", "bytes"),
    ("type", "id", ["null", "string"]),
    ("type", "note", "string"),
    ("type", "note", ["null", "string", "int"]),
    ("type", "note", ["null", "bytes"]),
    ("symbols", "kind", ["A", "B", "C"]),
    ("symbols", "kind", ["A"]),
    ("inner", "inner", "int"),
    ("inner", "inner", "double"),
    ("default", "count", 0),
]


def evolved(edits: list[tuple[str, str, Any]]) -> dict[str, Any]:
    schema = copy.deepcopy(BASE)
    for op, name, value in edits:
        fields = {f["name"]: f for f in schema["fields"]}
        if op == "add" and name not in fields:
            schema["fields"].append({"name": name, **value})
        elif name not in fields:
            continue
        elif op == "drop":
            schema["fields"] = [f for f in schema["fields"] if f["name"] != name]
        elif op == "type":
            fields[name]["type"] = value
            fields[name].pop("default", None)
            if isinstance(value, list) and value[0] == "null":
                fields[name]["default"] = None
        elif op == "symbols":
            fields[name]["type"]["symbols"] = value
        elif op == "inner":
            fields[name]["type"]["fields"][0]["type"] = value
        elif op == "default":
            fields[name]["default"] = value
    return schema


def avro_can_read(reader: dict[str, Any], writer: dict[str, Any]) -> bool:
    result = ReaderWriterCompatibilityChecker().get_compatibility(parse(json.dumps(reader)), parse(json.dumps(writer)))
    return result.compatibility is SchemaCompatibilityType.compatible


def valid(schema: dict[str, Any]) -> bool:
    try:
        normalize(schema)
        parse(json.dumps(schema))
    except (SchemaParseException, AvroException):
        return False  # e.g. a default that no longer matches the changed type: no author could write it
    return True


versions = st.lists(st.sampled_from(EDITS), max_size=3).map(evolved).filter(valid)


@settings(max_examples=300, deadline=None)
@given(versions, versions)
def test_our_verdict_is_apache_avros_in_both_directions(a: dict[str, Any], b: dict[str, Any]) -> None:
    for reader, writer in ((a, b), (b, a)):
        ours = not can_read(normalize(reader), normalize(writer))
        assert ours == avro_can_read(reader, writer), (reader["fields"], writer["fields"])


@pytest.mark.parametrize(
    ("edit", "readable"), [(("add", "extra", {"type": "string"}), False), (("type", "count", "long"), True)]
)
def test_both_checkers_agree_on_a_known_case(edit: tuple[str, str, Any], readable: bool) -> None:
    # Guards the generator: a new field without a default cannot read old data; int -> long is a promotion.
    new = evolved([edit])
    assert avro_can_read(new, BASE) is readable
    assert (not can_read(normalize(new), normalize(BASE))) is readable
