"""Operator tools: dead-letter inspection and replay, the clickstream generator, the demo, DuckDB over Delta."""
