"""kappa.runtime.run_record: what a job run writes about itself, and that a reader never sees half of it."""

import json
import os
import threading
from pathlib import Path

import pytest

from kappa.core.errors import KappaError
from kappa.core.settings import KappaSettings, load_settings
from kappa.runtime import run_record
from kappa.runtime.run_record import RunRecorder, RunState


@pytest.fixture
def settings(tmp_path: Path) -> KappaSettings:
    return load_settings(state_dir=tmp_path, deployments_dir=tmp_path / "deployments")


def _read(settings: KappaSettings) -> run_record.RunRecord:
    record = run_record.read(run_record.record_path(settings, "sessionize", 3))
    assert record is not None
    return record


def test_a_run_records_its_state_queries_batches_and_end(settings: KappaSettings) -> None:
    with RunRecorder.recording(settings, "sessionize", 3) as recorder:
        first = _read(settings)
        assert (first.state, first.pid, first.last_batch, first.rows) == (RunState.STARTING, os.getpid(), None, 0)
        recorder.query_started("sessionize_v3", "id-1", "run-1")
        assert _read(settings).queries == {"sessionize_v3": {"id": "id-1", "run_id": "run-1"}}
        assert _read(settings).state is RunState.RUNNING
        recorder.retrying("Kafka is unavailable (TimeoutException)")
        waiting = _read(settings)
        assert (waiting.state, waiting.last_error) == (RunState.RETRYING, "Kafka is unavailable (TimeoutException)")
        recorder.query_started("sessionize_v3", "id-1", "run-2")  # started again, same query id, a new run id
        recorder.batch({"name": "sessionize_v3", "batchId": 7, "numInputRows": 12})
        running = _read(settings)
        assert running.state is RunState.RUNNING
        assert running.queries["sessionize_v3"]["run_id"] == "run-2"
        assert running.last_batch is not None
        assert (running.last_batch.batch_id, running.last_batch.rows, running.rows) == (7, 12, 12)
    ended = _read(settings)
    assert ended.state is RunState.STOPPED
    assert ended.updated_at is not None
    assert ended.started_at is not None
    assert ended.updated_at >= ended.started_at


def test_an_error_that_ends_the_run_is_recorded_with_its_first_line(settings: KappaSettings) -> None:
    with pytest.raises(ValueError, match="a bad transform"), RunRecorder.recording(settings, "sessionize", 3):
        raise ValueError("a bad transform\nTraceback lines the log keeps")
    failed = _read(settings)
    assert (failed.state, failed.last_error) == (RunState.FAILED, "ValueError: a bad transform")
    with pytest.raises(KappaError), RunRecorder.recording(settings, "sessionize", 3):
        raise KappaError("job sessionize_v3: clicks does not exist; jobs never create topics")
    assert _read(settings).last_error == "job sessionize_v3: clicks does not exist; jobs never create topics"


def test_rows_add_up_over_runs_and_a_reset_forgets_the_rest(settings: KappaSettings) -> None:
    path = run_record.record_path(settings, "sessionize", 3)
    with RunRecorder.recording(settings, "sessionize", 3) as recorder:
        recorder.batch({"name": "sessionize_v3", "batchId": 0, "numInputRows": 5})
        recorder.retrying("Kafka is unavailable")
    run_record.reset(path, "sessionize", 3)
    reset = _read(settings)
    assert (reset.state, reset.rows, reset.last_error, reset.last_batch, reset.pid) == (
        RunState.STARTING, 5, None, None, None,
    )  # fmt: skip
    with RunRecorder.recording(settings, "sessionize", 3) as recorder:
        recorder.batch({"name": "sessionize_v3", "batchId": 1, "numInputRows": 6})
    assert _read(settings).rows == 11
    path.write_text("{half a reco")  # a record no run can have written (rename is atomic): named, not guessed
    with pytest.raises(KappaError, match=r"run record .*sessionize\.v3\.run\.json unreadable"):
        run_record.read(path)
    with RunRecorder.recording(settings, "sessionize", 3):  # a run replaces it
        pass
    assert _read(settings).rows == 0


def test_a_reader_never_sees_half_a_record(settings: KappaSettings) -> None:
    path = run_record.record_path(settings, "sessionize", 3)
    with RunRecorder.recording(settings, "sessionize", 3) as recorder:
        done = threading.Event()

        def write_batches() -> None:
            for batch in range(500):
                recorder.batch({"name": "sessionize_v3", "batchId": batch, "numInputRows": 1})
            done.set()

        writer = threading.Thread(target=write_batches)
        writer.start()
        reads = 0
        while not done.is_set():
            data = json.loads(path.read_text())  # raises on a partial file
            assert data["rows"] == (data["last_batch"]["batch_id"] + 1 if data["last_batch"] else 0)
            reads += 1
        writer.join()
    assert reads > 10
    assert _read(settings).rows == 500
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left behind
