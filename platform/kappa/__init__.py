"""kappa: the Kappa-architecture platform library (settings, stack, topics, Spark, CLI)."""

__version__ = "0.1.0"
