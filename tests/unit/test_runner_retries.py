"""Which failures make the runner start a job's queries again (a lost service) and which end the run."""

from kappa.runtime.runner import unavailable_service


def test_a_lost_broker_or_registry_is_retried_and_a_bad_job_is_not() -> None:
    kafka = (
        "query raw_clicks_v1 failed: [STREAM_FAILED] Query terminated with exception\n"
        "Caused by: org.apache.kafka.common.errors.TimeoutException: Timeout of 60000ms expired before the "
        "position for partition clicks-1 could be determined"
    )
    assert unavailable_service(kafka) == (
        "Kafka is unavailable (Caused by: org.apache.kafka.common.errors.TimeoutException: Timeout of 60000ms "
        "expired before the position for partition clicks-1 could be determined)"
    )
    registry = "starting its queries failed: the schema registry is not reachable at http://127.0.0.1:1/x"
    assert unavailable_service(registry) is not None
    assert unavailable_service(registry).startswith("the schema registry is unavailable (")  # type: ignore[union-attr]
    assert unavailable_service("query x failed: [DIVIDE_BY_ZERO] Division by zero") is None
    assert unavailable_service("query x failed: [CAST_INVALID_INPUT] The value 'a' cannot be cast") is None


def test_a_fetch_that_timed_out_mid_batch_is_an_outage() -> None:
    """Seen in CI: the broker went away while a batch was reading; Spark's Kafka reader gave up on the fetch."""
    failure = (
        "query raw_clicks_v1 failed: Job aborted due to stage failure: Task 2 in stage 1.0 failed 1 times, most "
        "recent failure: Lost task 2.0 in stage 1.0 (TID 6) (localhost executor driver): "
        "java.util.concurrent.TimeoutException: Cannot fetch record for offset 0 in 120000 milliseconds"
    )
    assert (unavailable_service(failure) or "").startswith("Kafka is unavailable (")
