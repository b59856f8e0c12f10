"""Principals and what each may do on Kafka: the ACLs a declaration asks for, against what the cluster has.

A principal is a SCRAM user (`User:<name>`). Its `Access` lists the topics it reads and writes, the consumer groups
it commits under and the transactional ids it uses; `bindings` turns that into Kafka's ACLs, all ALLOW, from any
host. `plan` compares the wanted principals with the cluster's ACLs and SCRAM users, `apply` makes the cluster
match: it creates a missing user with a new password (written to the secrets folder, 0600, before Kafka knows it)
and adds missing ACLs. What a principal may do beyond its declarations, and the principals no declaration names
any more, are reported, and removed with `prune`: another checkout of the pipeline (a copy on the same cluster, a
version made elsewhere) may have granted them, and removing them would stop its jobs.

Kafka's implications keep the lists short: READ and WRITE imply DESCRIBE, and an idempotent producer needs only
WRITE on its topics (KIP-679).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from kappa.core.errors import KappaError
from kappa.core.security import (
    SCRAM_ITERATIONS,
    allow,
    new_password,
    read_secret_file,
    user_password_file,
    write_secret_file,
)
from kappa.core.settings import KappaSettings

TIMEOUT_S = 30.0
# A job version's principal is its consumer group's name (`kappa.<job>.v<N>`): one identity per version.
VERSION_PRINCIPAL = re.compile(r"^kappa\.[A-Za-z0-9_]+\.v\d+$")


@dataclass(frozen=True)
class Access:
    """What one principal may do: nothing beyond these lists."""

    principal: str  # the SCRAM user name
    reads: tuple[str, ...] = ()  # topics it reads (READ)
    writes: tuple[str, ...] = ()  # topics it writes (WRITE)
    groups: tuple[str, ...] = ()  # consumer groups it commits offsets under (READ), by name
    group_prefixes: tuple[str, ...] = ()  # ... by prefix (each ends with "." so that v1 never matches v10)
    transactional_ids: tuple[str, ...] = ()  # transactional ids it produces under (WRITE)
    why: str = field(default="", compare=False)  # who asks for it, for the plan's lines (`enrich_clicks v3`)

    def bindings(self) -> list[AclBinding]:
        literal, prefixed = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
        wanted = [
            *(allow(self.principal, ResourceType.TOPIC, t, literal, AclOperation.READ) for t in self.reads),
            *(allow(self.principal, ResourceType.TOPIC, t, literal, AclOperation.WRITE) for t in self.writes),
            *(allow(self.principal, ResourceType.GROUP, g, literal, AclOperation.READ) for g in self.groups),
            *(allow(self.principal, ResourceType.GROUP, g, prefixed, AclOperation.READ) for g in self.group_prefixes),
            *(
                allow(self.principal, ResourceType.TRANSACTIONAL_ID, t, literal, AclOperation.WRITE)
                for t in self.transactional_ids
            ),
        ]
        return list({_key(b): b for b in wanted}.values())


def describe_acl(binding: AclBinding) -> str:
    """`READ topic enriched_clicks.v2` (`... (prefix)` for a prefix)."""
    kind = _name(binding.restype).lower().replace("_", " ")
    prefixed = " (prefix)" if _name(binding.resource_pattern_type) == "PREFIXED" else ""
    return f"{_name(binding.operation)} {kind} {binding.name}{prefixed}"


def _name(value: object) -> str:
    """An enum member's name (confluent-kafka's bindings hold enums; its type stubs allow str and int too)."""
    return str(getattr(value, "name", value))


def _key(b: AclBinding) -> tuple[str, ...]:
    return (_name(b.restype), b.name, _name(b.resource_pattern_type), b.principal, b.host, _name(b.operation),
            _name(b.permission_type))  # fmt: skip


@dataclass(frozen=True)
class AclPlan:
    """What `apply` would change; empty lists: the cluster matches the declarations."""

    users_missing: list[str]  # principals without a SCRAM credential
    missing: list[AclBinding]  # ACLs a declaration asks for that the cluster lacks
    extra: list[AclBinding]  # ACLs of a managed principal that no declaration asks for
    stale: list[str]  # managed principals that no declaration names (a retired version's, or another checkout's)
    wanted: list[Access]

    @property
    def in_step(self) -> bool:
        """Everything declared is granted (what is granted beyond the declarations is `prune`'s to remove)."""
        return not (self.users_missing or self.missing)


def plan(admin: AdminClient, wanted: list[Access], managed: Callable[[str], bool] | None = None) -> AclPlan:
    """The cluster's principals and ACLs against `wanted`. `managed`: the principal names the platform owns (a
    job version's); any other principal's ACLs are left alone unless it is wanted."""
    managed = managed or (lambda name: VERSION_PRINCIPAL.match(name) is not None)
    names = {a.principal for a in wanted}
    users = _scram_users(admin)
    have = [b for b in _all_acls(admin) if b.principal.startswith("User:")]
    owned = [b for b in have if (p := b.principal.removeprefix("User:")) in names or managed(p)]
    want = {_key(b): b for a in wanted for b in a.bindings()}
    owned_keys = {_key(b) for b in owned}
    extra = [b for b in owned if _key(b) not in want and b.principal.removeprefix("User:") in names]
    stale = sorted(
        {p for b in owned if (p := b.principal.removeprefix("User:")) not in names}
        | {u for u in users if managed(u) and u not in names}
    )
    return AclPlan(
        users_missing=sorted(names - users),
        missing=[b for k, b in want.items() if k not in owned_keys],
        extra=extra,
        stale=stale,
        wanted=wanted,
    )


def apply(admin: AdminClient, settings: KappaSettings, acl_plan: AclPlan, prune: bool = False) -> None:
    """Grant what the plan finds missing: users first (with their password files), then ACLs. With `prune`, also
    remove the ACLs beyond the declarations, and the stale principals with their credentials and password files."""
    for user in acl_plan.users_missing:
        upsert_user(admin, settings, user)
    if acl_plan.missing:
        _wait(admin.create_acls(acl_plan.missing, request_timeout=TIMEOUT_S), "adding the ACL")
    if not prune:
        return
    if acl_plan.extra:
        _wait(admin.delete_acls([_filter_of(b) for b in acl_plan.extra], request_timeout=TIMEOUT_S), "removing ACLs")
    for user in acl_plan.stale:
        remove_user(admin, settings, user)


def upsert_user(admin: AdminClient, settings: KappaSettings, user: str) -> None:
    """A SCRAM credential for `user`, with the password of its file in the secrets folder (a new one, written
    first, where there is none): the file is what its clients log in with."""
    path = user_password_file(settings, user)
    if not path.exists():
        write_secret_file(path, new_password())
    password = read_secret_file(path, f"the password of Kafka user {user}").get_secret_value()
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS)
    upsertion = UserScramCredentialUpsertion(user, info, password.encode())
    _wait(admin.alter_user_scram_credentials([upsertion], request_timeout=TIMEOUT_S), "creating the user")


