"""enrich_clicks_realtime: the provisional, millisecond lane beside enrich_clicks."""
