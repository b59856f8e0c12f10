"""Explicit partitioning by user id, identical in Python producers and in Spark's Kafka sink.

A user's events must share one partition so that per-user order is the log's order in every run. CRC-32 is
computed the same way by `zlib.crc32` and by Spark's `crc32` function, so both sides agree without a UDF.
"""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column


def partition_for(user_id: str, partitions: int) -> int:
    """The partition of a user's records: CRC-32 of the UTF-8 user id, modulo the partition count."""
    return zlib.crc32(user_id.encode("utf-8")) % partitions


def partition_column(user_id: Column, partitions: int) -> Column:
    """The same rule as `partition_for`, as a Spark column (for the Kafka sink's `partition` column)."""
    # Lazy: pyspark, only where a Spark session runs (this module is imported without one).
    from pyspark.sql import functions as F

    return F.pmod(F.crc32(user_id.cast("binary")), F.lit(partitions)).cast("int")
