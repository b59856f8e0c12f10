"""Read and write declared topics from Spark: one call each, Confluent Avro decoded and encoded in the JVM.

    decoded = read_topic(spark, settings, CLICKS, job="raw_clicks", job_version=1)
    decoded.rows          # every record once: a record, a dead letter (SIDE columns set) or a tombstone
    decoded.records       # key, the reader schema's fields, kafka_partition, kafka_offset, kafka_timestamp
    encode = topic_encoder(settings, ENRICHED_CLICKS)  # the registered schema id, resolved once
    publish(encode(batch, F.col("event_id")), settings, ENRICHED_CLICKS.name)  # one batch, durably

A job's one query reads `rows`; the runtime sends the dead letters to `<topic>.dlq` (kappa.spark.side_outputs).

Data contracts: `read_topic` applies the row-level expectations of the topic's dataset suite
(`schemas/expectations/<dataset>.json`, kappa.contracts.expectations) while it splits: a record that decodes but
breaks the contract is a dead letter of kind `contract-violation`, its `kappa.contract.broken` header naming the
broken expectations. The check is one Spark expression in the same projection as the decoding: no Python per record.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from kappa.contracts.dead_letter_format import DeadLetterKind
from kappa.contracts.expectations import RowContract, row_contract, suite_for
from kappa.contracts.registry import Registry, registry_of
from kappa.contracts.schema_files import topic_value_schema
from kappa.contracts.topic_declarations import Topic
from kappa.core.errors import KappaError
from kappa.core.observed import (
    RECORD_AGE_COUNT,
    RECORD_AGE_GRID_S,
    RECORD_AGE_OBSERVED,
    RECORD_AGE_SUM_MS,
    record_age_column,
)
from kappa.core.security import spark_group_prefix, spark_kafka_options
from kappa.core.settings import KappaSettings
from kappa.kafka.partitioning import partition_column
from kappa.spark.clock import wall_clock_ms
from kappa.spark.confluent_avro import DEAD_LETTER, RECORD, decode_confluent, encode_confluent, struct_for
from kappa.spark.side_outputs import SIDE_KIND, side_records

KAFKA_META = ("kafka_partition", "kafka_offset", "kafka_timestamp")  # each record's Kafka position and time
DELETED = "deleted"  # on a topic that declares deletes: the row is a tombstone, deleting its key


@dataclass(frozen=True)
class DecodedTopic:
    """A topic's rows decoded in one projection: what a job's one query reads.

    `rows`: every Kafka record once: a record (the schema's fields, `key`, Kafka position), a dead letter (the
    SIDE columns of kappa.spark.side_outputs set, every field null) or, on a topic that declares deletes, a tombstone
    (`deleted` true, the fields null). The other frames are views of it, for batch readers and tests.

    A field of Avro logical type `timestamp-millis` (e.g. `event_time`) is a Spark TimestampType column, as is
    `kafka_timestamp`: window, compare and write it as it is. Where a number is needed, take its epoch milliseconds
    (a long; `F.timestamp_millis` turns them back):

    ```python
    clicks = ctx.read(CLICKS).records  # event_time: a timestamp, shown in UTC (the session's time zone)
    clicks.select("event_id", F.unix_millis("event_time").alias("event_time_ms"))
    ```
    """

    rows: DataFrame  # what a job's query reads: records, dead letters and tombstones, each Kafka record once
    fields: tuple[str, ...]  # the record columns (key, the schema's fields, Kafka position[, raw columns])
    job: str  # the reading job, named in its dead letters' headers
    job_version: int  # the reading job's version, named in its dead letters' headers
    deletes: bool  # the topic declares deletes: `rows` has the DELETED column

    @property
    def changes(self) -> DataFrame:
        """Every record that keeps its contract and, on a topic that declares deletes, every tombstone, in one
        view of `rows`: the record columns, and `deleted` where the topic declares deletes (a topic without
        deletes has no tombstones: its changes are its records). A reader that needs both reads Kafka once."""
        kept = self.rows.where(F.col(SIDE_KIND).isNull())
        return kept.select(*self.fields, DELETED) if self.deletes else kept.select(*self.fields)

    @property
    def records(self) -> DataFrame:
        """The decoded records that keep their contract: one row each."""
        return self.changes.where(~F.col(DELETED)).drop(DELETED) if self.deletes else self.changes

    @property
    def dead_letters(self) -> DataFrame:
        """key, value, headers of the records that could not be decoded or broke their contract: for a Kafka sink."""
        side = self.rows.where(F.col(SIDE_KIND).isNotNull())
        return side_records(side, self.job, self.job_version).drop("topic")

    @property
    def tombstones(self) -> DataFrame:
        """key and Kafka position of the deletes of a compacted topic (empty where the topic declares none)."""
        if not self.deletes:
            return self.rows.where(F.lit(False)).select("key", *KAFKA_META)
        return self.changes.where(F.col(DELETED)).select("key", *KAFKA_META)


def value_schema(settings: KappaSettings, topic: Topic) -> dict[str, Any]:
    return topic_value_schema(settings.schemas_path, topic)


def writer_schemas(registry: Registry, topic: Topic) -> dict[int, dict[str, Any]]:
    """Every schema version registered for the topic's values, by id: what its records may be written with."""
    return {v.schema_id: v.schema for v in registry.versions(topic.value_subject)}


