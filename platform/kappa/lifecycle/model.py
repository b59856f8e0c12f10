"""What every step of the replay protocol works on: one job version against the cluster (`Replay`), and the
error a step raises when it must not run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kappa.core.errors import KappaError
from kappa.core.settings import KappaSettings
from kappa.kafka.aliases import Alias, AliasRegistry
from kappa.runtime.binding import (
    bind_inputs,
    dataset_of,
    input_versions,
    recorded_binding,
)
from kappa.runtime.declaration import JobContext, JobSpec
from kappa.runtime.discovery import discover, get_job


class ReplayRefusedError(KappaError):
    """A step that must not run: the message says why and what to do."""


@dataclass(frozen=True)
class Replay:
    """One job version against the cluster: what every step works on."""

    job: JobSpec  # as declared
    version: int
    jobs: Mapping[str, JobSpec]  # every declared job (inputs resolve through their writers)
    aliases: Mapping[str, Alias]
    # What the version reads (derived input dataset -> version): recorded by its prepare, given by a cascade;
    # None: the live versions.
    inputs: Mapping[str, int] | None = None
    code_version: int | None = None  # the declared version whose code it runs; None: a version this code lacks

    @property
    def dataset(self) -> str:
        return dataset_of(self.job)

    @property
    def live(self) -> Alias | None:
        return self.aliases.get(self.dataset)

    @property
    def input_versions(self) -> dict[str, int]:
        return dict(self.inputs) if self.inputs is not None else input_versions(self.job, self.jobs, self.aliases)

    @property
    def bound(self) -> JobSpec:
        return bind_inputs(self.job, self.version, self.input_versions)

    def context(self, settings: KappaSettings) -> JobContext:
        """The version's checkpoint, query and group names (no Spark session needed for those)."""
        return JobContext(spark=None, settings=settings, spec=self.bound, version=self.version)  # type: ignore[arg-type]


def load(settings: KappaSettings, job_name: str, version: int | None = None) -> Replay:
    """The version as recorded (what it reads, whose code it runs), else the declared one on the live inputs."""
    job = get_job(job_name)
    version = version or job.version
    recorded = recorded_binding(settings, job_name, version)
    if recorded is not None:
        inputs: dict[str, int] | None = recorded.inputs
        code: int | None = recorded.code_version
    else:
        inputs, code = None, job.version if version == job.version else None
    return Replay(job, version, discover(), AliasRegistry(settings).all(), inputs, code)
