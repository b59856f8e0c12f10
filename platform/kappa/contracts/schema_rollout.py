"""`kappa schemas check | apply`: every .avsc against the house rules, its git history and the registry."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kappa.contracts.compatibility import Compatibility, check
from kappa.contracts.registry import Registry, RegistryError, key_subject
from kappa.contracts.schema_files import SchemaFileError, git_versions, house_rules, load
from kappa.contracts.topic_declarations import Topic
from kappa.core.security import Credential


@dataclass
class SchemaReport:
    file: str
    subjects: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _bindings(topics: Sequence[Topic]) -> dict[str, list[tuple[str, Compatibility]]]:
    """schema file -> [(subject, compatibility)] for every topic that uses it."""
    result: dict[str, list[tuple[str, Compatibility]]] = {}
    for topic in topics:
        if topic.value_schema:
            result.setdefault(topic.value_schema, []).append((topic.value_subject, topic.compatibility))
        if topic.key_schema:
            result.setdefault(topic.key_schema, []).append((key_subject(topic.name), topic.compatibility))
    return result


def check_schemas(
    schemas_dir: Path, topics: Sequence[Topic], registry_url: str | None, login: Credential | None = None
) -> list[SchemaReport]:
    """Check every schema file; with a registry URL also against what is registered (None: offline), logged in
    as `login` where the registry asks for one."""
    bindings = _bindings(topics)
    files = sorted({p.name for p in schemas_dir.glob("*.avsc")} | set(bindings))
    reports = []
    registry = Registry(registry_url, login=login) if registry_url else None
    try:
        for name in files:
            report = SchemaReport(name, [s for s, _ in bindings.get(name, [])])
            reports.append(report)
            path = schemas_dir / name
            try:
                schema = load(path)
            except SchemaFileError as exc:
                report.problems.append(str(exc))
                continue
            report.problems += house_rules(schema)
            # The strictest level of any subject using this file applies to its git history.
            levels = [level for _, level in bindings.get(name, [])] or [Compatibility.BACKWARD_TRANSITIVE]
            history = git_versions(path)
            if history:
                for level in dict.fromkeys(levels):
                    report.problems += [f"against git: {p}" for p in check(schema, history, level)]
                report.notes.append(f"compared with {len(history)} earlier version(s) in git")
            if registry is not None:
                for subject, level in bindings.get(name, []):
                    report.problems += _against_registry(registry, subject, schema, level, report)
    finally:
        if registry is not None:
            registry.close()
    return reports


def _against_registry(
    registry: Registry, subject: str, schema: dict[str, Any], level: Compatibility, report: SchemaReport
) -> list[str]:
    registered = registry.versions(subject)
    if not registered:
        report.notes.append(f"{subject}: not registered yet")
        return []
    problems = [f"against {subject}: {p}" for p in check(schema, [r.schema for r in registered], level)]
    if not registry.test_compatibility(subject, schema) and not problems:
        # The registry is the authority: report its verdict even where our explanation found nothing.
        problems.append(f"against {subject}: the registry rejects it ({level.value})")
    report.notes.append(f"{subject}: compared with {len(registered)} registered version(s)")
    return problems


@dataclass(frozen=True)
class Applied:
    subject: str
    schema_id: int
    version: int
    new: bool


def apply_schemas(
    schemas_dir: Path, topics: Sequence[Topic], registry_url: str, login: Credential | None = None
) -> list[Applied]:
    """Set each subject's compatibility level, then register its schema (the registry enforces the level), logged
    in as `login` where the registry asks for one (a secured registry takes writes from a writer's login only)."""
    applied = []
    with Registry(registry_url, login=login) as registry:
        for name, subjects in sorted(_bindings(topics).items()):
            schema = load(schemas_dir / name)
            for subject, level in subjects:
                before = {v.schema_id for v in registry.versions(subject)}
                registry.set_compatibility(subject, level)
                try:
                    schema_id = registry.register(subject, schema)
                except RegistryError as exc:
                    raise RegistryError(
                        f"{name} was refused for {subject} ({level.value}): {exc}. "
                        "`kappa schemas check` explains which field breaks which rule"
                    ) from None
                version = max(v.version for v in registry.versions(subject))
                applied.append(Applied(subject, schema_id, version, schema_id not in before))
    return applied
