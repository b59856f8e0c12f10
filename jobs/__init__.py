"""The platform's jobs: one package per job, plus the catalog of the topics they share."""
