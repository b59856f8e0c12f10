"""`kappa acls plan | apply`: each job version's principal and ACLs, from the declarations, against the cluster."""

from __future__ import annotations

import argparse
from typing import Any

from kappa.core.errors import KappaError
from kappa.core.settings import KappaSettings
from kappa.kafka import acls
from kappa.kafka.clients import require_kafka
from kappa.runtime.access import platform_access


def _plan(settings: KappaSettings) -> tuple[Any, acls.AclPlan]:
    if not settings.secured:
        raise KappaError(
            "the platform is not secured (KAPPA_SECURITY=plaintext): Kafka has no principals or ACLs to manage; "
            "`kappa up --secure` starts a secured stack (README, Security)"
        )
    admin = require_kafka(settings)
    return admin, acls.plan(admin, platform_access(settings))


def print_plan(acl_plan: acls.AclPlan) -> None:
    for user in acl_plan.users_missing:
        print(f"+ user {user}")
    for binding in acl_plan.missing:
        print(f"+ {binding.principal}: {acls.describe_acl(binding)}")
    for binding in acl_plan.extra:
        print(f"- {binding.principal}: {acls.describe_acl(binding)} (no declaration here asks for it; --prune)")
    for user in acl_plan.stale:
        print(f"? {user}: no declaration here names it (a retired version's, or another checkout's; --prune)")


def cmd_acls_plan(settings: KappaSettings, _args: argparse.Namespace) -> int:
    _, acl_plan = _plan(settings)
    print_plan(acl_plan)
    principals = len(acl_plan.wanted)
    if acl_plan.in_step:
        print(f"{principals} principals, their ACLs as declared")
        return 0
    print(f"{principals} principals; `kappa acls apply` makes the cluster match")
    return 1


def cmd_acls_apply(settings: KappaSettings, args: argparse.Namespace) -> int:
    admin, acl_plan = _plan(settings)
    print_plan(acl_plan)
    acls.apply(admin, settings, acl_plan, prune=args.prune)
    added = len(acl_plan.users_missing) + len(acl_plan.missing)
    removed = len(acl_plan.extra) + len(acl_plan.stale) if args.prune else 0
    print(f"{len(acl_plan.wanted)} principals as declared ({added} added, {removed} removed)")
    return 0


def add_acls_commands(sub: Any) -> None:
    parser = sub.add_parser("acls", help="each job version's Kafka principal and ACLs, from the declarations")
    actions = parser.add_subparsers(dest="acls_command", required=True, metavar="action")
    plan = actions.add_parser("plan", help="what differs between the declarations and the cluster (exit 1 if any)")
    plan.set_defaults(func=cmd_acls_plan)
    apply_ = actions.add_parser("apply", help="create the principals and ACLs the declarations ask for")
    apply_.set_defaults(func=cmd_acls_apply)
    apply_.add_argument(
        "--prune",
        action="store_true",
        help="also remove ACLs beyond the declarations and principals no declaration here names",
    )
