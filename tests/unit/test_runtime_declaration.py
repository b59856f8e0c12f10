import threading
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from pydantic import Field, ValidationError

from jobs.catalog import CLICKS, ENRICHED_CLICKS, SESSIONS, USER_PROFILES
from kappa.core.errors import KappaError
from kappa.runtime import DeltaTable, JobSpec, Starting, TopicPlan
from kappa.runtime.declaration import JobContext, NoSettings
from kappa.runtime.discovery import discover
from kappa.runtime.progress import describe_batch, end_offsets
from kappa.runtime.query import QueryControl, start_query
from kappa.spark.side_outputs import SIDE_COLUMNS


def test_discovery_finds_every_job_folder() -> None:
    jobs = discover()
    assert "raw_clicks" in jobs
    assert jobs["raw_clicks"].inputs == (CLICKS,)
    assert isinstance(jobs["raw_clicks"].output, DeltaTable)


def test_starting_point_parses_keywords_and_zoned_timestamps() -> None:
    assert Starting.parse("earliest") == Starting("earliest")
    assert Starting.parse("2026-01-01T00:00:00Z") == Starting("timestamp", 1767225600000)
    with pytest.raises(ValueError, match="give a time zone"):
        Starting.parse("2026-01-01T00:00:00")
    with pytest.raises(ValueError, match="earliest, latest or an ISO timestamp"):
        Starting.parse("yesterday")


def test_bad_declarations_are_refused() -> None:
    with pytest.raises(ValueError, match="must be an identifier"):
        JobSpec("bad-name", 1, "", (CLICKS,), DeltaTable("t"), plan=lambda ctx: None)  # type: ignore[arg-type,return-value]
    with pytest.raises(ValueError, match="version must be >= 1"):
        JobSpec("ok", 0, "", (CLICKS,), DeltaTable("t"), plan=lambda ctx: None)  # type: ignore[arg-type,return-value]


def test_a_live_batch_starts_every_half_of_the_declared_freshness() -> None:
    def job(**fields: object) -> JobSpec:
        return JobSpec("j", 1, "", (CLICKS,), DeltaTable("t"), plan=lambda ctx: None, **fields)  # type: ignore[arg-type,return-value]

    assert job(freshness="1 second").trigger_interval_ms == 500
    assert job(freshness="1 minute").trigger_interval_ms == 30_000
    assert job().trigger_interval_ms == 5_000  # the default freshness: 10 s
    ctx = JobContext(spark=None, settings=None, spec=job(freshness="2 seconds"), version=1)  # type: ignore[arg-type]
    assert ctx.trigger() == {"processingTime": "1000 milliseconds"}
    assert JobContext(None, None, job(), 1, available_now=True).trigger() == {"availableNow": True}  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="job j: freshness 'soon': expected a positive duration such as '1 second'"):
        job(freshness="soon")
    with pytest.raises(ValueError, match="freshness '0 seconds': expected a positive duration"):
        job(freshness="0 seconds")


def test_a_live_run_reads_bounded_batches_and_a_replay_its_whole_range() -> None:
    from kappa.runtime.runner import live_batch_bound

    spec = JobSpec("j", 1, "", (CLICKS,), DeltaTable("t"), plan=lambda ctx: None, max_batch_records=7)  # type: ignore[arg-type,return-value]
    assert live_batch_bound(spec, available_now=False) == 7
    assert live_batch_bound(spec, available_now=True) is None
    with pytest.raises(ValueError, match="max_batch_records must be >= 1"):
        JobSpec("j", 1, "", (CLICKS,), DeltaTable("t"), plan=lambda ctx: None, max_batch_records=0)  # type: ignore[arg-type,return-value]


