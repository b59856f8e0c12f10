"""The secured profile's pure parts: secret files, logins and their scoping, redaction, the stack's certificates,
and each job version's access derived from its declaration (checked against names written out by hand)."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtensionOID

from dagster_project.resources import KappaResource
from jobs.enrich_clicks.declaration import JOB as ENRICH
from jobs.page_stats.declaration import JOB as PAGE_STATS
from kappa.core.errors import SettingsError
from kappa.core.security import (
    SPARK_REDACTION,
    SPARK_REDACTION_KEYS,
    Credential,
    as_principal,
    known_secrets,
    librdkafka_config,
    read_secret_file,
    redact,
    spark_kafka_options,
    write_secret_file,
)
from kappa.core.settings import KappaSettings, Security, load_settings
from kappa.kafka.acls import Access, describe_acl
from kappa.runtime.access import version_access, version_principal
from kappa.runtime.binding import bind_inputs
from kappa.stack.certificates import ensure_certificates


def secured(tmp_path: Path, **overrides: object) -> KappaSettings:
    return load_settings(state_dir=tmp_path, security=Security.SASL_SSL, **overrides)


def test_a_secret_file_is_its_owners_alone_and_others_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "secrets" / "kafka" / "admin.password"
    write_secret_file(path, "s3cret-value")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert read_secret_file(path, "x").get_secret_value() == "s3cret-value"

    os.chmod(path, 0o644)
    with pytest.raises(SettingsError, match=r"may be read by others \(mode 0644\): `chmod 600 "):
        read_secret_file(path, "the admin's password")
    with pytest.raises(SettingsError, match="no such file"):
        read_secret_file(tmp_path / "absent", "x")
    empty = tmp_path / "empty"
    write_secret_file(empty, "  \n")
    with pytest.raises(SettingsError, match="is empty"):
        read_secret_file(empty, "x")


def test_a_credential_never_shows_its_password() -> None:
    login = Credential("admin", "hunter2-hunter2")  # type: ignore[arg-type]
    assert "hunter2" not in repr(login)
    assert "hunter2" not in str(login)


def test_clients_log_in_with_scram_over_tls_only_when_secured(tmp_path: Path) -> None:
    plain = load_settings(state_dir=tmp_path)
    assert librdkafka_config(plain) == {"bootstrap.servers": "127.0.0.1:9092"}
    assert spark_kafka_options(plain) == {"kafka.bootstrap.servers": "127.0.0.1:9092"}

    settings = secured(tmp_path, kafka_password="pw-of-the-admin")
    (settings.secrets_path).mkdir(parents=True)
    (settings.secrets_path / "ca.pem").write_text("a CA")
    config = librdkafka_config(settings)
    assert config["security.protocol"] == "SASL_SSL"
    assert config["sasl.mechanism"] == "SCRAM-SHA-512"
    assert (config["sasl.username"], config["sasl.password"]) == ("admin", "pw-of-the-admin")
    assert config["ssl.ca.location"] == str(settings.secrets_path / "ca.pem")
    options = spark_kafka_options(settings)
    assert options["kafka.security.protocol"] == "SASL_SSL"
    assert 'username="admin" password="pw-of-the-admin"' in options["kafka.sasl.jaas.config"]


def test_a_job_runs_as_its_own_principal_and_reads_the_registry_read_only(tmp_path: Path) -> None:
    plain = load_settings(state_dir=tmp_path)
    assert as_principal(plain, "kappa.raw_clicks.v1") is plain

    settings = secured(tmp_path, kafka_password="the-admins-password", registry_password="the-registry-admins")
    job = as_principal(settings, "kappa.raw_clicks.v1")
    assert job.kafka_user == "kappa.raw_clicks.v1"
    assert job.kafka_password is None
    assert job.kafka_password_file == settings.secrets_path / "kafka" / "kappa.raw_clicks.v1.password"
    assert (job.registry_user, job.registry_password) == ("kappa-reader", None)
    assert job.registry_password_file == settings.secrets_path / "registry" / "kappa-reader.password"


def test_redaction_blanks_every_known_secret_and_spark_patterns_catch_the_jaas_line(tmp_path: Path) -> None:
    settings = secured(tmp_path, kafka_password="given-in-the-environment")
    write_secret_file(settings.secrets_path / "kafka" / "kappa.x.v1.password", "a-job-password-1234")
    found = known_secrets(settings)
    assert set(found) == {"given-in-the-environment", "a-job-password-1234"}
    text = "login a-job-password-1234 failed; env given-in-the-environment"
    assert redact(text, found) == "login ***** failed; env *****"

    (settings.secrets_path / "ca.pem").write_text("a CA")
    jaas = spark_kafka_options(settings)["kafka.sasl.jaas.config"]
    assert re.sub(SPARK_REDACTION, "x", jaas).count("given-in-the-environment") == 0
    assert re.search(SPARK_REDACTION_KEYS, "kafka.sasl.jaas.config")  # Spark blanks the option's value by key
    assert not re.search(SPARK_REDACTION_KEYS, "kafka.bootstrap.servers")


def test_the_stacks_certificate_is_signed_by_its_ca_and_names_the_loopback_address(tmp_path: Path) -> None:
    paths = ensure_certificates(tmp_path)
    ca = x509.load_pem_x509_certificate(paths.ca.read_bytes())
    leaf = x509.load_pem_x509_certificates(paths.broker_store.read_bytes())[0]
    leaf.verify_directly_issued_by(ca)  # raises if the CA did not sign it
    names = leaf.extensions.get_extension_for_oid(ExtensionOID.SUBJECT_ALTERNATIVE_NAME).value
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert b"PRIVATE KEY" in paths.broker_store.read_bytes()
    assert stat.S_IMODE(paths.broker_store.stat().st_mode) == 0o600
    assert ensure_certificates(tmp_path) == paths  # kept: the clients' trust holds across restarts
    assert x509.load_pem_x509_certificate(paths.ca.read_bytes()) == ca


def test_a_job_versions_access_is_what_its_declaration_reads_and_writes() -> None:
    bound = bind_inputs(ENRICH, 3, {})  # enrich_clicks reads two source topics
    access = version_access(bound, 3)
    assert access.principal == "kappa.enrich_clicks.v3" == version_principal("enrich_clicks", 3)
    assert set(access.reads) == {"clicks", "user_profiles", "kappa.aliases"}  # where aliases point: read only
    assert set(access.writes) == {"enriched_clicks.v3", "enriched_clicks.v3.late", "clicks.dlq", "user_profiles.dlq"}
    assert access.groups == ("kappa.enrich_clicks.v3",)
    assert access.group_prefixes == ("kappa.enrich_clicks.v3.",)  # ends with a dot: v3 is not v30's prefix

    view = version_access(bind_inputs(PAGE_STATS, 2, {"enriched_clicks": 7}), 2)
    # the version of its input it is bound to, not the live one
    assert set(view.reads) == {"enriched_clicks.v7", "kappa.aliases"}
    assert set(view.writes) == {"enriched_clicks.v7.dlq", "delta.page_stats.v2.late"}  # a table: its side topics


def test_an_access_is_allow_acls_for_exactly_its_resources() -> None:
    access = Access("kappa.j.v1", reads=("a", "a"), writes=("b",), groups=("kappa.j.v1",),
                    group_prefixes=("kappa.j.v1.",), transactional_ids=("t",))  # fmt: skip
    described = sorted(describe_acl(b) for b in access.bindings())
    assert described == ["READ group kappa.j.v1", "READ group kappa.j.v1. (prefix)", "READ topic a",
                         "WRITE topic b", "WRITE transactional id t"]  # fmt: skip
    assert {b.principal for b in access.bindings()} == {"User:kappa.j.v1"}
    assert {b.permission_type.name for b in access.bindings()} == {"ALLOW"}  # type: ignore[union-attr]


def test_dagster_refuses_a_secret_in_its_run_configuration() -> None:
    with pytest.raises(ValueError, match=r"may not carry secrets \(KAPPA_KAFKA_PASSWORD\)"):
        KappaResource(overrides={"KAPPA_KAFKA_PASSWORD": "x"}).settings()
