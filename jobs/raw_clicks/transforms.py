"""Pure DataFrame transforms of raw_clicks (no sources, no sinks)."""

from pyspark.sql import DataFrame

TABLE_COLUMNS = (
    "event_id",
    "user_id",
    "page",
    "referrer",
    "event_time",
    "device",
    "kafka_partition",
    "kafka_offset",
)


def click_rows(decoded_clicks: DataFrame) -> DataFrame:
    """Decoded `clicks` records -> the table's rows."""
    # one row per click event (the log's position kept, so a row can be traced back to its record)
    return decoded_clicks.select(*TABLE_COLUMNS)
