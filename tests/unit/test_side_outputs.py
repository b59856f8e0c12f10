"""Where a side row goes: a dead letter to its input's `.dlq`, a late record to the output's `.late`, whatever late
kind the job's rule names (the platform knows only its own kinds)."""

from datetime import UTC, datetime

from pyspark.sql import SparkSession

from kappa.contracts.dead_letter_format import H_TIME, DeadLetterKind, dlq_topic, late_topic
from kappa.spark.side_outputs import SIDE_SCHEMA, side_records


def test_a_dead_letter_goes_to_its_inputs_dlq_and_any_other_kind_to_the_outputs_late_topic(
    spark: SparkSession,
) -> None:
    kinds = {
        "a": ("clicks", DeadLetterKind.NOT_CONFLUENT_FRAMED.value),
        "b": ("user_profiles", DeadLetterKind.CONTRACT_VIOLATION.value),
        "c": ("clicks", DeadLetterKind.LATE_EVENT.value),
        "d": ("user_profiles", "late-profile"),  # enrich_clicks' own kind
        "e": ("clicks", "late-anything"),  # a kind no job has named yet
    }
    rows = spark.createDataFrame(
        [(kind, None, key.encode(), b"v", topic, 0, 1, None, None, None) for key, (topic, kind) in kinds.items()],
        SIDE_SCHEMA,
    )

    records = side_records(rows, "a_job", 1, inputs=("clicks", "user_profiles"), late_to=late_topic("out"))

    assert {r["key"].decode(): r["topic"] for r in records.collect()} == {
        "a": dlq_topic("clicks"),
        "b": dlq_topic("user_profiles"),
        "c": late_topic("out"),
        "d": late_topic("out"),
        "e": late_topic("out"),
    }


def test_a_side_record_is_stamped_with_the_wall_clock_when_it_is_computed(spark: SparkSession) -> None:
    rows = spark.createDataFrame(
        [("not-confluent-framed", None, b"k", b"v", "clicks", 0, 1, None, None, None)], SIDE_SCHEMA
    )
    before = datetime.now(UTC).replace(microsecond=0)  # the header has milliseconds; compare to the second
    [record] = side_records(rows, "a_job", 1, inputs=("clicks",)).collect()
    after = datetime.now(UTC)
    stamped = datetime.fromisoformat({h.key: h.value.decode() for h in record["headers"]}[H_TIME])
    assert before <= stamped <= after
