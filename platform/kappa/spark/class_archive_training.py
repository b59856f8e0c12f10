"""The workload that trains Spark's class archive (kappa.spark.class_archive): run alone, as
`python -m kappa.spark.class_archive_training <archive> <work folder>`, by `kappa setup`; its JVM writes the
archive of every class it loaded when it exits."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
from delta.tables import DeltaTable
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro, to_avro

from kappa.core.settings import load_settings
from kappa.spark.session import get_spark


def train(archive: Path, work: Path) -> None:
    """Touch what a job's driver loads: batch and streaming SQL, the state store and a pandas-stateful
    function, Avro, Delta MERGE, and the Kafka source (planned only: no broker is needed)."""
    settings = load_settings(
        spark_class_archive=False,
        spark_driver_java_options=f"-XX:ArchiveClassesAtExit={archive}",
        checkpoint_root=str(work / "checkpoints"),
        delta_root=str(work / "delta"),
    )
    spark = get_spark(settings, "kappa-class-archive")
    rows = spark.range(2000).select(
        F.col("id"), F.format_string("user-%03d", F.col("id") % 50).alias("user_id"), F.current_timestamp().alias("at")
    )
    avro = rows.select(to_avro(F.struct("id", "user_id")).alias("value"))
    schema = '{"type":"record","name":"R","fields":[{"name":"id","type":"long"},{"name":"user_id","type":"string"}]}'
    avro.select(from_avro("value", schema, {"mode": "PERMISSIVE"}).alias("r")).select("r.*").count()
    table = str(work / "delta" / "t")
    rows.write.format("delta").save(table)
    DeltaTable.forPath(spark, table).alias("t").merge(rows.alias("s"), "t.id <=> s.id").whenMatchedUpdateAll() \
        .whenNotMatchedInsertAll().execute()  # fmt: skip
    spark.read.format("kafka").option("kafka.bootstrap.servers", "127.0.0.1:1").option("subscribe", "t").load()

    def count(key: tuple[str], frames, state):  # type: ignore[no-untyped-def]
        total = sum(len(f) for f in frames) + (state.get[0] if state.exists else 0)
        state.update((total,))
        yield pd.DataFrame({"user_id": [key[0]], "n": [total]})

    source = str(work / "source")
    rows.select("user_id", "id").repartition(2).write.parquet(source)
    stream = (
        spark.readStream.schema("user_id string, id long").option("maxFilesPerTrigger", 1).parquet(source)
        .groupBy("user_id")
        .applyInPandasWithState(count, "user_id string, n long", "n long", "Update", "NoTimeout")
    )  # fmt: skip

    def merge(batch, _batch_id: int) -> None:  # type: ignore[no-untyped-def]
        target = str(work / "delta" / "counts")
        if not DeltaTable.isDeltaTable(spark, target):
            batch.limit(0).write.format("delta").save(target)
        DeltaTable.forPath(spark, target).alias("t").merge(batch.alias("s"), "t.user_id = s.user_id") \
            .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()  # fmt: skip

    query = (
        stream.writeStream.foreachBatch(merge).outputMode("update")
        .option("checkpointLocation", str(work / "checkpoints" / "counts"))
        .trigger(availableNow=True).start()
    )  # fmt: skip
    query.awaitTermination()
    spark.stop()  # the JVM exits when this process does, and writes the archive then


if __name__ == "__main__":
    train(Path(sys.argv[1]), Path(sys.argv[2]))
