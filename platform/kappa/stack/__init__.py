"""The embedded local stack: Kafka (KRaft) and Apicurio Registry, fetched from Maven Central and run on loopback."""

from kappa.stack.local import ComponentStatus, LocalStack

__all__ = ["ComponentStatus", "LocalStack"]
