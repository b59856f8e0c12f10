"""The compatibility rules, each with the reason it reports (which field, which rule)."""

import copy
from typing import Any

from kappa.contracts.compatibility import Compatibility, check

BASE: dict[str, Any] = {
    "type": "record",
    "name": "Thing",
    "namespace": "io.kappa.test",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "count", "type": "int"},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"], "default": "A"}},
    ],
}


def changed(**edits: Any) -> dict[str, Any]:
    schema = copy.deepcopy(BASE)
    fields = {f["name"]: f for f in schema["fields"]}
    for name, new in edits.items():
        if new is None:
            schema["fields"] = [f for f in schema["fields"] if f["name"] != name]
        elif name in fields:
            fields[name].update(new)
        else:
            schema["fields"].append({"name": name, **new})
    return schema


def reasons(new: dict[str, Any], level: Compatibility, history: list[dict[str, Any]] | None = None) -> list[str]:
    return [str(p) for p in check(new, history or [BASE], level)]


def test_adding_a_field_needs_a_default_to_read_old_data() -> None:
    assert reasons(changed(extra={"type": "string"}), Compatibility.BACKWARD) == [
        "[new reads old] Thing.extra: the reader's field has no default and the writer does not have it "
        "(add a default, or keep the field)"
    ]
    assert reasons(changed(extra={"type": "string", "default": ""}), Compatibility.FULL) == []


def test_removing_a_field_without_default_breaks_forward() -> None:
    assert reasons(changed(count=None), Compatibility.BACKWARD) == []
    assert reasons(changed(count=None), Compatibility.FORWARD) == [
        "[old reads new] Thing.count: the reader's field has no default and the writer does not have it "
        "(add a default, or keep the field)"
    ]


def test_type_changes_and_promotions() -> None:
    assert reasons(changed(count={"type": "long"}), Compatibility.BACKWARD) == []  # int -> long promotes
    assert reasons(changed(count={"type": "long"}), Compatibility.FORWARD) == [
        "[old reads new] Thing.count: type changed from long to int"
    ]
    assert reasons(changed(id={"type": "int"}), Compatibility.BACKWARD) == [
        "[new reads old] Thing.id: type changed from string to int"
    ]


def test_enum_growth_relies_on_the_reader_default() -> None:
    grown = changed(kind={"type": {"type": "enum", "name": "Kind", "symbols": ["A", "B", "C"], "default": "A"}})
    assert reasons(grown, Compatibility.FULL) == []
    no_default = copy.deepcopy(BASE)
    del no_default["fields"][2]["type"]["default"]
    grown_no_default = changed(kind={"type": {"type": "enum", "name": "Kind", "symbols": ["A", "B", "C"]}})
    assert reasons(grown_no_default, Compatibility.FORWARD, [no_default]) == [
        "[old reads new] Thing.kind: the writer's enum symbol(s) C are not in the reader's symbols, "
        "and the reader's enum has no default"
    ]


def test_making_a_field_optional_is_backward_but_not_forward() -> None:
    optional = changed(id={"type": ["null", "string"], "default": None})
    assert reasons(optional, Compatibility.BACKWARD) == []
    assert reasons(optional, Compatibility.FORWARD) == [
        "[old reads new] Thing.id: the writer's union branch null cannot be read by the reader's string"
    ]


def test_transitive_checks_every_earlier_version() -> None:
    v1 = BASE
    v2 = changed(count=None)  # drop count
    v3 = changed(count={"type": "string", "default": ""})  # back as a string: fine against v2, not v1
    assert reasons(v3, Compatibility.BACKWARD, [v1, v2]) == []
    assert reasons(v3, Compatibility.BACKWARD_TRANSITIVE, [v1, v2]) == [
        "[new reads old] Thing.count: type changed from int to string"
    ]


def test_renaming_the_record_breaks_and_none_allows_anything() -> None:
    renamed = {**copy.deepcopy(BASE), "name": "Other"}
    assert reasons(renamed, Compatibility.BACKWARD) == [
        "[new reads old] Other: record name changed from io.kappa.test.Thing to io.kappa.test.Other"
    ]
    assert reasons(renamed, Compatibility.NONE) == []
