"""The environment of a subprocess the tests or benchmarks start: the settings that reach it are KAPPA_* alone."""

from __future__ import annotations

import os

from kappa.core.settings import KappaSettings


def stack_env(stack: KappaSettings, **extra: str) -> dict[str, str]:
    """The environment a subprocess needs to reach the session's stack (settings only from KAPPA_*)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAPPA_")}
    env.update(
        KAPPA_KAFKA_PORT=str(stack.kafka_port),
        KAPPA_CONTROLLER_PORT=str(stack.controller_port),
        KAPPA_REGISTRY_PORT=str(stack.registry_port),
        KAPPA_STACK_DIR=str(stack.stack_path),
        KAPPA_SPARK_SHUFFLE_PARTITIONS=str(stack.spark_shuffle_partitions),
        KAPPA_SPARK_DRIVER_JAVA_OPTIONS=stack.spark_driver_java_options,
    )
    # The caller's JVM artifacts when it chose them (an operators jar built from a branch, for an A/B): dropped with
    # the other KAPPA_ variables, everything started ran the default ones. Only then: the stack's own jars folder
    # may be an empty one under a test's state folder.
    if "KAPPA_JARS_DIR" in os.environ:
        env["KAPPA_JARS_DIR"] = str(stack.jars_path)  # resolved: a subprocess may start in another folder
    env.update(extra)
    return env
