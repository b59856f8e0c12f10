"""The platform's settings, as a Dagster resource: where the jobs Dagster launches find Kafka, the registry,
Spark, the Delta root and the checkpoints."""

import os

from dagster import ConfigurableResource
from pydantic import Field

from kappa.core.settings import SECRET_VARIABLES, KappaSettings, load_settings


class KappaResource(ConfigurableResource):  # type: ignore[type-arg]
    """KappaSettings for launched jobs. `overrides` holds KAPPA_* variables (e.g. KAPPA_KAFKA_PORT) that win over the
    Dagster process's own environment; empty, the jobs use that environment (and its defaults: the local
    stack of `kappa up`). Settings are read when a run starts, never when the code location loads."""

    # Not named `env`: Dagster reads a config mapping whose only key is `env` as an environment variable lookup.
    overrides: dict[str, str] = Field(
        default_factory=dict, description="KAPPA_* settings for the launched jobs, over the process environment"
    )

    def settings(self) -> KappaSettings:
        """The settings a launched job will see (validated here first, so a bad one fails before Spark starts)."""
        unknown = [k for k in self.overrides if not k.startswith("KAPPA_")]
        if unknown:
            raise ValueError(f"KappaResource.overrides takes KAPPA_* variables only, got {', '.join(sorted(unknown))}")
        secret = sorted(k for k in self.overrides if k in SECRET_VARIABLES)
        if secret:  # a run's resource config is kept in Dagster's run storage and shown in its UI
            raise ValueError(
                f"KappaResource.overrides may not carry secrets ({', '.join(secret)}): Dagster keeps run "
                "configuration in its storage; give the password file's path (the *_PASSWORD_FILE setting) instead"
            )
        # KAPPA_CONFIG_FILE names a file, not a field: the launched job reads it; here only the process's counts.
        fields = {k.removeprefix("KAPPA_").lower(): v for k, v in self.overrides.items() if k != "KAPPA_CONFIG_FILE"}
        return load_settings(**fields)

    def subprocess_env(self) -> dict[str, str]:
        """The environment of a launched job: the process environment with `overrides` over it."""
        return {**os.environ, **self.overrides}
