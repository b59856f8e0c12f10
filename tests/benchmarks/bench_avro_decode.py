"""Spark decoding Confluent Avro from Kafka (issue: data contracts, performance).

Three topics with the same click events:
  plain   Avro bodies without a header, decoded by plain `from_avro` with the one schema (the baseline)
  single  Confluent-framed, one writer schema, decoded by kappa's `decode_topic`
  mixed   Confluent-framed, three writer versions interleaved, decoded by `decode_topic` into the reader schema
plus `raw`: the Kafka read alone (no decoding), the ceiling of the pipeline.
Each variant reads every record with `availableNow` into Spark's no-op sink; best of 3 runs.
"""

from __future__ import annotations

import argparse
import copy
import io
import json
import shutil
from typing import Any

from fastavro import parse_schema, schemaless_writer
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro

from jobs.catalog import CLICKS
from jobs.clickstream.generator import clicks
from kappa.contracts.registry import registry_of, value_subject
from kappa.contracts.schema_files import topic_value_schema
from kappa.contracts.topic_declarations import Cleanup, Topic
from kappa.contracts.wire_format import frame
from kappa.core.settings import KappaSettings
from kappa.kafka.clients import Outgoing, admin_client, produce_all
from kappa.kafka.topic_admin import apply
from kappa.spark.session import get_spark
from kappa.spark.topic_io import decode_topic, kafka_source, writer_schemas
from tests.benchmarks.common import bench_stack, best_of, report, run_main, timed

PARTITIONS = 4


def writer_versions(reader: dict[str, Any]) -> list[dict[str, Any]]:
    """v1 without `device`, v2 = the reader, v3 with an extra optional field the reader does not know."""
    v1 = copy.deepcopy(reader)
    v1["fields"] = [f for f in v1["fields"] if f["name"] != "device"]
    v3 = copy.deepcopy(reader)
    v3["fields"].append({"name": "campaign", "type": ["null", "string"], "default": None, "doc": "Campaign."})
    return [v1, reader, v3]


def prepare(settings: KappaSettings, events: int) -> tuple[dict[str, Topic], dict[str, Any], dict[int, Any]]:
    reader = topic_value_schema(settings.schemas_path, CLICKS)
    topics = {
        name: Topic(f"bench-{name}", partitions=PARTITIONS, cleanup=Cleanup.DELETE, value_schema=CLICKS.value_schema)
        for name in ("plain", "single", "mixed")
    }
    apply(admin_client(settings), list(topics.values()))
    versions = writer_versions(reader)
    parsed = [parse_schema(v) for v in versions]
    with registry_of(settings) as registry:
        ids = [registry.register(value_subject(topics["mixed"].name), v) for v in versions]
        single_id = registry.register(value_subject(topics["single"].name), reader)
        mixed_writers = writer_schemas(registry, topics["mixed"])
    plain: list[Outgoing] = []
    single: list[Outgoing] = []
    mixed: list[Outgoing] = []
    for i, click in enumerate(clicks(events, users=2000, seed=5)):
        record = click.as_avro()
        key = click.event_id.encode()
        body = _encode_fast(parsed[1], record)
        plain.append(Outgoing(key, body, partition=i % PARTITIONS))
        single.append(Outgoing(key, frame(single_id, body), partition=i % PARTITIONS))
        version = i % 3
        mixed_body = body if version == 1 else _encode_fast(parsed[version], record | {"campaign": "spring"})
        mixed.append(Outgoing(key, frame(ids[version], mixed_body), partition=i % PARTITIONS))
    for name, records in (("plain", plain), ("single", single), ("mixed", mixed)):
        produce_all(settings, topics[name].name, records)
    return topics, reader, mixed_writers | {single_id: reader}


def _encode_fast(parsed: Any, record: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    schemaless_writer(buffer, parsed, record)
    return buffer.getvalue()


def run_query(spark: SparkSession, df: DataFrame, checkpoint: str) -> None:
    shutil.rmtree(checkpoint, ignore_errors=True)
    query = df.writeStream.format("noop").option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    query.awaitTermination()
    if query.exception():
        raise RuntimeError(query.exception())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    with bench_stack() as settings:
        print(f"producing {args.events:,} events to each of 3 topics ...")
        topics, reader, writers = prepare(settings, args.events)
        spark = get_spark(settings, "bench-avro-decode")
        reader_json = json.dumps(reader)
        checkpoint = f"{settings.checkpoint_root}/bench-avro"

        def source(name: str) -> DataFrame:
            return kafka_source(spark, settings, topics[name])

        def decoded(name: str) -> DataFrame:
            return decode_topic(source(name), reader, writers, "bench", 1).records

        variants = {
            "raw (Kafka read only)": lambda: source("single").select("key", "value", "partition", "offset"),
            "plain from_avro, no header (baseline)": lambda: (
                source("plain")
                .select("key", from_avro(F.col("value"), reader_json).alias("r"), "partition", "offset")
                .select("key", "r.*", "partition", "offset")
            ),
            "kappa decode, 1 writer schema": lambda: decoded("single"),
            "kappa decode, 3 mixed writer schemas": lambda: decoded("mixed"),
        }
        rows = []
        for label, build in variants.items():
            run_query(spark, build(), checkpoint)  # warm-up: JIT, connections, metadata
            seconds = best_of(args.runs, lambda build=build: timed(lambda: run_query(spark, build(), checkpoint)))
            rows.append({"variant": label, "events": args.events, "seconds": round(seconds, 2),
                         "events_per_s": args.events / seconds, "per_core": args.events / seconds / 2})  # fmt: skip
        baseline = rows[1]["events_per_s"]
        for row in rows:
            row["vs_baseline"] = f"{(baseline / row['events_per_s'] - 1) * 100:+.0f}% time"
        spark.stop()
    report("avro_decode", rows)


if __name__ == "__main__":
    run_main(main)