def kafka_options(settings: KappaSettings) -> dict[str, str]:
    return spark_kafka_options(settings)


# Real-time mode reads each record as it arrives. With the consumer's defaults the broker answers a fetch as soon as
# one record is there, so every record cost the broker and the reading task a fetch request of its own; a fetch
# that waits up to 25 ms for more answers with every record of those 25 ms (and an idle partition is asked 40
# times a second, not at every record).
REAL_TIME_CONSUMER = {"kafka.fetch.min.bytes": "1048576", "kafka.fetch.max.wait.ms": "25"}


def kafka_source(
    spark: SparkSession,
    settings: KappaSettings,
    topic: Topic,
    streaming: bool = True,
    starting_offsets: str = "earliest",
    max_offsets_per_trigger: int | None = None,
    starting_timestamp_ms: int | None = None,
    consumer_options: Mapping[str, str] | None = None,
) -> DataFrame:
    """Raw Kafka rows of a topic. `starting_offsets="timestamp"` starts at `starting_timestamp_ms` (record time).
    `consumer_options`: more options of Spark's Kafka source (`kafka.`-prefixed ones go to the consumer)."""
    reader: Any = spark.readStream if streaming else spark.read
    reader = reader.format("kafka").options(**kafka_options(settings)).option("subscribe", topic.name)
    if settings.secured:  # its consumers' group ids inside the principal's own, which its ACLs allow
        reader = reader.option("groupIdPrefix", spark_group_prefix(settings.kafka_user))
    reader = reader.options(**(consumer_options or {}))
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


def observe_record_age(raw: DataFrame, topic: str) -> DataFrame:
    """Raw Kafka rows, observed: per batch, how old its records were when the batch read them, counted on the grid of
    kappa.core.observed in the JVM as the batch reads them (no extra pass; the query's progress event carries the
    counts). For a live query only: a replay's records are as old as its history."""
    # The age once per record, in a column the counts compare: a streaming query plans its whole tree again at
    # every batch, so each expression of the observation costs every batch its planning.
    age_ms = F.col(_AGE_MS)
    counts = [F.count(F.lit(1)).alias(RECORD_AGE_COUNT), F.sum(age_ms).alias(RECORD_AGE_SUM_MS)]
    counts += [F.count_if(age_ms <= round(s * 1000)).alias(record_age_column(s)) for s in RECORD_AGE_GRID_S]
    aged = raw.withColumn(_AGE_MS, wall_clock_ms() - F.unix_millis(F.col("timestamp")))
    return aged.observe(f"{RECORD_AGE_OBSERVED}{topic}", *counts).drop(_AGE_MS)


