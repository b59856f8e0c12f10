"""The platform's jobs: one package per job, plus the catalog of the topics they share and `clickstream`, their
sample data and demo (a package without a declaration, so not a job)."""
