"""kappa: the Kappa-architecture platform library, in layers (docs/architecture.md): core, stack, contracts,
kafka, spark, operators, runtime, lifecycle and ops, and the cli on top."""

__version__ = "0.1.0"
