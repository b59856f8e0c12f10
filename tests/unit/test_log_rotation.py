"""kappa.lifecycle.log_rotation on real files: copy-then-truncate past the size, the gzipped generations, writers
that hold the log open in append mode (as the deployment wrapper's children do) during and after a rotation, and
the rotation thread's changing list of logs."""

import gzip
import logging
import threading
from pathlib import Path

import pytest

from kappa.lifecycle.exits import STARTED_LINE, ended_because
from kappa.lifecycle.log_rotation import LogRotation, rotate_if_large
from tests.waiting import wait_until


def _gz(path: Path) -> bytes:
    with gzip.open(path, "rb") as copy:
        return copy.read()


def _copies(log: Path) -> list[str]:
    return sorted(p.name for p in log.parent.glob(f"{log.name}.*") if p.suffix != ".rotating")  # not the lock


def test_a_log_is_rotated_only_once_past_its_size(tmp_path: Path) -> None:
    log = tmp_path / "enrich_clicks.v1.log"
    log.write_bytes(b"x" * 100)
    assert not rotate_if_large(log, max_bytes=100, keep=3)  # at the size: not past it
    assert log.read_bytes() == b"x" * 100
    assert _copies(log) == []

    content = b"".join(f"line {n}\n".encode() for n in range(20))
    log.write_bytes(content)
    assert rotate_if_large(log, max_bytes=100, keep=3)
    assert log.read_bytes() == b""  # truncated in place: the same file, empty
    assert _copies(log) == ["enrich_clicks.v1.log.1.gz"]
    assert _gz(tmp_path / "enrich_clicks.v1.log.1.gz") == content


def test_a_missing_log_is_no_error(tmp_path: Path) -> None:
    assert not rotate_if_large(tmp_path / "gone.log", max_bytes=0, keep=3)
    assert list(tmp_path.iterdir()) == []


def test_generations_shift_up_and_no_more_than_keep_are_kept(tmp_path: Path) -> None:
    log = tmp_path / "host-abc.log"
    (tmp_path / "host-abc.log.7.gz").write_bytes(b"")  # left by a larger KAPPA_LOG_KEEP before
    for n in range(1, 6):
        log.write_text(f"generation {n}\n")
        assert rotate_if_large(log, max_bytes=1, keep=3)

    assert _copies(log) == ["host-abc.log.1.gz", "host-abc.log.2.gz", "host-abc.log.3.gz"]  # no .tmp left either
    assert [_gz(tmp_path / f"host-abc.log.{n}.gz") for n in (1, 2, 3)] == [
        b"generation 5\n",
        b"generation 4\n",
        b"generation 3\n",
    ]


def test_an_append_mode_writer_goes_on_at_the_start_of_the_live_file(tmp_path: Path) -> None:
    log = tmp_path / "sessionize.v2.log"
    with log.open("ab", buffering=0) as writer:  # O_APPEND, as the wrapper opens the log for its children
        before = b"".join(f"batch {n}: 10 rows\n".encode() for n in range(1000))
        writer.write(before)
        assert rotate_if_large(log, max_bytes=1024, keep=2)
        writer.write(b"batch 1000: 10 rows\n")

    # Not at its old offset past a hole of zero bytes: the file is the one line.
    assert log.read_bytes() == b"batch 1000: 10 rows\n"
    assert _gz(tmp_path / "sessionize.v2.log.1.gz") == before


def test_a_crash_reason_is_read_from_the_live_file_after_a_rotation(tmp_path: Path) -> None:
    log = tmp_path / "page_stats.v1.log"
    with log.open("a") as writer:
        writer.write(f"{STARTED_LINE} page_stats v1 at 2026-01-01T00:00:00+00:00 (restart 0): kappa jobs run\n")
        writer.writelines(f"progress line {n}\n" for n in range(5000))
        writer.flush()
        assert rotate_if_large(log, max_bytes=4096, keep=1)
        writer.write("kappa: error: the schema registry is not reachable\n")

    reason = ended_because(tmp_path / "page_stats.v1.exit.json", None, log)
    assert reason.endswith("last log lines: kappa: error: the schema registry is not reachable")


_RECORD = 16  # bytes: a divisor of the page size, so that no record straddles two pages (see below)


def _append_records(log: Path, total: int, done: threading.Event) -> None:
    """Append records 0 .. total-1, each in one write to a file held open in append mode (as a deployment's
    process holds its log), then set `done`."""
    with log.open("ab", buffering=0) as writer:
        for n in range(total):
            writer.write(b"%015d\n" % n)
    done.set()