_AGE_MS = "kappa_record_age_ms"


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
    placed_by: tuple[str, int] | None = None,
) -> DecodedTopic:
    """Split raw Kafka rows into decoded records, dead letters and tombstones.

    `with_raw`: records also carry `kafka_topic` and their original bytes (`raw_value`), for side outputs.
    `contract`: decoded records breaking it are dead letters too (kind `contract-violation`), not records.
    `key_field`: the record field the Kafka key must equal (as UTF-8 text); any other key is a dead letter
    (kind `key-mismatch`): compaction keeps one value per key, so a wrong key would keep the wrong identity.
    `placed_by`: (the topic's partition field, its declared partition count): a record outside
    `partition_for(field)` is a dead letter (kind `partition-mismatch`): readers rely on a field's records
    sharing one partition, in its log order (enrich_clicks keeps its state per partition), so every reader of
    the topic refuses the same records.
    `deletes`: null values delete their key (the `tombstones` frame); otherwise they are dead letters.
    """
    decoded = decode_confluent(raw, reader_schema, writers, deletes=deletes)
    field_names = [f["name"] for f in reader_schema["fields"]]
    # Each check below refuses only what no earlier one refused (one reason per record, the first), and reads
    # that from the dead-letter column, which Spark computes once per record. A condition repeated in every
    # field's `when` was evaluated in each: the plan of `clicks` held 8 CRC-32s for its placement check, now 2.
    if key_field is not None:
        decoded = _keyed_by(decoded, key_field, field_names)
    if placed_by is not None:
        decoded = _placed(decoded, *placed_by, field_names)
    broken: Column = F.lit(None).cast("string")
    if contract is not None and contract.expectations:
        contract.require(field_names)
        # Only a failing row pays for the names (the array is built under the `when`).
        violated = F.array_join(contract.violations(F.col(RECORD).getField), ", ")
        decoded = decoded.withColumn(_BROKEN, F.when(_undecided() & ~contract.passes(F.col(RECORD).getField), violated))
        broken = F.col(_BROKEN)
        violation = F.struct(
            F.lit(DeadLetterKind.CONTRACT_VIOLATION.value).alias("kind"),
            F.concat(F.lit(f"breaks its data contract {contract.suite}: "), broken).alias("message"),
        )
        decoded = decoded.withColumn(DEAD_LETTER, F.when(broken.isNotNull(), violation).otherwise(F.col(DEAD_LETTER)))
    keeps = _undecided()
    side = F.col(DEAD_LETTER).isNotNull()

    def when_side(value: Column) -> Column:
        return F.when(side, value)

    fields = [
        F.when(~side, F.col("key").cast("string")).alias("key"),  # a tombstone keeps its key
        *[F.when(keeps, F.col(f"{RECORD}.{n}")).alias(n) for n in field_names],
        F.col("partition").alias("kafka_partition"),
        F.col("offset").alias("kafka_offset"),
        F.col("timestamp").alias("kafka_timestamp"),
        *([F.col("topic").alias("kafka_topic"), F.col("value").alias("raw_value")] if with_raw else []),
    ]
    suite = contract.suite if contract is not None and contract.expectations else None
    sides = [
        when_side(F.col(f"{DEAD_LETTER}.kind")).alias(SIDE_KIND),
        when_side(F.col(f"{DEAD_LETTER}.message")).alias("side_message"),
        when_side(F.col("key")).alias("side_key"),
        when_side(F.col("value")).alias("side_value"),
        when_side(F.col("topic")).alias("side_topic"),
        when_side(F.col("partition")).alias("side_partition"),
        when_side(F.col("offset")).alias("side_offset"),
        when_side(F.col("timestamp")).alias("side_timestamp"),
        broken.alias("side_broken"),
        F.when(broken.isNotNull(), F.lit(suite)).alias("side_suite"),
    ]
    deleted = [(F.col("value").isNull() & ~side).alias(DELETED)] if deletes else []
    # one row per Kafka record: a record, a dead letter or a tombstone
    rows = decoded.select(*fields, *sides, *deleted)
    names = tuple(["key", *field_names, *KAFKA_META, *(["kafka_topic", "raw_value"] if with_raw else [])])
    return DecodedTopic(rows, names, job, job_version, deletes)


def placement(topic: Topic) -> tuple[str, int] | None:
    """decode_topic's `placed_by` for a declared topic: its partition field and count, if it declares one."""
    return None if topic.partition_field is None else (topic.partition_field, topic.partitions)


_BROKEN = "kappa_broken"  # the contract's broken expectations of a record refused for them


def _undecided() -> Column:
    """A decoded record that no check has refused yet (decode_confluent: a record or a dead letter, not both)."""
    return F.col(RECORD).isNotNull() & F.col(DEAD_LETTER).isNull()


def _refuse(decoded: DataFrame, refused: Column, kind: DeadLetterKind, why: Column) -> DataFrame:
    """The records `refused` (among the undecided) become dead letters of `kind`, saying `why`."""
    letter = F.struct(F.lit(kind.value).alias("kind"), why.alias("message"))
    return decoded.withColumn(DEAD_LETTER, F.when(_undecided() & refused, letter).otherwise(F.col(DEAD_LETTER)))


def _keyed_by(decoded: DataFrame, field: str, field_names: list[str]) -> DataFrame:
    """decode_topic's key check: records whose Kafka key is not their field's text become dead letters."""
    if field not in field_names:
        raise KappaError(f"key field {field!r} is not a field of the schema (fields: {field_names})")
    declared = F.col(RECORD).getField(field).cast("string")
    key_text = F.col("key").cast("string")  # byte for byte: invalid UTF-8 never equals a decoded field
    shown_key = (
        F.when(F.col("key").isNull(), F.lit("null"))
        .when(F.is_valid_utf8(key_text), F.concat(F.lit("'"), key_text, F.lit("'")))
        .otherwise(F.concat(F.lit("0x"), F.hex(F.col("key"))))
    )
    shown_field = F.coalesce(F.concat(F.lit("'"), declared, F.lit("'")), F.lit("null"))
    why = F.concat(F.lit("key "), shown_key, F.lit(f" is not the record's {field} "), shown_field)
    return _refuse(decoded, ~key_text.eqNullSafe(declared), DeadLetterKind.KEY_MISMATCH, why)


