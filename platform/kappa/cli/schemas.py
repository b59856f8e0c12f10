"""`kappa schemas check | apply`: the Avro contracts in schemas/."""

from __future__ import annotations

import argparse
from typing import Any

from kappa.contracts.schema_rollout import apply_schemas, check_schemas
from kappa.core.security import registry_login
from kappa.core.settings import KappaSettings
from kappa.runtime.discovery import load_catalog


def cmd_schemas_check(settings: KappaSettings, args: argparse.Namespace) -> int:
    registry = None if args.offline else settings.registry
    reports = check_schemas(settings.schemas_path, load_catalog(args.catalog), registry, registry_login(settings))
    failed = 0
    for report in reports:
        subjects = f" ({', '.join(report.subjects)})" if report.subjects else " (no topic)"
        print(f"{'FAIL' if report.problems else 'ok  '} {report.file}{subjects}")
        for problem in report.problems:
            print(f"       {problem}")
        for note in report.notes:
            print(f"       · {note}")
        failed += bool(report.problems)
    print(f"{len(reports) - failed} schema(s) ok, {failed} with problems")
    return 1 if failed else 0


def cmd_schemas_apply(settings: KappaSettings, args: argparse.Namespace) -> int:
    for applied in apply_schemas(
        settings.schemas_path, load_catalog(args.catalog), settings.registry, registry_login(settings)
    ):
        state = "registered" if applied.new else "unchanged"
        print(f"{applied.subject:<32} {state:<10} id {applied.schema_id}, version {applied.version}")
    return 0


def add_schemas_commands(sub: Any) -> None:
    schemas = sub.add_parser("schemas", help="Avro contracts: check and register the schemas in schemas/")
    schemas_sub = schemas.add_subparsers(dest="schemas_command", required=True, metavar="action")
    check = schemas_sub.add_parser("check", help="house rules, compatibility with git history and the registry")
    check.set_defaults(func=cmd_schemas_check)
    check.add_argument("--offline", action="store_true", help="do not ask the registry (CI without a stack)")
    apply_ = schemas_sub.add_parser("apply", help="set each subject's compatibility level and register its schema")
    apply_.set_defaults(func=cmd_schemas_apply)
    for p in (check, apply_):
        p.add_argument("--catalog", default="jobs.catalog", help="module with the TOPICS declarations")