def test_lines_written_during_rotations_are_never_doubled_or_reordered(tmp_path: Path) -> None:
    """A writer appends numbered records while the log is rotated again and again.

    What copy-then-truncate guarantees, and so what is asserted: a byte is copied at most once (the copy reads
    the file up to the truncation, and what is appended after it lands at the live file's start); the records
    keep their order across the copies and the live file; each copy and the live file hold consecutive records
    (what is appended while a copy runs is copied too: the copy reads on until it finds nothing more). What it
    cannot guarantee is that nothing is lost: a record appended between the copy's last read and the truncation
    is truncated away without being copied. How many land there depends on scheduling (here, a writer thread of
    the same process that never pauses takes the GIL while the rotation waits to issue the truncation: from none
    to a few percent of the records in trials), so the test asserts where a loss can be (between one file and
    the next), not that there is none.

    Records of 16 bytes never straddle a page: a reader could otherwise see the first half of a record whose
    write is still copying its second page, and the truncation would tear it (the same window)."""
    log = tmp_path / "raw_clicks.v1.log"
    done = threading.Event()
    writer = threading.Thread(target=_append_records, args=(log, 100_000, done))
    writer.start()
    rotations = 0
    while not done.is_set():
        rotations += int(rotate_if_large(log, max_bytes=32 * 1024, keep=100_000))
    writer.join()

    files = [tmp_path / f"raw_clicks.v1.log.{n}.gz" for n in range(rotations, 0, -1)]  # oldest first
    assert _copies(log) == sorted(p.name for p in files)
    contents = [*(_gz(path) for path in files), log.read_bytes()]
    assert rotations >= 3, "the writer ended before the log was rotated while it wrote"
    numbers = []
    for content in contents:
        assert len(content) % _RECORD == 0  # whole records only: no zero bytes, nothing torn
        records = [int(content[i : i + _RECORD]) for i in range(0, len(content), _RECORD)]
        if records:  # the live file may be empty, if the last rotation took every record
            assert records == list(range(records[0], records[0] + len(records)))  # no gap inside a file
        numbers += records
    assert numbers[0] == 0  # the first copy starts at the first record
    assert numbers == sorted(set(numbers))  # never twice, never out of order


def test_the_rotation_thread_follows_the_list_it_is_given_and_outlives_failures(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first, second = tmp_path / "a.v1.log", tmp_path / "b.v1.log"
    unreadable = tmp_path / "not-a-file.log"
    unreadable.mkdir()  # it cannot be opened for a copy: an OSError at each check
    (unreadable / ("x" * 40)).touch()  # and its size is past the limit on every file system
    logs = [unreadable, first]
    caplog.set_level(logging.INFO, logger="kappa.deployments")
    rotation = LogRotation(lambda: list(logs), max_bytes=10, keep=2, check_s=0.02)
    try:
        first.write_text("a line past ten bytes\n")
        wait_until(lambda: (tmp_path / "a.v1.log.1.gz").exists(), 10, "the first log rotated", interval_s=0.02)
        logs[1:] = [second]  # a job stopped, another started: the next checks see only the new list
        first.write_text("a again, past ten bytes\n")
        second.write_text("b line past ten bytes\n")
        wait_until(lambda: (tmp_path / "b.v1.log.1.gz").exists(), 10, "the second log rotated", interval_s=0.02)
    finally:
        rotation.stop()

    assert first.read_text() == "a again, past ten bytes\n"  # no longer in the list: left as it is
    assert _copies(first) == ["a.v1.log.1.gz"]
    assert _gz(tmp_path / "b.v1.log.1.gz") == b"b line past ten bytes\n"
    rotated = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert [m.split(" past ")[0] for m in rotated] == [f"rotated {first}", f"rotated {second}"]  # one line each
    failed = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert failed
    assert all(m.startswith(f"log rotation: could not rotate {unreadable}") for m in failed)


def test_two_processes_rotating_one_log_never_copy_a_line_twice(tmp_path: Path) -> None:
    """`.state/logs/spark.log` is rotated by every process that runs a Spark driver (the job host, each `kappa jobs
    run`): two rotations at once take turns under the log's lock, so no line is in two copies. (Threads stand in
    for the processes: a `flock` on two separate opens of the lock file excludes as it does between processes.)"""
    log = tmp_path / "spark.log"
    done = threading.Event()
    rotations: list[int] = []

    def rotate() -> None:
        while not done.is_set():
            if rotate_if_large(log, max_bytes=16 * 1024, keep=100_000):
                rotations.append(1)

    threads = [threading.Thread(target=_append_records, args=(log, 60_000, done)), *(
        threading.Thread(target=rotate) for _ in range(2))]  # fmt: skip
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    copies = sorted(tmp_path.glob("spark.log.*.gz"), key=lambda p: -int(p.name.split(".")[2]))  # oldest first
    assert len(copies) == len(rotations) >= 3
    numbers = []
    for content in [*(_gz(path) for path in copies), log.read_bytes()]:
        numbers += [int(content[i : i + _RECORD]) for i in range(0, len(content), _RECORD)]
    assert numbers == sorted(set(numbers))  # never twice, never out of order
    assert numbers[0] == 0


def test_a_copy_whose_older_copies_could_not_be_shifted_is_kept_aside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the log is truncated its copy is the only one of its lines: if making room among the older copies
    fails (a permission, a full disk), the copy is kept under its own name, where the next rotation's copy does
    not overwrite it, and the failure is raised for the rotation thread to log."""
    log = tmp_path / "sessionize.v1.log"
    log.write_text("first lines, past ten bytes\n")

    def refuse(path: Path, keep: int) -> None:
        raise PermissionError("the older copies cannot be moved")

    monkeypatch.setattr("kappa.lifecycle.log_rotation._shift", refuse)
    with pytest.raises(PermissionError):
        rotate_if_large(log, max_bytes=10, keep=3)
    monkeypatch.undo()
    log.write_text("second lines, past ten bytes\n")
    assert rotate_if_large(log, max_bytes=10, keep=3)

    aside = list(tmp_path.glob("sessionize.v1.log.unshifted-*.gz"))
    assert [_gz(p) for p in aside] == [b"first lines, past ten bytes\n"]
    assert _gz(tmp_path / "sessionize.v1.log.1.gz") == b"second lines, past ten bytes\n"
    assert log.read_text() == ""
