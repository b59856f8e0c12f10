"""Operator tools: dead-letter inspection and replay, producing a file into a topic, job scaffolding, DuckDB over
Delta."""
