"""raw_clicks: the `clicks` topic as a Delta table, one row per click event."""
