"""Read and write declared topics from Spark: one call each, Confluent Avro decoded and encoded in the JVM.

    decoded = read_topic(spark, settings, CLICKS, job="raw_clicks", job_version=1)
    decoded.records       # key, the reader schema's fields, kafka_partition, kafka_offset, kafka_timestamp
    decoded.dead_letters  # key, value, headers: ready for the Kafka sink of clicks.dlq
    write_topic(rows, settings, ENRICHED_CLICKS, key=F.col("event_id"))  # a DataStreamWriter

Every input row lands in exactly one of the two (tombstones, null values, are neither: see `tombstones`).

Data contracts: `read_topic` applies the row-level expectations of the topic's dataset suite
(`schemas/expectations/<dataset>.json`, kappa.quality) while it splits: a record that decodes but breaks the
contract is a dead letter of kind `contract-violation`, its `kappa.contract.broken` header naming the broken
expectations. The check is one Spark expression in the same projection as the decoding: no Python per record.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.readwriter import DataStreamWriter

from kappa.avro.registry import Registry
from kappa.avro.schemas import topic_value_schema
from kappa.avro.spark import DEAD_LETTER, RECORD, decode_confluent, encode_confluent, struct_for
from kappa.deadletter import (
    H_CONTRACT_BROKEN,
    H_CONTRACT_SUITE,
    H_JOB,
    H_JOB_VERSION,
    H_KIND,
    H_MESSAGE,
    H_SOURCE_OFFSET,
    H_SOURCE_PARTITION,
    H_SOURCE_TIMESTAMP,
    H_SOURCE_TOPIC,
    H_TIME,
    DeadLetterKind,
    dlq_topic,
)
from kappa.errors import KappaError
from kappa.quality import RowContract, row_contract, suite_for
from kappa.settings import KappaSettings
from kappa.topics import Topic

KAFKA_META = ("kafka_partition", "kafka_offset", "kafka_timestamp")


@dataclass(frozen=True)
class DecodedTopic:
    records: DataFrame
    dead_letters: DataFrame
    tombstones: DataFrame  # key, kafka metadata: deletes in a compacted topic


def value_schema(settings: KappaSettings, topic: Topic) -> dict[str, Any]:
    return topic_value_schema(settings.schemas_path, topic)


def writer_schemas(registry: Registry, topic: Topic) -> dict[int, dict[str, Any]]:
    """Every schema version registered for the topic's values, by id: what its records may be written with."""
    return {v.schema_id: v.schema for v in registry.versions(topic.value_subject)}


def kafka_options(settings: KappaSettings) -> dict[str, str]:
    return {"kafka.bootstrap.servers": settings.bootstrap}


def kafka_source(
    spark: SparkSession,
    settings: KappaSettings,
    topic: Topic,
    streaming: bool = True,
    starting_offsets: str = "earliest",
    max_offsets_per_trigger: int | None = None,
    starting_timestamp_ms: int | None = None,
) -> DataFrame:
    """Raw Kafka rows of a topic. `starting_offsets="timestamp"` starts at `starting_timestamp_ms` (record time)."""
    reader: Any = spark.readStream if streaming else spark.read
    reader = reader.format("kafka").options(**kafka_options(settings)).option("subscribe", topic.name)
    if starting_offsets == "timestamp":
        if starting_timestamp_ms is None:
            raise KappaError("starting at a timestamp needs the timestamp")
        reader = reader.option("startingTimestamp", str(starting_timestamp_ms))
    else:
        reader = reader.option("startingOffsets", starting_offsets)
    # A retained log never loses data silently: fail if offsets vanished (e.g. retention overtook the job).
    reader = reader.option("failOnDataLoss", "true")
    if max_offsets_per_trigger and streaming:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    return reader.load()  # type: ignore[no-any-return]


