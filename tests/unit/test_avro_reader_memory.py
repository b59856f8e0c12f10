"""Decoding Avro in Spark keeps no schema alive once its query is done (issue 40: the job host's heap after GC grew
3 to 5 MB a minute in the soak, with Avro's parsed schemas).

Spark's from_avro parses its schema again in every task of every query, and Avro 1.12's fast reader caches a
reader per schema object in a JVM-wide map whose entries hold their own weak keys (AVRO-4253), so every parsed
schema stayed. The platform's Spark JVMs run with the fast reader off. Here, on the shared session's JVM: the
same decoding repeated leaves the live record schemas where they were; with the fast reader switched back on for a
moment, each round leaves its tasks' schemas behind (the measurement sees the leak when there is one).
"""

from __future__ import annotations

import io
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import fastavro
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from kappa.stack.java import spark_java_path

SCHEMA = {"type": "record", "name": "Probe", "namespace": "kappa.test",
          "fields": [{"name": "id", "type": "string"}, {"name": "n", "type": "long"}]}  # fmt: skip
WARM_UP = 12  # Spark keeps the last few queries' plans (with their schemas) a while: measured from after them
ROUNDS = 24
PARTITIONS = 2
_LINE = re.compile(r"^\s*\d+:\s+(\d+)\s+\d+\s+(\S+)")


def live_record_schemas(spark: SparkSession) -> int:
    """Live instances of Avro's record schema in the session's JVM, after the full collection a class histogram
    makes."""
    pid = spark._jvm.ProcessHandle.current().pid()  # type: ignore[union-attr]
    jcmd = str(Path(spark_java_path()).with_name("jcmd"))
    out = subprocess.run([jcmd, str(pid), "GC.class_histogram"], capture_output=True, text=True, timeout=60).stdout
    counts = {m[2]: int(m[1]) for m in map(_LINE.match, out.splitlines()) if m}
    return counts.get("org.apache.avro.Schema$RecordSchema", 0)


def decode_rounds(spark: SparkSession, rounds: int) -> None:
    """The same decoding, planned and run `rounds` times (as a streaming query plans each micro-batch)."""
    rows: list[Any] = []
    for n in range(40):
        body = io.BytesIO()
        fastavro.schemaless_writer(body, SCHEMA, {"id": f"r{n}", "n": n})
        rows.append((body.getvalue(),))
    frame = spark.createDataFrame(rows, "value binary").repartition(PARTITIONS)
    for _ in range(rounds):
        decoded = frame.select(F.call_function("from_avro", F.col("value"), F.lit(json.dumps(SCHEMA))).alias("r"))
        assert decoded.select(F.sum("r.n")).first()[0] == sum(range(40))  # type: ignore[index]


def test_decoding_again_and_again_keeps_no_parsed_schema_alive(spark: SparkSession) -> None:
    avro = spark._jvm.org.apache.avro.generic.GenericData.get()  # type: ignore[union-attr]
    assert not avro.isFastReaderEnabled()  # -Dorg.apache.avro.fastread=false, from kappa.spark.session
    decode_rounds(spark, WARM_UP)
    before = live_record_schemas(spark)
    decode_rounds(spark, ROUNDS)
    # Measured: 4 -> 18 in the first 12 rounds, then 14 to 18 for 72 more.
    assert live_record_schemas(spark) - before < ROUNDS // 2

    avro.setFastReaderEnabled(True)  # the JVM's default: the leak the setting prevents
    try:
        before = live_record_schemas(spark)
        decode_rounds(spark, ROUNDS)
        # Measured: about two a round (a task's schema per partition), kept for good: 16 -> 36 -> 72 -> 94.
        assert live_record_schemas(spark) - before >= ROUNDS
    finally:
        avro.setFastReaderEnabled(False)
