"""How every client of the platform authenticates to Kafka, and where its secrets live.

One place for both: each librdkafka client (producers, consumers, the admin client, the alias registry's
transactions, the sensors) takes `librdkafka_config`, each Spark Kafka source and sink takes `spark_kafka_options`.
With `security=sasl_ssl` they log in with SCRAM-SHA-512 over TLS, trusting the CA in `kafka_ca_file`.

A secret is a file that only its owner may read (mode 0600, in a 0700 folder): the platform refuses a secret file
that others can read, as ssh does a private key, and never writes a secret anywhere else. Kafka's own processes
read theirs through Kafka's file config provider, so no properties file or command line holds one.
"""

from __future__ import annotations

import os
import secrets
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType
from pydantic import SecretStr

from kappa.core.errors import SettingsError
from kappa.core.settings import KappaSettings

SCRAM = "SCRAM-SHA-512"
SCRAM_ITERATIONS = 8192  # Kafka's minimum is 4096; each new connection pays them (15-44 ms here), a job once
SECRETS_KAFKA = "kafka"  # secrets_dir/kafka/<user>.password: one file per SCRAM user
SECRETS_REGISTRY = "registry"  # secrets_dir/registry/<user>.password: one file per registry login
REDACTED = "*****"


@dataclass(frozen=True)
class Credential:
    """A SCRAM user and its password; the password never shows in a repr, a log line or an error."""

    user: str
    password: SecretStr = field(repr=False)


def new_password() -> str:
    # URL-safe base64: no `,` `=` `[` `]` or `"`, so it needs no escaping in SCRAM arguments or JAAS strings.
    return secrets.token_urlsafe(32)


def read_secret_file(path: Path, what: str) -> SecretStr:
    """A secret from a file its owner alone may read; one line naming the file (not the secret) otherwise."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise SettingsError(f"{what}: no such file {path}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SettingsError(
            f"{what}: {path} may be read by others (mode {stat.S_IMODE(mode):04o}): `chmod 600 {path}` first"
        )
    value = path.read_text().strip()
    if not value:
        raise SettingsError(f"{what}: {path} is empty")
    return SecretStr(value)


def write_secret_file(path: Path, value: str) -> None:
    """Create a secret file, 0600 from its first byte (no moment in which others could read it), in a 0700
    folder; an existing file is replaced atomically."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path.parent, 0o700)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(value)  # no newline: Kafka's DirectoryConfigProvider reads a file's bytes as they are
    tmp.replace(path)


def user_password_file(settings: KappaSettings, user: str) -> Path:
    return settings.secrets_path / SECRETS_KAFKA / f"{user}.password"


def registry_password_file(settings: KappaSettings, user: str) -> Path:
    return settings.secrets_path / SECRETS_REGISTRY / f"{user}.password"


def platform_credential(settings: KappaSettings) -> Credential:
    """The credential of the platform's own tools: KAPPA_KAFKA_PASSWORD, else KAPPA_KAFKA_PASSWORD_FILE."""
    if settings.kafka_password is not None:
        return Credential(settings.kafka_user, settings.kafka_password)
    assert settings.kafka_password_file is not None
    return Credential(settings.kafka_user, read_secret_file(settings.kafka_password_file, "KAPPA_KAFKA_PASSWORD_FILE"))


def user_credential(settings: KappaSettings, user: str) -> Credential:
    """The credential of another SCRAM user (a job version's principal), from its file in the secrets folder."""
    if user == settings.kafka_user:
        return platform_credential(settings)
    return Credential(user, read_secret_file(user_password_file(settings, user), f"the password of Kafka user {user}"))


def registry_login(settings: KappaSettings) -> Credential | None:
    """The registry login of these settings (None on a plaintext platform, whose registry is open):
    KAPPA_REGISTRY_PASSWORD, else KAPPA_REGISTRY_PASSWORD_FILE."""
    if not settings.secured:
        return None
    if settings.registry_password is not None:
        return Credential(settings.registry_user, settings.registry_password)
    assert settings.registry_password_file is not None
    what = f"the registry password of {settings.registry_user} (KAPPA_REGISTRY_PASSWORD_FILE)"
    return Credential(settings.registry_user, read_secret_file(settings.registry_password_file, what))


