"""The platform's settings, as a Dagster resource: where the jobs Dagster launches find Kafka, the registry,
Spark, the Delta root and the checkpoints."""

import os

from dagster import ConfigurableResource
from pydantic import Field

from kappa.settings import KappaSettings, load_settings


class KappaResource(ConfigurableResource):  # type: ignore[type-arg]
    """KappaSettings for launched jobs. `env` holds KAPPA_* variables (e.g. KAPPA_KAFKA_PORT) that win over the
    Dagster process's own environment; empty, the jobs use that environment (and its defaults: the local
    stack of `kappa up`). Settings are read when a run starts, never when the code location loads."""

    env: dict[str, str] = Field(
        default_factory=dict, description="KAPPA_* settings for the launched jobs, over the process environment"
    )

    def settings(self) -> KappaSettings:
        """The settings a launched job will see (validated here first, so a bad one fails before Spark starts)."""
        unknown = [k for k in self.env if not k.startswith("KAPPA_")]
        if unknown:
            raise ValueError(f"KappaResource.env takes KAPPA_* variables only, got {', '.join(sorted(unknown))}")
        overrides = {k.removeprefix("KAPPA_").lower(): v for k, v in self.env.items() if k != "KAPPA_CONFIG_FILE"}
        return load_settings(**overrides)

    def subprocess_env(self) -> dict[str, str]:
        """The environment of a launched job: the process environment with `env` over it."""
        return {**os.environ, **self.env}
