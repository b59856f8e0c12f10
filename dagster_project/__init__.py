"""The Dagster code location, generated from the job declarations in jobs/ (see README.md)."""
