"""The job host's routing of log lines: each job's log gets the lines about it, whichever thread logs them."""

import json
import logging
import threading
from pathlib import Path

from kappa.lifecycle.exits import EXIT_LINE, exit_status, record_exit
from kappa.lifecycle.job_host import _JobLog
from kappa.lifecycle.state_files import Deployment


def _ended(deployment: Deployment) -> str:
    return str(json.loads(deployment.exit_path.read_text())["ended_at"])


def _record(message: str, thread: int | None = None) -> logging.LogRecord:
    record = logging.LogRecord("kappa.progress", logging.INFO, __file__, 0, message, (), None)
    if thread is not None:
        record.thread = thread
    return record


def test_a_job_log_takes_its_threads_lines_and_those_naming_its_query_or_group(tmp_path: Path) -> None:
    log = tmp_path / "enrich_clicks.v1.log"
    deployment = Deployment("enrich_clicks", 1, 4242, [], "shared", "2026-11-25T00:00:00+00:00", str(log))
    handler = _JobLog(deployment)  # made on the job's thread, as the host makes it
    other = (threading.get_ident() + 1) % 2**32
    assert handler.filter(_record("starting enrich_clicks: Spark session"))
    assert handler.filter(_record("enrich_clicks_v1 batch 3: 10 rows, 10 rows/s, 9 ms", other))
    assert handler.filter(_record("query enrich_clicks_v1 started (run 1)", other))
    assert handler.filter(_record("enrich_clicks_v1: the registry has clicks v2; planning the query again", other))
    assert handler.filter(_record("could not record progress of kappa.enrich_clicks.v1: timed out", other))
    for someone_else in (
        "enrich_clicks_realtime_v1 batch 3: 10 rows",  # another job whose name starts the same
        "enrich_clicks_v12 batch 3: 10 rows",  # another version
        "raw_clicks_v1 batch 3: 10 rows",
        "could not record progress of kappa.enrich_clicks.v12: timed out",
    ):
        assert not handler.filter(_record(someone_else, other)), someone_else
    handler.write("kappa: error: something")
    record_exit(deployment, 2)  # as the host does when a job's run ends
    handler.close()
    assert exit_status(deployment) == 2
    assert log.read_text().splitlines()[-2:] == [
        "kappa: error: something",
        f"{EXIT_LINE} 2 at {_ended(deployment)}",
    ]
