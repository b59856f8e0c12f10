import pytest

from jobs.catalog import CLICKS
from kappa.runtime import DeltaTable, JobSpec, Starting
from kappa.runtime.discovery import discover
from kappa.runtime.progress import describe_batch, end_offsets


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
        JobSpec("bad-name", 1, "", (CLICKS,), DeltaTable("t"), start=lambda ctx: [])
    with pytest.raises(ValueError, match="version must be >= 1"):
        JobSpec("ok", 0, "", (CLICKS,), DeltaTable("t"), start=lambda ctx: [])


def test_end_offsets_come_from_the_progress_json() -> None:
    progress = {
        "name": "raw_clicks_v1",
        "batchId": 3,
        "numInputRows": 10,
        "processedRowsPerSecond": 250.0,
        "durationMs": {"triggerExecution": 40},
        "sources": [
            {"endOffset": '{"clicks":{"0":12,"1":7}}', "metrics": {"avgOffsetsBehindLatest": "2.0"}},
            {"endOffset": {"other": {"0": 5}}},
        ],
    }
    assert end_offsets(progress) == {"clicks": {0: 12, 1: 7}, "other": {0: 5}}
    assert describe_batch(progress) == "raw_clicks_v1 batch 3: 10 rows, 250 rows/s, 40 ms, behind≈2/partition"


def test_each_batch_is_recorded_once_whoever_reports_it() -> None:
    from kappa.runtime.progress import ProgressRecorder

    recorder = ProgressRecorder("127.0.0.1:1", groups={})  # no group: nothing to commit, no broker needed
    progress = {"name": "q", "batchId": 0, "numInputRows": 7, "sources": []}
    recorder.handle(progress)
    recorder.handle(progress)  # the listener and the runner's end-of-run sweep both report batch 0
    recorder.handle(progress | {"batchId": 1, "numInputRows": 3})
    assert recorder.batches == {"q": 2}
    assert recorder.rows == {"q": 10}
