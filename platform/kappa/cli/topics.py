"""`kappa topics apply | list`: the declared topics against the cluster."""

from __future__ import annotations

import argparse
from typing import Any

from kappa.cli.acls import print_plan
from kappa.core.settings import KappaSettings
from kappa.kafka import acls, topic_admin
from kappa.kafka.clients import require_kafka
from kappa.runtime.access import platform_access
from kappa.runtime.binding import topics_to_apply
from kappa.runtime.discovery import load_catalog


def cmd_topics_apply(settings: KappaSettings, args: argparse.Namespace) -> int:
    admin = require_kafka(settings)
    changes = topic_admin.apply(admin, topics_to_apply(settings, load_catalog(args.catalog)), args.force)
    for change in changes:
        print(f"{change.topic:<30} {change.kind}")
        for detail in change.details:
            print(f"{'':<32}{detail}")
    if settings.secured:  # the topics' readers and writers: each job version's principal and its ACLs
        acl_plan = acls.plan(admin, platform_access(settings))
        print_plan(acl_plan)
        acls.apply(admin, settings, acl_plan)
        print(f"{len(acl_plan.wanted)} principals, their ACLs as declared")
    return 1 if any(c.kind is topic_admin.ChangeKind.DRIFT for c in changes) else 0


def cmd_topics_list(settings: KappaSettings, args: argparse.Namespace) -> int:
    admin = require_kafka(settings)
    brokers = topic_admin.broker_count(admin)
    drifted = 0
    print(f"{'topic':<28} {'partitions':>14} {'replicas':>10}  {'cleanup':<16} state")

    for state in topic_admin.describe(admin, topics_to_apply(settings, load_catalog(args.catalog))):
        t = state.topic
        if state.partitions is None:
            print(f"{t.name:<28} {'-/' + str(t.partitions):>14} {'-':>10}  {t.cleanup.value:<16} missing")
            drifted += 1
            continue
        drift = state.config_drift(brokers)
        issues = [f"{k}={a} (declared {w})" for k, (a, w) in drift.items()]
        if state.partitions != t.partitions:
            issues.append(f"partitions {state.partitions} (declared {t.partitions})")
        drifted += bool(issues)
        parts = f"{state.partitions}/{t.partitions}"
        cleanup = state.configs.get("cleanup.policy", "?")
        print(f"{t.name:<28} {parts:>14} {state.replication_factor:>10}  {cleanup:<16} {'; '.join(issues) or 'ok'}")
    return 1 if drifted else 0


def add_topics_commands(sub: Any) -> None:
    topics = sub.add_parser("topics", help="declared topics versus the cluster")
    topics_sub = topics.add_subparsers(dest="topics_command", required=True, metavar="action")
    for name, func, help_ in (
        ("apply", cmd_topics_apply, "create missing topics and repair drifted configs (secured: and the ACLs)"),
        ("list", cmd_topics_list, "show declared versus actual"),
    ):
        p = topics_sub.add_parser(name, help=help_, description=help_)
        p.set_defaults(func=func)
        p.add_argument("--catalog", default="jobs.catalog", help="module with the TOPICS declarations")
        if name == "apply":
            p.add_argument(
                "--force", action="store_true", help="add partitions to keyed topics too (moves keys; prints a warning)"
            )
