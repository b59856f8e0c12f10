"""Avro schema compatibility, by the specification's schema-resolution rules, with readable reasons.

`can_read(reader, writer)` lists every reason data written with `writer` cannot be read with `reader`: the
path of the field and the rule it breaks. The registry enforces the same rules; this module explains them
without a registry (CI compares a changed .avsc against its previous versions in git).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from fastavro.schema import expand_schema, parse_schema

Schema = Any  # parsed-and-expanded Avro JSON: str | list | dict

_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
# writer type -> reader types it may be promoted to (Avro specification, "Schema Resolution")
_PROMOTIONS = {
    "int": {"long", "float", "double"},
    "long": {"float", "double"},
    "float": {"double"},
    "string": {"bytes"},
    "bytes": {"string"},
}


class Compatibility(StrEnum):
    """Subject compatibility levels, as Confluent Schema Registry and Apicurio's ccompat API name them."""

    NONE = "NONE"
    BACKWARD = "BACKWARD"  # the new schema reads data written with the latest one
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"  # ... with every earlier one
    FORWARD = "FORWARD"  # the latest schema reads data written with the new one
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL = "FULL"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"

    @property
    def transitive(self) -> bool:
        return self.value.endswith("_TRANSITIVE")


@dataclass(frozen=True)
class Incompatibility:
    path: str  # where, e.g. ClickEvent.device
    rule: str  # which rule, in words
    direction: str = ""  # "new reads old" / "old reads new"

    def __str__(self) -> str:
        prefix = f"[{self.direction}] " if self.direction else ""
        return f"{prefix}{self.path}: {self.rule}"


def normalize(schema: Any) -> Schema:
    """Parse (validates), qualify names and inline named references, so comparisons see whole types."""
    return expand_schema(parse_schema(schema, _write_hint=False))


def _type_name(schema: Schema) -> str:
    if isinstance(schema, str):
        return schema
    if isinstance(schema, list):
        return "union"
    kind = schema["type"]
    return kind if isinstance(kind, str) else _type_name(kind)


def _describe(schema: Schema) -> str:
    kind = _type_name(schema)
    if isinstance(schema, dict) and "name" in schema:
        return f"{kind} {schema['name']}"
    return kind


def _names(schema: dict[str, Any]) -> set[str]:
    name = schema["name"]
    short = name.rsplit(".", 1)[-1]
    return {name, short, *schema.get("aliases", [])}


def _plain(schema: Schema) -> Schema:
    """A primitive with a logical type resolves as the primitive (timestamp-millis is a long)."""
    if isinstance(schema, dict) and isinstance(schema.get("type"), str) and schema["type"] in _PRIMITIVES:
        return schema["type"]
    return schema


def can_read(reader: Schema, writer: Schema, path: str = "") -> list[Incompatibility]:
    """Every reason `reader` cannot resolve data written with `writer` (empty: compatible)."""
    writer, reader = _plain(writer), _plain(reader)
    here = path or (reader["name"].rsplit(".", 1)[-1] if isinstance(reader, dict) and "name" in reader else "")

    if isinstance(writer, list):
        problems: list[Incompatibility] = []
        for branch in writer:
            branch_problems = can_read(reader, branch, path)
            if branch_problems:
                problems.append(
                    Incompatibility(
                        here,
                        f"the writer's union branch {_describe(branch)} cannot be read by the reader's "
                        f"{_describe(reader)}",
                    )
                )
        return problems
    if isinstance(reader, list):
        if any(not can_read(branch, writer, path) for branch in reader):
            return []
        return [Incompatibility(here, f"no branch of the reader's union can read the writer's {_describe(writer)}")]

    r_kind, w_kind = _type_name(reader), _type_name(writer)
    if r_kind != w_kind:
        if r_kind in _PROMOTIONS.get(w_kind, set()):
            return []
        return [Incompatibility(here, f"type changed from {_describe(writer)} to {_describe(reader)}")]
    if r_kind in _PRIMITIVES:
        return []
    if r_kind in {"record", "enum", "fixed"} and not (_names(reader) & {writer["name"]}):
        return [Incompatibility(here, f"{r_kind} name changed from {writer['name']} to {reader['name']}")]
    if r_kind == "record":
        return _record(reader, writer, here)
    if r_kind == "enum":
        missing = [s for s in writer["symbols"] if s not in reader["symbols"]]
        if missing and "default" not in reader:
            return [
                Incompatibility(
                    here,
                    f"the writer's enum symbol(s) {', '.join(missing)} are not in the reader's symbols, "
                    "and the reader's enum has no default",
                )
            ]
        return []
    if r_kind == "fixed":
        if reader["size"] != writer["size"]:
            return [Incompatibility(here, f"fixed size changed from {writer['size']} to {reader['size']}")]
        return []
    if r_kind == "array":
        return can_read(reader["items"], writer["items"], f"{here}[]")
    if r_kind == "map":
        return can_read(reader["values"], writer["values"], f"{here}{{}}")
    return [Incompatibility(here, f"unsupported type {r_kind}")]


def _record(reader: dict[str, Any], writer: dict[str, Any], here: str) -> list[Incompatibility]:
    problems: list[Incompatibility] = []
    writer_fields = {f["name"]: f for f in writer["fields"]}
    for field in reader["fields"]:
        candidates = [field["name"], *field.get("aliases", [])]
        match = next((writer_fields[n] for n in candidates if n in writer_fields), None)
        field_path = f"{here}.{field['name']}"
        if match is None:
            if "default" not in field:
                problems.append(
                    Incompatibility(
                        field_path,
                        "the reader's field has no default and the writer does not have it "
                        "(add a default, or keep the field)",
                    )
                )
            continue
        problems += can_read(field["type"], match["type"], field_path)
    return problems


def check(new: Any, previous: Sequence[Any], level: Compatibility) -> list[Incompatibility]:
    """Check a new schema against earlier versions (oldest first) under a compatibility level."""
    if level is Compatibility.NONE or not previous:
        return []
    new_n = normalize(new)
    against = previous if level.transitive else previous[-1:]
    problems: list[Incompatibility] = []
    for old in against:
        old_n = normalize(old)
        if level.value.startswith(("BACKWARD", "FULL")):
            problems += [Incompatibility(p.path, p.rule, "new reads old") for p in can_read(new_n, old_n)]
        if level.value.startswith(("FORWARD", "FULL")):
            problems += [Incompatibility(p.path, p.rule, "old reads new") for p in can_read(old_n, new_n)]
    return list(dict.fromkeys(problems))  # one line per distinct reason, in order
