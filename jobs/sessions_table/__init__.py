"""sessions_table: the compacted `sessions` topic's current state as a Delta table."""
