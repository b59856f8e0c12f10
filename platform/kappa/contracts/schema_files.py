"""The .avsc files in schemas/: loading, house rules, and their earlier versions in git."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fastavro.schema import SchemaParseException, parse_schema

from kappa.contracts.topic_declarations import Topic
from kappa.core.errors import KappaError

NAMESPACE = "io.kappa.clickstream"


class SchemaFileError(KappaError):
    """A schema file is missing, not JSON, not valid Avro, or breaks a house rule."""


def load(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise SchemaFileError(f"schema file {path} does not exist")
    try:
        schema = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise SchemaFileError(f"{path}: not valid JSON: {exc}") from None
    try:
        parse_schema(schema, _write_hint=False)
    except (SchemaParseException, ValueError, TypeError, KeyError) as exc:
        raise SchemaFileError(f"{path}: not a valid Avro schema: {exc}") from None
    if not isinstance(schema, dict):
        raise SchemaFileError(f"{path}: a topic schema must be a named record")
    return schema


def topic_value_schema(schemas_dir: Path, topic: Topic) -> dict[str, Any]:
    """The value schema a topic declares (its reader schema)."""
    if topic.value_schema is None:
        raise SchemaFileError(f"topic {topic.name} declares no value schema")
    return load(schemas_dir / topic.value_schema)


def _walk(schema: Any, path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every named type and record field, with its path (records, enums, fixed; nested in unions/arrays/maps)."""
    if isinstance(schema, list):
        for branch in schema:
            yield from _walk(branch, path)
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if kind in {"record", "error"}:
            yield path or schema["name"], schema
            for field in schema["fields"]:
                field_path = f"{path or schema['name']}.{field['name']}"
                yield field_path, {**field, "__field__": True}
                yield from _walk(field["type"], field_path)
        elif kind == "enum":
            yield path, schema
        elif kind == "array":
            yield from _walk(schema["items"], f"{path}[]")
        elif kind == "map":
            yield from _walk(schema["values"], f"{path}{{}}")
        elif isinstance(kind, (dict, list)):
            yield from _walk(kind, path)


def house_rules(schema: dict[str, Any]) -> list[str]:
    """The project's rules beyond Avro's: docs everywhere, one namespace, enums that can grow."""
    problems = []
    if schema.get("namespace") != NAMESPACE:
        problems.append(f"{schema.get('name')}: namespace must be {NAMESPACE} (got {schema.get('namespace')})")
    for path, node in _walk(schema, ""):
        if not str(node.get("doc", "")).strip():
            what = "field" if node.get("__field__") else node.get("type")
            problems.append(f"{path}: the {what} has no doc")
        if node.get("type") == "enum" and "default" not in node:
            problems.append(f"{path}: enum {node['name']} has no default, so it can never gain a symbol")
    return problems


def git_versions(path: Path) -> list[dict[str, Any]]:
    """Earlier committed versions of a schema file, oldest first, distinct, excluding the current content.

    On a branch with the change still uncommitted, the last commit is the previous version; once the change
    is committed (as in CI), the versions before that commit are.
    """
    try:
        root = Path(
            subprocess.run(
                ["git", "-C", str(path.parent), "rev-parse", "--show-toplevel"],
                capture_output=True, text=True, check=True,
            ).stdout.strip()
        )  # fmt: skip
        relative = path.resolve().relative_to(root.resolve()).as_posix()
        commits = subprocess.run(
            ["git", "-C", str(root), "log", "--format=%H", "--follow", "--", relative],
            capture_output=True, text=True, check=True,
        ).stdout.split()  # fmt: skip
    except (subprocess.CalledProcessError, FileNotFoundError, ValueError):
        return []  # not in a git checkout: nothing to compare with
    current = json.loads(path.read_text()) if path.is_file() else None
    versions: list[dict[str, Any]] = []
    for commit in reversed(commits):  # oldest first
        shown = subprocess.run(
            ["git", "-C", str(root), "show", f"{commit}:{relative}"], capture_output=True, text=True, check=False
        )
        if shown.returncode != 0:
            continue  # deleted or renamed in that commit
        try:
            version = json.loads(shown.stdout)
        except json.JSONDecodeError:
            continue
        if not versions or versions[-1] != version:
            versions.append(version)
    return [v for v in versions if v != current] if current is not None else versions