def remove_user(admin: AdminClient, settings: KappaSettings, user: str) -> None:
    """A principal gone: its ACLs, its SCRAM credential and its password file (a retired version's)."""
    _wait(admin.delete_acls([_principal_filter(user)], request_timeout=TIMEOUT_S), "removing ACLs")
    deletion = UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_512)
    try:
        _wait(admin.alter_user_scram_credentials([deletion], request_timeout=TIMEOUT_S), "removing the user")
    except KappaError as exc:
        if "RESOURCE_NOT_FOUND" not in str(exc):  # no credential: already gone
            raise
    user_password_file(settings, user).unlink(missing_ok=True)


def _principal_filter(user: str) -> AclBindingFilter:
    return AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, f"User:{user}", None,  # type: ignore[arg-type]
                            AclOperation.ANY, AclPermissionType.ANY)  # fmt: skip


def _filter_of(b: AclBinding) -> AclBindingFilter:
    return AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation,
                            b.permission_type)  # fmt: skip


def _all_acls(admin: AdminClient) -> list[AclBinding]:
    # None: any name, principal and host (the stubs type them str only).
    every = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,  # type: ignore[arg-type]
                             AclPermissionType.ANY)  # fmt: skip
    try:
        return list(admin.describe_acls(every, request_timeout=TIMEOUT_S).result(timeout=TIMEOUT_S + 5))
    except KafkaException as exc:
        raise KappaError(f"Kafka did not list its ACLs: {exc.args[0].str()} (is the authorizer on?)") from None


def _scram_users(admin: AdminClient) -> set[str]:
    try:
        future = admin.describe_user_scram_credentials(request_timeout=TIMEOUT_S)
        assert isinstance(future, Future)  # all users: one future
        described = future.result(timeout=TIMEOUT_S + 5)
    except KafkaException as exc:
        raise KappaError(f"Kafka did not list its SCRAM users: {exc.args[0].str()}") from None
    return set(described)


def _wait(futures: Mapping[Any, Future[Any]], doing: str) -> None:
    for what, future in futures.items():
        try:
            future.result(timeout=TIMEOUT_S + 5)
        except KafkaException as exc:
            subject = describe_acl(what) if isinstance(what, AclBinding) else str(what)
            raise KappaError(f"Kafka refused {doing} ({subject}): {exc.args[0].str()}") from None


def principals_of(accesses: Iterable[Access]) -> list[str]:
    return sorted({a.principal for a in accesses})
