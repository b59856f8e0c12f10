"""Kafka from Python: clients with the platform's defaults, topic administration, partitioning, the alias registry."""
