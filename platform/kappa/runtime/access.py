"""Who may do what on Kafka, from the declarations: one principal per job version.

A job version runs as `kappa.<job>.v<N>` (its consumer group's name). It may READ the physical topics it is bound
to (inputs and lookups) and the alias registry; WRITE what it writes (its output topic, its `.late` topic and its
inputs' `.dlq` topics: `deployment_topics`); and commit under its own group and its Spark sources' groups. Nothing
else: a replay's version cannot write the live version's topic, and no job can move an alias (only
`kappa-cutover` writes the alias registry). `kappa acls plan | apply` compare these with the cluster; a replay's
prepare applies its version's; a run checks its own before its query starts (`refuse_missing_access`), so that a
missing ACL is one line naming it, not a timeout.
"""

from __future__ import annotations

from confluent_kafka import KafkaException, TopicCollection
from confluent_kafka.admin import AclOperation

from kappa.core.errors import KappaError
from kappa.core.security import Credential, as_principal, user_credential
from kappa.core.settings import KappaSettings
from kappa.kafka import acls
from kappa.kafka.acls import Access
from kappa.kafka.aliases import ALIASES, AliasRegistry, mover_access
from kappa.kafka.clients import admin_client
from kappa.runtime.binding import bind, bind_inputs, dataset_of, deployment_topics, known_versions, recorded_binding
from kappa.runtime.declaration import JobSpec, version_consumer_group, version_id
from kappa.runtime.discovery import discover

SPARK_GROUPS = (
    "spark"  # a version's Spark sources commit nothing, but their consumers carry a group: `<principal>.spark-…`
)


def version_principal(job: str, version: int) -> str:
    """`kappa.<job>.v<N>`: the Kafka principal (SCRAM user) one job version runs as, its consumer group's name."""
    return version_consumer_group(job, version)


def version_access(bound: JobSpec, version: int) -> Access:
    """What one job version (`bound` to its physical topics) may do on Kafka."""
    principal = version_principal(bound.name, version)
    return Access(
        principal=principal,
        # and the alias registry, read only: its metrics say whether it is its dataset's live version
        reads=tuple(dict.fromkeys([*(t.name for t in (*bound.inputs, *bound.lookups)), ALIASES.name])),
        writes=tuple(dict.fromkeys(t.name for t in deployment_topics(bound, version))),
        groups=(principal,),
        group_prefixes=(f"{principal}.",),  # its Spark sources' consumers' groups (spark_group_prefix)
        why=f"{bound.name} v{version}",
    )


def platform_access(settings: KappaSettings) -> list[Access]:
    """Every principal the platform needs on this cluster: each job's declared and live versions and those made
    here (a replay's, one kept for a rollback), bound as they run, and the cutover's."""
    jobs = discover()
    aliases = AliasRegistry(settings).all()
    wanted: dict[str, Access] = {}
    for job in jobs.values():
        live = aliases.get(dataset_of(job))
        versions = {job.version, *([live.version] if live else []), *known_versions(settings, job.name)}
        for version in sorted(versions):
            recorded = recorded_binding(settings, job.name, version)
            bound = bind_inputs(job, version, recorded.inputs) if recorded else bind(job, version, jobs, aliases)
            access = version_access(bound, version)
            wanted[access.principal] = access
    mover = mover_access()
    wanted[mover.principal] = mover
    return list(wanted.values())


def grant_version(settings: KappaSettings, bound: JobSpec, version: int) -> None:
    """Create one version's principal and ACLs (a replay's prepare: its version is new), as the platform's admin."""
    admin = admin_client(settings)
    acls.apply(admin, settings, acls.plan(admin, [version_access(bound, version)]))


def revoke_version(settings: KappaSettings, job: str, version: int) -> None:
    """Remove one version's principal: its ACLs, its credential and its password file (a retired version's)."""
    acls.remove_user(admin_client(settings), settings, version_principal(job, version))