def _placed(decoded: DataFrame, field: str, partitions: int, field_names: list[str]) -> DataFrame:
    """decode_topic's placement check: records outside their field's partition become dead letters."""
    if field not in field_names:
        raise KappaError(f"partition field {field!r} is not a field of the schema (fields: {field_names})")
    value = F.col(RECORD).getField(field).cast("string")  # as producers place it: by its text (`key_text`)
    home = partition_column(value, partitions)
    why = F.format_string(
        f"partition %d is not the partition of {field} %s (%s of {partitions}, as the platform's producers place it)",
        F.col("partition"), F.coalesce(F.concat(F.lit("'"), value, F.lit("'")), F.lit("null")),
        F.coalesce(home.cast("string"), F.lit("none")),
    )  # fmt: skip
    return _refuse(decoded, ~F.col("partition").eqNullSafe(home), DeadLetterKind.PARTITION_MISMATCH, why)


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
    consumer_options: Mapping[str, str] | None = None,
    observe_age: bool = False,
) -> DecodedTopic:
    """A declared topic, decoded into its declared schema from every writer version the registry knows.

    `enforce_contract`: records breaking the row-level expectations of the dataset's suite, if it has one,
    go to the dead letters (False: every decodable record is a record, e.g. to measure the contract).
    `consumer_options`: as `kafka_source` takes them (REAL_TIME_CONSUMER for a real-time query).
    `observe_age`: count the records' ages per batch, for the metrics' latency (`observe_record_age`).
    """
    with registry_of(settings) as registry:
        writers = writer_schemas(registry, topic)
    raw = kafka_source(
        spark, settings, topic, streaming, starting_offsets, max_offsets_per_trigger, starting_timestamp_ms,
        consumer_options,
    )  # fmt: skip
    if observe_age:
        raw = observe_record_age(raw, topic.name)
    contract = topic_contract(settings, topic) if enforce_contract else None
    return decode_topic(
        raw, value_schema(settings, topic), writers, job, job_version, with_raw, contract,
        key_field=topic.key_field, deletes=topic.deletes, placed_by=placement(topic),
    )  # fmt: skip


def topic_contract(settings: KappaSettings, topic: Topic) -> RowContract | None:
    """The row-level contract of a topic: its dataset's suite (a versioned topic shares its dataset's)."""
    suite = suite_for(settings, topic.dataset_name)
    return row_contract(suite) if suite is not None else None


def topic_encoder(settings: KappaSettings, topic: Topic) -> Callable[[DataFrame, Column, Column | None], DataFrame]:
    """Resolve the topic's registered schema id once; return rows -> key, value[, partition] for Kafka."""
    value = topic_value(settings, topic)

    def encode(df: DataFrame, key: Column, partition: Column | None = None) -> DataFrame:
        columns = [key.cast("string").cast("binary").alias("key"), value.alias("value")]
        if partition is not None:
            columns.append(partition.alias("partition"))
        return df.select(*columns)

    return encode


def topic_value(settings: KappaSettings, topic: Topic) -> Column:
    """The Kafka value of a row whose columns are the topic's schema fields: Confluent Avro under the schema id
    the registry has for it (resolved now, once)."""
    schema = value_schema(settings, topic)
    with registry_of(settings) as registry:
        schema_id = registry.lookup(topic.value_subject, schema)
    if schema_id is None:
        raise KappaError(
            f"schemas/{topic.value_schema} is not registered under {topic.value_subject}: "
            "run `kappa schemas apply` (the platform registers schemas on purpose, never on the fly)"
        )
    return encode_confluent(struct_for(schema), schema, schema_id)


def encode_for_topic(
    df: DataFrame,
    settings: KappaSettings,
    topic: Topic,
    key: Column,
    partition: Column | None = None,
) -> DataFrame:
    """Rows with the value schema's fields as columns -> key, value (Confluent Avro)[, partition] for Kafka."""
    return topic_encoder(settings, topic)(df, key, partition)


# Every Kafka write of the platform: durable (acks=all, idempotent producer), compressed, batched briefly.
KAFKA_WRITE_OPTIONS = {
    "kafka.acks": "all",
    "kafka.enable.idempotence": "true",
    "kafka.compression.type": "lz4",
    "kafka.linger.ms": "20",
}


def publish(records: DataFrame, settings: KappaSettings, topic: str | None = None) -> None:
    """Write one batch of Kafka records (key, value[, partition, headers, topic]) durably (acks=all, idempotent).
    Without `topic`, each record names its own in a `topic` column."""
    writer = records.write.format("kafka").options(**kafka_options(settings), **KAFKA_WRITE_OPTIONS)
    if topic is not None:
        writer = writer.option("topic", topic)
    writer.save()