def as_principal(settings: KappaSettings, kafka_user: str) -> KappaSettings:
    """The settings a job version runs with: Kafka as its own principal (`kafka_user`, its password from the
    secrets folder, where `kappa acls apply` wrote it), the registry as the read-only login. Unchanged on a
    plaintext platform."""
    if not settings.secured:
        return settings
    reader = settings.registry_reader_user
    return settings.model_copy(
        update={
            "kafka_user": kafka_user,
            "kafka_password": None,
            "kafka_password_file": user_password_file(settings, kafka_user),
            "registry_user": reader,
            "registry_password": None,
            "registry_password_file": registry_password_file(settings, reader),
        }
    )


def known_secrets(settings: KappaSettings) -> list[str]:
    """Every password these settings know of: given in the environment, or in a file of the secrets folder."""
    found = [s.get_secret_value() for s in (settings.kafka_password, settings.registry_password) if s is not None]
    folder = settings.secrets_path
    if folder.is_dir():
        for path in folder.rglob("*.password"):
            try:
                found.append(path.read_text().strip())
            except OSError:
                continue
    return sorted({s for s in found if len(s) >= 8}, key=len, reverse=True)  # longest first: no partial blanks


def redact(text: str, secrets_: list[str]) -> str:
    """`text` with every one of `secrets_` blanked (what an error or a process's output may carry to a record)."""
    for secret in secrets_:
        text = text.replace(secret, REDACTED)
    return text


def ca_file(settings: KappaSettings) -> Path:
    if settings.kafka_ca_file is None or not settings.kafka_ca_file.is_file():
        raise SettingsError(
            f"KAPPA_KAFKA_CA_FILE: no CA certificate at {settings.kafka_ca_file} (the PEM file of the CA that "
            "signed the brokers' certificates; `kappa up --secure` writes the local stack's)"
        )
    return settings.kafka_ca_file


def librdkafka_config(settings: KappaSettings, credential: Credential | None = None) -> dict[str, Any]:
    """`bootstrap.servers` and, when secured, the login of `credential` (default: the platform's) for a
    confluent-kafka client."""
    config: dict[str, Any] = {"bootstrap.servers": settings.bootstrap}
    if not settings.secured:
        return config
    login = credential or platform_credential(settings)
    config.update(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": SCRAM,
            "sasl.username": login.user,
            "sasl.password": login.password.get_secret_value(),
            "ssl.ca.location": str(ca_file(settings)),
        }
    )
    return config


def spark_kafka_options(settings: KappaSettings, credential: Credential | None = None) -> dict[str, str]:
    """The `kafka.*` options of a Spark Kafka source or sink: per query, so one Spark application can hold
    several principals (the job host runs every deployed job)."""
    options = {"kafka.bootstrap.servers": settings.bootstrap}
    if not settings.secured:
        return options
    login = credential or platform_credential(settings)
    options.update(
        {
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": SCRAM,
            "kafka.sasl.jaas.config": jaas_scram(login),
            "kafka.ssl.truststore.type": "PEM",
            "kafka.ssl.truststore.location": str(ca_file(settings)),
        }
    )
    return options


def java_client_file(settings: KappaSettings) -> Path:
    """A Java Kafka client's properties for the platform's login (Kafka's own tools: `--command-config`), in a
    0600 file of the secrets folder."""
    options = spark_kafka_options(settings)
    path = settings.secrets_path / "client.properties"
    lines = [f"{k.removeprefix('kafka.')}={v}" for k, v in options.items() if k != "kafka.bootstrap.servers"]
    write_secret_file(path, "\n".join(lines) + "\n")
    return path


def spark_group_prefix(principal: str) -> str:
    """The `groupIdPrefix` of a principal's Spark Kafka sources: their consumers commit nothing, but carry a group
    id, and a secured broker checks it against the principal's groups (`<principal>.`, by prefix)."""
    return f"{principal}.spark"


def jaas_scram(login: Credential) -> str:
    """The JAAS line a Java Kafka client logs in with (Spark redacts it: spark.redaction.string.regex)."""
    return (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{login.user}" password="{login.password.get_secret_value()}";'
    )


def allow(
    user: str, kind: ResourceType, name: str, pattern: ResourcePatternType, operation: AclOperation
) -> AclBinding:
    """An ACL that lets `user` do `operation` on the resources `name` (and `pattern`) names, from any host."""
    return AclBinding(kind, name, pattern, f"User:{user}", "*", operation, AclPermissionType.ALLOW)


# Spark shows settings and option values in its UI, event logs and plan strings. It blanks the value of a key that
# matches the first pattern (Spark's default, and `jaas`: a login's JAAS line), and any text the second matches.
SPARK_REDACTION_KEYS = r"(?i)secret|password|token|access[.]?key|jaas"
SPARK_REDACTION = r'(?i)password="[^"]*"'
