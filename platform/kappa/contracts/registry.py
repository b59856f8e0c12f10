"""The schema registry through its Confluent-compatible REST API (Confluent SR, Apicurio ccompat, Karapace).

Plain HTTP with clear errors: what failed, at which URL, and what the registry said.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx

from kappa.contracts.compatibility import Compatibility
from kappa.core.errors import KappaError

_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


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


class Registry:
    """A registry client with a cache of schemas by id (ids are immutable, so the cache never goes stale)."""

    def __init__(self, url: str, timeout_s: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self._http = httpx.Client(timeout=timeout_s, headers={"Content-Type": _CONTENT_TYPE})
        self._by_id: dict[int, dict[str, Any]] = {}

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _request(self, method: str, path: str, body: Any = None) -> Any:
        url = f"{self.url}{path}"
        try:
            response = self._http.request(method, url, content=None if body is None else json.dumps(body))
        except httpx.HTTPError as exc:
            raise RegistryError(
                f"the schema registry is not reachable at {self.url} (KAPPA_REGISTRY_URL): {exc}; "
                "start it with `kappa up`, or point the setting at your registry"
            ) from None
        if response.status_code >= 400:
            try:
                detail = response.json()
            except ValueError:
                detail = {"message": response.text[:300]}
            code = detail.get("error_code")
            if response.status_code == 404 and code is None:
                # Every registry "not found" carries an error code (40401 subject, 40403 schema, ...): a bare 404
                # comes from something else at that URL, and must not read as "nothing registered".
                raise RegistryError(
                    f"no schema registry answered at {self.url} (KAPPA_REGISTRY_URL): {method} {path} got HTTP 404 "
                    "without a registry error code; is the URL complete (Apicurio: <host>/apis/ccompat/v7)?"
                )
            message = detail.get("message") or detail.get("detail") or detail
            error = UnknownSchemaIdError if code == 40403 else RegistryError
            raise error(
                f"{method} {path}: registry answered {response.status_code}: {message}", response.status_code, code
            )
        return response.json() if response.content else None

    # --- reads ----------------------------------------------------------------------------------------

    def schema_by_id(self, schema_id: int) -> dict[str, Any]:
        if schema_id not in self._by_id:
            try:
                answer = self._request("GET", f"/schemas/ids/{schema_id}")
            except RegistryError as exc:
                if exc.status == 404:
                    raise UnknownSchemaIdError(
                        f"schema id {schema_id} is not registered at {self.url}", 404, 40403
                    ) from None
                raise
            self._by_id[schema_id] = json.loads(answer["schema"])
        return self._by_id[schema_id]

    def subjects(self) -> list[str]:
        return list(self._request("GET", "/subjects"))

    def version_numbers(self, subject: str) -> list[int]:
        """The numbers of a subject's registered versions, ascending (empty when the subject does not exist)."""
        try:
            numbers = self._request("GET", f"/subjects/{subject}/versions")
        except RegistryError as exc:
            if exc.status == 404:
                return []
            raise
        return sorted(int(n) for n in numbers)

    def versions(self, subject: str) -> list[RegisteredSchema]:
        """Every registered version of a subject, oldest first (empty when the subject does not exist)."""
        result = []
        for number in self.version_numbers(subject):
            answer = self._request("GET", f"/subjects/{subject}/versions/{number}")
            schema = json.loads(answer["schema"])
            self._by_id.setdefault(answer["id"], schema)
            result.append(RegisteredSchema(subject, answer["version"], answer["id"], schema))
        return result

    def compatibility(self, subject: str) -> Compatibility | None:
        try:
            answer = self._request("GET", f"/config/{subject}")
        except RegistryError as exc:
            if exc.status == 404:
                return None
            raise
        level = answer.get("compatibilityLevel") or answer.get("compatibility")
        return Compatibility(level) if level else None

    def test_compatibility(self, subject: str, schema: dict[str, Any]) -> tuple[bool, list[str]]:
        """The registry's own verdict on a candidate schema against the subject (and its reasons)."""
        answer = self._request(
            "POST",
            f"/compatibility/subjects/{subject}/versions/latest?verbose=true",
            {"schema": json.dumps(schema), "schemaType": "AVRO"},
        )
        return bool(answer.get("is_compatible")), [str(m) for m in answer.get("messages", [])]

    # --- writes ---------------------------------------------------------------------------------------

    def set_compatibility(self, subject: str, level: Compatibility) -> None:
        try:
            self._request("PUT", f"/config/{subject}", {"compatibility": level.value})
        except RegistryError as exc:
            if exc.status != 409:
                raise
            # Another client created the subject's rule at the same moment (Apicurio answers 409): it exists now.
            self._request("PUT", f"/config/{subject}", {"compatibility": level.value})

    def register(self, subject: str, schema: dict[str, Any]) -> int:
        """Register (idempotent: the same schema returns its existing id). The registry enforces the level."""
        answer = self._request(
            "POST", f"/subjects/{subject}/versions", {"schema": json.dumps(schema), "schemaType": "AVRO"}
        )
        schema_id = int(answer["id"])
        self._by_id.setdefault(schema_id, schema)
        return schema_id

    def lookup(self, subject: str, schema: dict[str, Any]) -> int | None:
        """The id of this exact schema under the subject, or None if it is not registered there."""
        try:
            answer = self._request("POST", f"/subjects/{subject}", {"schema": json.dumps(schema), "schemaType": "AVRO"})
        except RegistryError as exc:
            if exc.status == 404:
                return None
            raise
        return int(answer["id"])
