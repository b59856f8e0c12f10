"""The schema registry through its Confluent-compatible REST API (Confluent SR, Apicurio ccompat, Karapace).

confluent-kafka's `SchemaRegistryClient` does the HTTP; this module adds the platform's errors: what failed, at
which URL, and what the registry said, and tells a URL where no registry answers from "nothing registered".
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient, SchemaRegistryError

# The HTTP library the client was built with (httpx2 where installed, else httpx): its errors mean no answer.
from confluent_kafka.schema_registry.common._httpx_compat import httpx as client_http

from kappa.contracts.compatibility import Compatibility
from kappa.core.errors import KappaError
from kappa.core.security import Credential, registry_login
from kappa.core.settings import KappaSettings

_UNKNOWN_SCHEMA_ID = 40403  # the registry's error code for an id it never issued


class RegistryError(KappaError):
    """The registry refused a request or could not be reached."""

    def __init__(self, message: str, status: int | None = None, error_code: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.error_code = error_code


class UnknownSchemaIdError(RegistryError):
    """No schema with this id is registered."""


@dataclass(frozen=True)
class RegisteredSchema:
    subject: str
    version: int
    schema_id: int
    schema: dict[str, Any]


def value_subject(topic: str) -> str:
    return f"{topic}-value"  # TopicNameStrategy: what Confluent clients use by default


def key_subject(topic: str) -> str:
    return f"{topic}-key"


def _avro(schema: dict[str, Any]) -> Schema:
    return Schema(json.dumps(schema), "AVRO")


class Registry:
    """A registry client; schemas by id are cached (ids are immutable, so the cache never goes stale)."""

    def __init__(self, url: str, timeout_s: float = 10.0, login: Credential | None = None) -> None:
        self.url = url.rstrip("/")
        # No retries: a registry that is down is reported at once, with what to do (the jobs retry on their own).
        config: dict[str, Any] = {"url": self.url, "timeout": timeout_s, "max.retries": 0}
        if login is not None:  # HTTP basic authentication (a secured registry refuses anonymous requests)
            config["basic.auth.user.info"] = f"{login.user}:{login.password.get_secret_value()}"
        self._login = login.user if login is not None else None
        self._client = SchemaRegistryClient(config)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @contextmanager
    def _asking(self, request: str) -> Iterator[None]:
        """The client's failures as RegistryErrors that name the request, the URL and the registry's answer."""
        try:
            yield
        except client_http.HTTPError as exc:
            raise RegistryError(
                f"the schema registry is not reachable at {self.url} (KAPPA_REGISTRY_URL): {exc}; "
                "start it with `kappa up`, or point the setting at your registry"
            ) from None
        except SchemaRegistryError as exc:
            code = exc.error_code if exc.error_code not in (None, -1) else None  # -1: the answer was not JSON
            if exc.http_status_code == 404 and code is None:
                # Every registry "not found" carries an error code (40401 subject, 40403 schema, ...): a bare 404
                # comes from something else at that URL, and must not read as "nothing registered".
                raise RegistryError(
                    f"no schema registry answered at {self.url} (KAPPA_REGISTRY_URL): {request} got HTTP 404 "
                    "without a registry error code; is the URL complete (Apicurio: <host>/apis/ccompat/v7)?"
                ) from None
            if exc.http_status_code in (401, 403):
                who = f"as {self._login}" if self._login else "without a login (anonymous)"
                verdict = "refused the login" if exc.http_status_code == 401 else "does not allow it"
                raise RegistryError(
                    f"{request} {who}: the registry {verdict} (HTTP {exc.http_status_code}); "
                    "KAPPA_REGISTRY_USER and KAPPA_REGISTRY_PASSWORD_FILE name the login (README, Security)",
                    exc.http_status_code,
                    code,
                ) from None
            error = UnknownSchemaIdError if code == _UNKNOWN_SCHEMA_ID else RegistryError
            raise error(
                f"{request}: registry answered {exc.http_status_code}: {exc.error_message}", exc.http_status_code, code
            ) from None

    # --- reads ----------------------------------------------------------------------------------------

    def schema_by_id(self, schema_id: int) -> dict[str, Any]:
        try:
            with self._asking(f"GET /schemas/ids/{schema_id}"):
                found = self._client.get_schema(schema_id)
        except RegistryError as exc:
            if exc.status == 404:
                raise UnknownSchemaIdError(
                    f"schema id {schema_id} is not registered at {self.url}", 404, _UNKNOWN_SCHEMA_ID
                ) from None
            raise
        return dict(json.loads(found.schema_str or "null"))

    def subjects(self) -> list[str]:
        with self._asking("GET /subjects"):
            return list(self._client.get_subjects())

    def version_numbers(self, subject: str) -> list[int]:
        """The numbers of a subject's registered versions, ascending (empty when the subject does not exist)."""
        try:
            with self._asking(f"GET /subjects/{subject}/versions"):
                numbers = self._client.get_versions(subject)
        except RegistryError as exc:
            if exc.status == 404:
                return []
            raise
        return sorted(int(n) for n in numbers)

    def versions(self, subject: str) -> list[RegisteredSchema]:
        """Every registered version of a subject, oldest first (empty when the subject does not exist)."""
        result = []
        for number in self.version_numbers(subject):
            with self._asking(f"GET /subjects/{subject}/versions/{number}"):
                found = self._client.get_version(subject, number)
            if found.schema_id is None or found.version is None:
                raise RegistryError(f"GET /subjects/{subject}/versions/{number}: the answer has no id or version")
            schema = json.loads(found.schema.schema_str or "null")
            result.append(RegisteredSchema(subject, found.version, found.schema_id, schema))
        return result

    def compatibility(self, subject: str) -> Compatibility | None:
        try:
            with self._asking(f"GET /config/{subject}"):
                config = self._client.get_config(subject)
        except RegistryError as exc:
            if exc.status == 404:
                return None
            raise
        level = config.compatibility_level or config.compatibility
        return Compatibility(level.value) if level else None

    def test_compatibility(self, subject: str, schema: dict[str, Any]) -> bool:
        """The registry's own verdict on a candidate schema against the subject's latest version."""
        with self._asking(f"POST /compatibility/subjects/{subject}/versions/latest"):
            return bool(self._client.test_compatibility(subject, _avro(schema)))

    # --- writes ---------------------------------------------------------------------------------------

    def set_compatibility(self, subject: str, level: Compatibility) -> None:
        try:
            with self._asking(f"PUT /config/{subject}"):
                self._client.set_compatibility(subject, level.value)
        except RegistryError as exc:
            if exc.status != 409:
                raise
            # Another client created the subject's rule at the same moment (Apicurio answers 409): it exists now.
            with self._asking(f"PUT /config/{subject}"):
                self._client.set_compatibility(subject, level.value)

    def register(self, subject: str, schema: dict[str, Any]) -> int:
        """Register (idempotent: the same schema returns its existing id). The registry enforces the level."""
        with self._asking(f"POST /subjects/{subject}/versions"):
            return int(self._client.register_schema(subject, _avro(schema)))

    def lookup(self, subject: str, schema: dict[str, Any]) -> int | None:
        """The id of this exact schema under the subject, or None if it is not registered there."""
        try:
            with self._asking(f"POST /subjects/{subject}"):
                found = self._client.lookup_schema(subject, _avro(schema))
        except RegistryError as exc:
            if exc.status == 404:
                return None
            raise
        return found.schema_id


def registry_of(settings: KappaSettings, timeout_s: float = 10.0) -> Registry:
    """A client of the settings' registry, logged in as their registry user on a secured platform."""
    return Registry(settings.registry, timeout_s=timeout_s, login=registry_login(settings))
