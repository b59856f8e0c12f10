"""page_stats: enriched clicks as a Delta table of statistics per page and event-time hour."""