def decode_topic(
    raw: DataFrame,
    reader_schema: dict[str, Any],
    writers: dict[int, dict[str, Any]],
    job: str,
    job_version: int,
    with_raw: bool = False,
    contract: RowContract | None = None,
    key_field: str | None = None,
    deletes: bool = False,
) -> DecodedTopic:
    """Split raw Kafka rows into decoded records, dead letters and tombstones.

    `with_raw`: records also carry `kafka_topic` and their original bytes (`raw_value`), for side outputs.
    `contract`: decoded records breaking it are dead letters too (kind `contract-violation`), not records.
    `key_field`: the record field the Kafka key must equal (as UTF-8 text); any other key is a dead letter
    (kind `key-mismatch`): compaction keeps one value per key, so a wrong key would keep the wrong identity.
    `deletes`: null values delete their key (the `tombstones` frame); otherwise they are dead letters.
    """
    decoded = decode_confluent(raw, reader_schema, writers, deletes=deletes)
    field_names = [f["name"] for f in reader_schema["fields"]]
    keeps = F.col(RECORD).isNotNull()
    if key_field is not None:
        if key_field not in field_names:
            raise KappaError(f"key field {key_field!r} is not a field of the schema (fields: {field_names})")
        declared = F.col(RECORD).getField(key_field).cast("string")
        key_text = F.col("key").cast("string")  # byte for byte: invalid UTF-8 never equals a decoded field
        mismatch = F.col(RECORD).isNotNull() & ~key_text.eqNullSafe(declared)
        keeps = keeps & ~mismatch
        shown_key = (
            F.when(F.col("key").isNull(), F.lit("null"))
            .when(F.is_valid_utf8(key_text), F.concat(F.lit("'"), key_text, F.lit("'")))
            .otherwise(F.concat(F.lit("0x"), F.hex(F.col("key"))))
        )
        shown_field = F.coalesce(F.concat(F.lit("'"), declared, F.lit("'")), F.lit("null"))
        why = F.concat(F.lit("key "), shown_key, F.lit(f" is not the record's {key_field} "), shown_field)
        wrong_key = F.struct(F.lit(DeadLetterKind.KEY_MISMATCH.value).alias("kind"), why.alias("message"))
        decoded = decoded.withColumn(DEAD_LETTER, F.when(mismatch, wrong_key).otherwise(F.col(DEAD_LETTER)))
    broken: Column = F.lit(None).cast("string")
    if contract is not None and contract.expectations:
        contract.require(field_names)
        passes = contract.passes(F.col(RECORD).getField)
        breaks = keeps & ~passes  # one reason per record: a wrong key is reported as that
        keeps = keeps & passes
        # Only a failing row pays for the names (the array is built under the `when`).
        broken = F.when(breaks, F.array_join(contract.violations(F.col(RECORD).getField), ", "))
        violation = F.struct(
            F.lit(DeadLetterKind.CONTRACT_VIOLATION.value).alias("kind"),
            F.concat(F.lit(f"breaks its data contract {contract.suite}: "), broken).alias("message"),
        )
        decoded = decoded.withColumn(DEAD_LETTER, F.when(breaks, violation).otherwise(F.col(DEAD_LETTER)))
    meta = [
        F.col("partition").alias("kafka_partition"),
        F.col("offset").alias("kafka_offset"),
        F.col("timestamp").alias("kafka_timestamp"),
    ]
    # one row per decoded record that keeps its contract
    raw_columns = [F.col("topic").alias("kafka_topic"), F.col("value").alias("raw_value")] if with_raw else []
    records = decoded.where(keeps).select(
        F.col("key").cast("string").alias("key"),
        *[F.col(f"{RECORD}.{n}").alias(n) for n in field_names],
        *meta,
        *raw_columns,
    )
    # one row per record that could not be decoded or broke its contract, original bytes untouched
    headers = dead_letter_headers(job, job_version)
    if contract is not None and contract.expectations:
        named = F.array(kafka_header(H_CONTRACT_BROKEN, broken), kafka_header(H_CONTRACT_SUITE, F.lit(contract.suite)))
        headers = F.concat(headers, F.filter(named, lambda _: broken.isNotNull()))
    dead = decoded.where(F.col(DEAD_LETTER).isNotNull()).select("key", "value", headers.alias("headers"))
    tombstones = decoded.where(F.col("value").isNull() & F.col(DEAD_LETTER).isNull()).select(
        F.col("key").cast("string").alias("key"), *meta
    )
    return DecodedTopic(records, dead, tombstones)


def kafka_header(name: str, value: Column) -> Column:
    """One Kafka header (struct<key: string, value: binary>), its value as UTF-8 text."""
    return F.struct(F.lit(name).alias("key"), value.cast("string").cast("binary").alias("value"))