def job_credential(settings: KappaSettings, job: str, version: int) -> Credential:
    """The job version's login, from its password file (a KappaError naming the fix where there is none)."""
    principal = version_principal(job, version)
    try:
        return user_credential(settings, principal)
    except KappaError:
        raise KappaError(
            f"job {version_id(job, version)}: no Kafka credential for User:{principal}: run `kappa acls apply` "
            "(it creates each job version's principal and its ACLs from the declarations)"
        ) from None


def missing_access(settings: KappaSettings, access: Access) -> list[str]:
    """What `access` asks for that Kafka does not allow the logged-in principal (`settings` are the principal's),
    as `READ topic x` lines; an empty list when all is allowed. Raises KappaError when Kafka refuses the login."""
    admin = admin_client(settings)
    wanted: dict[str, set[AclOperation]] = {}
    for topic in access.reads:
        wanted.setdefault(topic, set()).add(AclOperation.READ)
    for topic in access.writes:
        wanted.setdefault(topic, set()).add(AclOperation.WRITE)
    missing = []
    futures = admin.describe_topics(TopicCollection(list(wanted)), include_authorized_operations=True,
                                    request_timeout=15)  # fmt: skip
    for topic, future in futures.items():
        try:
            allowed = set(future.result(timeout=20).authorized_operations or ())
        except KafkaException as exc:
            error = exc.args[0]
            if error.name() == "TOPIC_AUTHORIZATION_FAILED":
                allowed = set()
            elif error.name() in ("_AUTHENTICATION", "SASL_AUTHENTICATION_FAILED"):
                raise KappaError(f"Kafka refused the login of User:{settings.kafka_user}: {error.str()}") from None
            else:
                raise
        if AclOperation.ALL in allowed:
            continue
        missing += [
            f"{op.name} topic {topic}" for op in sorted(wanted[topic], key=lambda o: o.name) if op not in allowed
        ]
    for group in access.groups:
        try:
            described = admin.describe_consumer_groups([group], include_authorized_operations=True,
                                                       request_timeout=15)[group].result(timeout=20)  # fmt: skip
            allowed = set(described.authorized_operations or ())
        except KafkaException as exc:
            if exc.args[0].name() == "GROUP_ID_NOT_FOUND":  # a new group: asked after the authorization
                continue
            if exc.args[0].name() != "GROUP_AUTHORIZATION_FAILED":
                raise
            allowed = set()
        if AclOperation.READ not in allowed and AclOperation.ALL not in allowed:
            missing.append(f"READ group {group}")
    return missing


def refuse_missing_access(settings: KappaSettings, bound: JobSpec, version: int) -> None:
    """Before a version's query starts, as its principal: everything its declaration reads and writes is allowed,
    or one line names what is not."""
    access = version_access(bound, version)
    missing = missing_access(settings, access)
    if missing:
        raise KappaError(
            f"job {version_id(bound.name, version)} (User:{access.principal}) may not {', '.join(missing)}: "
            "its ACLs follow its declaration; run `kappa acls apply`"
        )


def as_job(settings: KappaSettings, bound: JobSpec, version: int) -> KappaSettings:
    """The settings one job version runs with: on a secured platform, Kafka as its own principal and the registry
    read-only, its login and its ACLs checked before anything starts (a plaintext platform's are unchanged)."""
    if not settings.secured:
        return settings
    job_credential(settings, bound.name, version)  # a missing password file: one line naming the fix
    scoped = as_principal(settings, version_principal(bound.name, version))
    refuse_missing_access(scoped, bound, version)
    return scoped


def denied(failure: str, principal: str, job_id: str) -> str | None:
    """One line for a query that Kafka refused (an authorization or login failure inside Spark), else None."""
    for line in failure.splitlines():
        if "TopicAuthorizationException" in line or "Not authorized to access topics" in line:
            what = line.split("Not authorized to access topics:")[-1].strip() if "topics:" in line else line.strip()
            return (
                f"job {job_id} (User:{principal}) was refused by Kafka: not authorized to access topics {what[:200]}; "
                "a job reads and writes only what its declaration names (then `kappa acls apply`)"
            )
        if "SaslAuthenticationException" in line or "GroupAuthorizationException" in line:
            return f"job {job_id} (User:{principal}) was refused by Kafka: {line.strip()[:240]}"
    return None
