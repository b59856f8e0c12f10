"""What `kappa up --secure` adds: TLS and SCRAM on the brokers' client port, PLAIN on the controller port, ACLs,
and a registry that takes logins (HTTP basic) and roles.

- Clients and brokers meet on a SASL_SSL listener and log in with SCRAM-SHA-512; the brokers' certificate is the
  stack's own (kappa.stack.certificates).
- The controller listener carries PLAIN on loopback: a PLAINTEXT controller port would make every caller there
  User:ANONYMOUS, which the brokers' registration needs as a super user (so anybody could change ACLs through
  it), and SCRAM cannot guard it, because the controller is what holds the SCRAM credentials.
- StandardAuthorizer with `allow.everyone.if.no.acl.found=false`: what no ACL allows is refused. The brokers'
  users and the platform's admin are the super users.
- No secret is in the properties: they name the password files through Kafka's DirectoryConfigProvider
  (`${dir:<folder>:<file>}`), and the SCRAM credentials go to `kafka-storage format` in an argument file that is
  deleted afterwards.
- The registry (Apicurio 3.3) authenticates with HTTP basic against Quarkus' embedded users, whose passwords it
  holds as SHA-256 digests (`user:realm:password`) in a 0600 file of the secrets folder, and
  authorizes by role: `admin` (sr-admin: the platform's tools register schemas and set their rules) and
  `kappa-reader` (sr-readonly: the jobs). Anonymous requests are refused, reads included. Keycloak (OIDC) would be
  a third JVM on two cores for the same two roles.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import AclBinding, AclOperation, ResourcePatternType, ResourceType

from kappa.core.security import (
    SCRAM,
    SCRAM_ITERATIONS,
    Credential,
    allow,
    new_password,
    read_secret_file,
    registry_password_file,
    user_password_file,
    write_secret_file,
)
from kappa.core.settings import KappaSettings
from kappa.stack.certificates import StackCertificates, ensure_certificates

BROKER_USER = "broker"  # the brokers' login to each other (SCRAM)
CONTROLLER_USER = "controller"  # the brokers' login to the controllers (PLAIN)
REGISTRY_USER = "kappa-registry"  # the schema registry's login: its storage is a Kafka topic


@dataclass(frozen=True)
class StackSecrets:
    certificates: StackCertificates
    passwords: Path  # secrets_dir/kafka: one file per user, read by Kafka's DirectoryConfigProvider
    admin: Credential
    broker: Credential
    registry: Credential


def ensure_stack_secrets(settings: KappaSettings) -> StackSecrets:
    """The stack's certificates, its Kafka users' passwords and its registry logins, generated where missing (a
    password given in KAPPA_KAFKA_PASSWORD is the admin's, and is not written)."""
    settings.secrets_path.mkdir(parents=True, exist_ok=True, mode=0o700)
    certificates = ensure_certificates(settings.secrets_path)

    def credential(user: str) -> Credential:
        path = user_password_file(settings, user)
        if not path.exists():
            write_secret_file(path, new_password())
        return Credential(user, read_secret_file(path, f"the password of Kafka user {user}"))

    if settings.kafka_password is not None:
        admin = Credential(settings.kafka_user, settings.kafka_password)
    elif settings.kafka_password_file == user_password_file(settings, settings.kafka_user):
        admin = credential(settings.kafka_user)
    else:  # the operator's own file: never generated
        assert settings.kafka_password_file is not None
        admin = Credential(
            settings.kafka_user, read_secret_file(settings.kafka_password_file, "KAPPA_KAFKA_PASSWORD_FILE")
        )
    broker, registry = credential(BROKER_USER), credential(REGISTRY_USER)
    credential(CONTROLLER_USER)
    registry_logins(settings)  # made with the rest: every command logs in to the registry, started yet or not
    return StackSecrets(certificates, user_password_file(settings, BROKER_USER).parent, admin, broker, registry)


def _secret(secrets: StackSecrets, user: str) -> str:
    return f"${{dir:{secrets.passwords}:{user}.password}}"


def secured_properties(secrets: StackSecrets, client: int, controller: int) -> dict[str, object]:
    """The listener, TLS, SASL and authorizer properties of one node (they replace the PLAINTEXT ones)."""
    scram_login = "org.apache.kafka.common.security.scram.ScramLoginModule required"
    plain_login = "org.apache.kafka.common.security.plain.PlainLoginModule required"
    controller_password = _secret(secrets, CONTROLLER_USER)
    return {
        "listeners": f"SASL_SSL://127.0.0.1:{client},CONTROLLER://127.0.0.1:{controller}",
        "advertised.listeners": f"SASL_SSL://127.0.0.1:{client}",
        "inter.broker.listener.name": "SASL_SSL",
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL,CONTROLLER:SASL_PLAINTEXT",
        "config.providers": "dir",
        "config.providers.dir.class": "org.apache.kafka.common.config.provider.DirectoryConfigProvider",
        "config.providers.dir.param.allowed.paths": secrets.passwords,
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": SCRAM,
        "sasl.mechanism.inter.broker.protocol": SCRAM,
        f"listener.name.sasl_ssl.{SCRAM.lower()}.sasl.jaas.config": (
            f'{scram_login} username="{BROKER_USER}" password="{_secret(secrets, BROKER_USER)}";'
        ),
        "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config": (
            f'{plain_login} username="{CONTROLLER_USER}" password="{controller_password}" '
            f'user_{CONTROLLER_USER}="{controller_password}";'
        ),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": secrets.certificates.broker_store,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": secrets.certificates.ca,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "false",
        "super.users": f"User:{BROKER_USER};User:{CONTROLLER_USER};User:{secrets.admin.user}",
    }


# The registry's password reaches it in its environment (a command line is anybody's to read), named by a Quarkus
# expression in its options.
REGISTRY_PASSWORD_VARIABLE = "KAPPA_REGISTRY_KAFKA_PASSWORD"


def registry_kafka_options(secrets: StackSecrets) -> list[str]:
    """The registry's Kafka storage over SASL_SSL as REGISTRY_USER: Apicurio passes `apicurio.kafka.common.*` to
    its producer, consumer and admin client."""
    common = "-Dapicurio.kafka.common"
    login = "org.apache.kafka.common.security.scram.ScramLoginModule required"
    return [
        f"-Dapicurio.kafkasql.consumer.group-prefix={REGISTRY_GROUP_PREFIX}",
        "-Dapicurio.kafkasql.security.protocol=SASL_SSL",
        "-Dapicurio.kafkasql.security.ssl.truststore.type=PEM",
        f"-Dapicurio.kafkasql.security.ssl.truststore.location={secrets.certificates.ca}",
        f"{common}.security.protocol=SASL_SSL",
        f"{common}.sasl.mechanism={SCRAM}",
        f'{common}.sasl.jaas.config={login} username="{REGISTRY_USER}" password="${{{REGISTRY_PASSWORD_VARIABLE}}}";',
        f"{common}.ssl.truststore.type=PEM",
        f"{common}.ssl.truststore.location={secrets.certificates.ca}",
    ]


REGISTRY_GROUP_PREFIX = "kappa-registry-"  # its consumer group is new at each start: a prefix names them all
REGISTRY_TOPICS = ("kafkasql-", "registry-events")  # its journal and snapshots (a prefix), and its events


def registry_acls() -> list[AclBinding]:
    """What the registry may do on Kafka: its own topics and consumer groups, nothing else."""
    journal, events = REGISTRY_TOPICS
    return [
        allow(REGISTRY_USER, ResourceType.TOPIC, journal, ResourcePatternType.PREFIXED, AclOperation.ALL),
        allow(REGISTRY_USER, ResourceType.TOPIC, events, ResourcePatternType.LITERAL, AclOperation.ALL),
        allow(
            REGISTRY_USER, ResourceType.GROUP, REGISTRY_GROUP_PREFIX, ResourcePatternType.PREFIXED, AclOperation.READ
        ),
    ]


def scram_format_arguments(secrets: StackSecrets) -> list[str]:
    """`kafka-storage format` arguments that put the brokers' and the admin's SCRAM credentials in the first
    metadata (the brokers cannot log in to each other before it holds them)."""
    arguments = []
    for login in (secrets.broker, secrets.admin, secrets.registry):
        password = login.password.get_secret_value()
        arguments += ["--add-scram", f"{SCRAM}=[name={login.user},iterations={SCRAM_ITERATIONS},password={password}]"]
    return arguments


def write_argument_file(path: Path, arguments: list[str]) -> Path:
    """An argument file (`@path`, one argument per line) that only its owner may read."""
    write_secret_file(path, "\n".join(arguments))
    return path


REGISTRY_REALM = "Quarkus"  # the realm Quarkus' basic authentication digests passwords under
REGISTRY_ROLES = {"sr-admin": "the platform's tools", "sr-readonly": "the jobs"}


def registry_logins(settings: KappaSettings) -> dict[str, tuple[Credential, str]]:
    """The registry's logins and their roles, passwords generated where missing: the platform's (the CLI's
    KAPPA_REGISTRY_USER, an administrator) and the jobs' read-only one."""

    def login(user: str, given: Path | None = None) -> Credential:
        path = given or registry_password_file(settings, user)
        if given is None and not path.exists():
            write_secret_file(path, new_password())
        return Credential(user, read_secret_file(path, f"the registry password of {user}"))

    if settings.registry_password is not None:
        admin = Credential(settings.registry_user, settings.registry_password)
    else:
        own = settings.registry_password_file
        admin = login(
            settings.registry_user, own if own != registry_password_file(settings, settings.registry_user) else None
        )
    reader = login(settings.registry_reader_user)
    return {admin.user: (admin, "sr-admin"), reader.user: (reader, "sr-readonly")}


def registry_auth_file(settings: KappaSettings) -> Path:
    """The registry's authentication and authorization settings, with its users' password digests: a 0600
    file it reads at start (`quarkus.config.locations`)."""
    lines = {
        "apicurio.authn.enabled": "true",
        # Apicurio reads this one itself (its AuthConfig), though Quarkus warns that its own use is fixed at build
        # time: without it the registry takes anonymous writes (the secured cascade test caught that).
        "quarkus.http.auth.basic": "true",
        "apicurio.authn.mechanism.priority": "basic",
        "quarkus.security.users.embedded.enabled": "true",
        "quarkus.security.users.embedded.realm-name": REGISTRY_REALM,
        "quarkus.security.users.embedded.plain-text": "false",
        "quarkus.security.users.embedded.algorithm": "digest-sha-256",
        "apicurio.auth.role-based-authorization": "true",
        "apicurio.auth.role-source": "token",  # the roles of the embedded users
        "apicurio.auth.anonymous-read-access.enabled": "false",
        "apicurio.auth.authenticated-read-access.enabled": "false",
    }
    for user, (login, role) in registry_logins(settings).items():
        secret = login.password.get_secret_value()
        digest = hashlib.sha256(f"{user}:{REGISTRY_REALM}:{secret}".encode()).hexdigest()
        lines[f"quarkus.security.users.embedded.users.{user}"] = digest
        lines[f"quarkus.security.users.embedded.roles.{user}"] = role
    path = registry_password_file(settings, "registry").with_name("auth.properties")
    write_secret_file(path, "".join(f"{k}={v}\n" for k, v in lines.items()))
    return path