def dead_letter_headers(job: str, job_version: int) -> Column:
    """Kafka headers of a dead letter (array<struct<key,value>>), from the decoded row's columns."""
    return F.array(
        kafka_header(H_KIND, F.col(f"{DEAD_LETTER}.kind")),
        kafka_header(H_MESSAGE, F.col(f"{DEAD_LETTER}.message")),
        kafka_header(H_SOURCE_TOPIC, F.col("topic")),
        kafka_header(H_SOURCE_PARTITION, F.col("partition")),
        kafka_header(H_SOURCE_OFFSET, F.col("offset")),
        kafka_header(H_SOURCE_TIMESTAMP, F.unix_millis(F.col("timestamp"))),
        kafka_header(H_JOB, F.lit(job)),
        kafka_header(H_JOB_VERSION, F.lit(str(job_version))),
        kafka_header(H_TIME, F.date_format(F.current_timestamp(), "yyyy-MM-dd'T'HH:mm:ss.SSSXXX")),
    )


def read_topic(
    spark: SparkSession,
    settings: KappaSettings,
    topic: Topic,
    *,
    job: str,
    job_version: int,
    streaming: bool = True,
    starting_offsets: str = "earliest",
    max_offsets_per_trigger: int | None = None,
    starting_timestamp_ms: int | None = None,
    with_raw: bool = False,
    enforce_contract: bool = True,
) -> DecodedTopic:
    """A declared topic, decoded into its declared schema from every writer version the registry knows.

    `enforce_contract`: records breaking the row-level expectations of the dataset's suite, if it has one,
    go to the dead letters (False: every decodable record is a record, e.g. to measure the contract).
    """
    with Registry(settings.registry) as registry:
        writers = writer_schemas(registry, topic)
    raw = kafka_source(
        spark, settings, topic, streaming, starting_offsets, max_offsets_per_trigger, starting_timestamp_ms
    )
    contract = topic_contract(settings, topic) if enforce_contract else None
    return decode_topic(
        raw, value_schema(settings, topic), writers, job, job_version, with_raw, contract,
        key_field=topic.key_field, deletes=topic.deletes,
    )  # fmt: skip


def topic_contract(settings: KappaSettings, topic: Topic) -> RowContract | None:
    """The row-level contract of a topic: its dataset's suite (a versioned topic shares its dataset's)."""
    suite = suite_for(settings, topic.dataset_name)
    return row_contract(suite) if suite is not None else None


def topic_encoder(settings: KappaSettings, topic: Topic) -> Callable[[DataFrame, Column, Column | None], DataFrame]:
    """Resolve the topic's registered schema id once; return rows -> key, value[, partition] for Kafka."""
    schema = value_schema(settings, topic)
    with Registry(settings.registry) as registry:
        schema_id = registry.lookup(topic.value_subject, schema)
    if schema_id is None:
        raise KappaError(
            f"schemas/{topic.value_schema} is not registered under {topic.value_subject}: "
            "run `kappa schemas apply` (the platform registers schemas on purpose, never on the fly)"
        )
    value = encode_confluent(struct_for(schema), schema, schema_id)

    def encode(df: DataFrame, key: Column, partition: Column | None = None) -> DataFrame:
        columns = [key.cast("string").cast("binary").alias("key"), value.alias("value")]
        if partition is not None:
            columns.append(partition.alias("partition"))
        return df.select(*columns)

    return encode


def encode_for_topic(
    df: DataFrame,
    settings: KappaSettings,
    topic: Topic,
    key: Column,
    partition: Column | None = None,
) -> DataFrame:
    """Rows with the value schema's fields as columns -> key, value (Confluent Avro)[, partition] for Kafka."""
    return topic_encoder(settings, topic)(df, key, partition)


def kafka_sink(df: DataFrame, settings: KappaSettings, topic_name: str) -> DataStreamWriter:
    """A streaming writer to a topic, durable (acks=all, idempotent)."""
    return (
        df.writeStream.format("kafka")
        .options(**kafka_options(settings))
        .option("topic", topic_name)
        .option("kafka.acks", "all")
        .option("kafka.enable.idempotence", "true")
        .option("kafka.compression.type", "lz4")
        .option("kafka.linger.ms", "20")
    )


def write_topic(
    df: DataFrame,
    settings: KappaSettings,
    topic: Topic,
    key: Column,
    partition: Column | None = None,
) -> DataStreamWriter:
    """The one call a job uses to publish: encode to the topic's registered schema, then a durable sink."""
    return kafka_sink(encode_for_topic(df, settings, topic, key, partition), settings, topic.name)


def dead_letter_sink(dead_letters: DataFrame, settings: KappaSettings, topic: Topic) -> DataStreamWriter:
    return kafka_sink(dead_letters, settings, dlq_topic(topic.name))