def test_end_offsets_come_from_the_progress_json() -> None:
    progress = {
        "name": "raw_clicks_v1",
        "batchId": 3,
        "numInputRows": 10,
        "processedRowsPerSecond": 250.0,
        "durationMs": {"triggerExecution": 40, "addBatch": 31, "latestOffset": 3, "walCommit": 5, "getBatch": 0},
        "sources": [
            {"endOffset": '{"clicks":{"0":12,"1":7}}', "metrics": {"avgOffsetsBehindLatest": "2.0"}},
            {"endOffset": {"other": {"0": 5}}},
        ],
    }
    assert end_offsets(progress) == {"clicks": {0: 12, 1: 7}, "other": {0: 5}}
    assert describe_batch(progress) == (
        "raw_clicks_v1 batch 3: 10 rows, 250 rows/s, 40 ms (addBatch 31, walCommit 5, latestOffset 3), "
        "behind≈2/partition"
    )


def test_each_batch_is_recorded_once_whoever_reports_it() -> None:
    from kappa.runtime.progress import ProgressRecorder

    recorder = ProgressRecorder(
        {"bootstrap.servers": "127.0.0.1:1"}, groups={"q": None}
    )  # no group: nothing to commit, no broker needed
    progress = {"name": "q", "batchId": 0, "numInputRows": 7, "sources": []}
    recorder.handle(progress)
    recorder.handle(progress)  # the listener and the runner's end-of-run sweep both report batch 0
    recorder.handle(progress | {"batchId": 1, "numInputRows": 3})
    recorder.handle(progress | {"name": "another_job_v1", "batchId": 5})  # same application, not its query
    assert recorder.batches == {"q": 2}
    assert recorder.rows == {"q": 10}


def test_checkpoint_offsets_are_those_of_the_last_committed_batch(tmp_path: Path) -> None:
    from kappa.runtime.progress import checkpoint_offsets

    (tmp_path / "offsets").mkdir()
    (tmp_path / "commits").mkdir()
    for batch, clicks in ((0, 10), (1, 25), (2, 40)):  # Spark's layout: version, metadata, one line per source
        (tmp_path / "offsets" / str(batch)).write_text(
            f'v1\n{{"batchWatermarkMs":0}}\n{{"clicks":{{"0":{clicks},"1":{clicks + 1}}}}}\n{{"profiles":{{"0":3}}}}\n'
        )
    for batch in (0, 1):  # batch 2 was planned but never committed (the job died inside it)
        (tmp_path / "commits" / str(batch)).write_text("v1\n{}\n")
    assert checkpoint_offsets(str(tmp_path)) == {"clicks": {0: 25, 1: 26}, "profiles": {0: 3}}
    assert checkpoint_offsets(str(tmp_path / "missing")) == {}


def test_pipeline_order_runs_each_job_after_the_writers_of_its_inputs() -> None:
    from kappa.runtime.discovery import pipeline_order

    order = [job.name for job in pipeline_order(discover())]
    assert order.index("enrich_clicks") < order.index("sessionize") < order.index("user_activity")
    assert order.index("enrich_clicks") < order.index("page_stats")
    assert order.index("sessionize") < order.index("sessions_table")
    assert sorted(order) == sorted(discover())


def test_a_topic_plan_for_a_delta_output_is_refused() -> None:
    spec = JobSpec("to_delta", 1, "", (CLICKS,), DeltaTable("t"), plan=lambda ctx: None)  # type: ignore[arg-type,return-value]
    ctx = JobContext(spark=None, settings=None, spec=spec, version=1)  # type: ignore[arg-type]
    plan = TopicPlan(rows=SimpleNamespace(columns=SIDE_COLUMNS), key=None)  # type: ignore[arg-type]
    with pytest.raises(KappaError, match="job to_delta: a TopicPlan writes Kafka records, not t"):
        start_query(ctx, plan, QueryControl(threading.Event()), watch=None)  # type: ignore[arg-type]


