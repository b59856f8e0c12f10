"""sessionize: per-user event-time sessions, decided on the data in per-user log order (deterministic)."""