def test_a_plan_whose_rows_lost_the_side_columns_is_refused_before_its_query_starts() -> None:
    """Dead letters ride in the plan's rows: a last select without them would drop them silently."""
    spec = JobSpec("forgetful", 1, "", (CLICKS,), ENRICHED_CLICKS, plan=_topic_plan)
    ctx = JobContext(spark=None, settings=None, spec=spec, version=1)  # type: ignore[arg-type]
    rows = SimpleNamespace(columns=["event_id", "user_id", "side_kind"])  # what a DataFrame's plan checks
    plan = TopicPlan(rows=rows, key=None)  # type: ignore[arg-type]
    with pytest.raises(
        KappaError, match=r"job forgetful: its plan's rows lack the side columns side_message, side_key, side_value, "
    ):
        start_query(ctx, plan, QueryControl(threading.Event()), watch=None)  # type: ignore[arg-type]


def _topic_plan(ctx: JobContext) -> TopicPlan:
    raise AssertionError("never called: the declaration is refused first")


class _Knobs(NoSettings):
    gap_minutes: int = Field(gt=0)


def test_a_plan_whose_kind_cannot_write_the_output_is_refused_at_declaration() -> None:
    with pytest.raises(ValueError, match="job to_delta: its plan returns a TopicPlan, which writes a topic, but its "
                                         "output t is a Delta table"):  # fmt: skip
        JobSpec("to_delta", 1, "", (CLICKS,), DeltaTable("t"), plan=_topic_plan)
    assert JobSpec("to_topic", 1, "", (CLICKS,), ENRICHED_CLICKS, plan=_topic_plan).name == "to_topic"


def test_knobs_are_a_typed_model_checked_when_the_job_is_declared() -> None:
    def job(settings: object) -> JobSpec:
        return JobSpec("j", 1, "", (CLICKS,), DeltaTable("t"), plan=lambda ctx: None, settings=settings)  # type: ignore[arg-type,return-value]

    assert job(_Knobs(gap_minutes=30)).settings_as(_Knobs).gap_minutes == 30
    with pytest.raises(ValidationError, match="greater than 0"):
        _Knobs(gap_minutes=0)
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        _Knobs(gap_minutes=30, gap_minuts=20)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="job j: settings must be an instance of the job's pydantic model"):
        job({"gap_minutes": 30})
    with pytest.raises(TypeError, match="job j: its settings are NoSettings, not _Knobs"):
        job(NoSettings()).settings_as(_Knobs)


def test_a_plan_finds_its_inputs_by_their_declaration_whatever_topics_a_run_binds() -> None:
    spec = JobSpec("j", 1, "", (CLICKS,), ENRICHED_CLICKS, plan=_topic_plan, lookups=(USER_PROFILES,))
    assert spec.topic(CLICKS) == CLICKS
    bound = spec.bound({"clicks": "t1_clicks", "user_profiles": "t1_profiles", "enriched_clicks": "t1_out"})
    assert bound.topic(CLICKS).name == "t1_clicks"
    assert bound.topic(USER_PROFILES).name == "t1_profiles"
    assert bound.topic(replace(CLICKS, name="t1_clicks")).name == "t1_clicks"  # a bound name finds itself
    again = bound.bound({"t1_clicks": "t2_clicks"})  # bound twice: the declaration still finds its topic
    assert again.topic(CLICKS).name == "t2_clicks"
    assert again.topic(USER_PROFILES).name == "t1_profiles"
    versioned = replace(spec, inputs=(replace(CLICKS, name="clicks.v3"),))  # as a version's binding replaces them
    assert versioned.topic(CLICKS).name == "clicks.v3"
    assert versioned.topic(USER_PROFILES) == USER_PROFILES
    with pytest.raises(ValueError, match="job j was declared with 2 inputs and lookups but is bound to 1"):
        replace(spec, lookups=()).topic(CLICKS)
    ctx = JobContext(spark=None, settings=None, spec=again, version=1)  # type: ignore[arg-type]
    assert ctx.output_topic.name == "t1_out"
    with pytest.raises(ValueError, match="job j reads sessions, which is not among its inputs or lookups"):
        again.topic(SESSIONS)
