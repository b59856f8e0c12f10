"""Continuous jobs outlive a broker outage of two minutes and a registry outage on a stack of their own: they wait
(a query that fails for want of Kafka is started again from its checkpoint, one line per attempt), need no human,
and afterwards every click is in Delta exactly once (`raw_clicks`) and in the compacted `enriched_clicks` output
(`enrich_clicks`, which writes to Kafka). (Before, the job's own progress recorder crashed the process
when the broker came back: an admin request left pending in librdkafka.)

Without the registry, batches go on with the writer schemas the job knows; only a record of a schema id it does not
know makes it wait (it might be a version registered meanwhile), and once the registry answers that the id is
unknown, the record is a dead letter.

The ingest side shares the broker outage: two `kappa produce` runs stream files into a topic that is not compacted
when the broker goes away. One waits the outage out (KAPPA_PRODUCE_TIMEOUT_S, longer than the outage) and exits 0;
the other, given a timeout shorter than the outage, names the rows it could not confirm and exits 3, and run again
after the outage adds exactly those the topic does not hold. Every row of both files is then in the topic once.

Each job's own lines show that it saw each outage and waited it out: while the broker was away, its lines name
the lost broker (the platform's line per attempt when a query failed for want of Kafka, or the Kafka client's
timeout that Spark logs while a batch waits for it), then batches of rows once it was back; its line while the
registry was away (one per attempt, each saying when it starts again), and raw_clicks' batch that dead-letters
the unknown id once the registry answers (the lines' own times, against the clock of the outages). In the runs
seen so far, a two-minute broker outage never failed a query: both held their batch (Spark's Kafka offset reader
retries) and went on, so the platform's Kafka retry line is checked only when it appears; the registry outage
fails both jobs' queries, and their lines are."""

import json
import re
import signal
import subprocess
import threading
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest

from jobs.clickstream.generator import clicks
from kappa.contracts.dead_letter_format import DeadLetterKind
from kappa.contracts.topic_declarations import Cleanup, Topic
from kappa.contracts.wire_format import frame
from kappa.core.settings import KappaSettings, load_settings
from kappa.kafka.clients import Outgoing, produce_all
from kappa.ops.dlq import inspect
from kappa.runtime import run_record
from kappa.runtime.run_record import RunState
from kappa.spark.session import SHORT_RUN_JVM
from kappa.stack import LocalStack
from tests.e2e.faults import (
    OUTAGE_S,
    click_row,
    encode_clicks,
    event_ids,
    live_keys,
    produce_clicks,
    records,
    topic_named,
)
from tests.integration.replay_pipeline import deploy_copy
from tests.waiting import wait_until

PORTS = {"kafka_port": 23092, "controller_port": 23192, "registry_port": 23081}
BROKER, REGISTRY = "kafka-1", "registry"
REGISTRY_OUTAGE_S = 30  # with a record of an unknown schema id waiting for it
INGEST = "outage_ingest"  # a source topic of retained, not compacted, records: a duplicate there stays
INGEST_DECLARATION = (
    f'INGEST = Topic(name="{INGEST}", partitions=2, cleanup=Cleanup.DELETE, retention_ms=FOREVER, '
    'value_schema="clicks.avsc", key_field="event_id", partition_field="user_id", doc="kappa produce under fire")'
    "\n\nUSER_PROFILES = Topic("
)
STREAMING_ROWS = 150  # of each file in the topic before the broker goes away
SHORT_TIMEOUT_S = 15  # the impatient producer's KAPPA_PRODUCE_TIMEOUT_S: well inside the outage


LOGGED = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")  # a log line's time (local, as asctime)
BATCH = re.compile(r" batch \d+: (\d+) rows, ")  # a batch's progress line, with the rows it read
# What a job's lines say when Kafka does not answer: the platform's line before it starts a failed query again, or
# the Kafka client's timeout in Spark's warnings while a batch waits for the broker (its query has not failed).
KAFKA_LOST = (": Kafka is unavailable (", "org.apache.kafka.common.errors.TimeoutException")


def _logged(lines: list[str], text: str, start: float, end: float) -> list[str]:
    """The log lines holding `text` whose own time is within [start, end] (seconds since the epoch)."""
    found = []
    for line in lines:
        at = LOGGED.match(line)
        if at and text in line:
            logged = datetime.strptime(at.group(1), "%Y-%m-%d %H:%M:%S,%f").astimezone().timestamp()  # local time
            if start <= logged <= end:
                found.append(line)
    return found


def _batches_with_rows(lines: list[str], start: float, end: float) -> list[str]:
    """Progress lines of batches that read rows, logged within [start, end]."""
    return [line for line in _logged(lines, " batch ", start, end) if (m := BATCH.search(line)) and int(m.group(1))]


def _rows_file(path: Path, first: int, count: int) -> set[str]:
    """Clicks `first` to `first + count` of a seeded stream as a JSON-lines file a user would produce; their ids."""
    made = list(clicks(first + count, seed=77))[first:]
    path.write_text("".join(json.dumps(click_row(c)) + "\n" for c in made))
    return {c.event_id for c in made}


def _streaming(settings: KappaSettings, *files: set[str]) -> bool:
    """Whether each file has at least STREAMING_ROWS rows in the ingest topic."""
    keys = Counter(key for key, _alive in records(settings, INGEST))
    return all(sum(keys[key] for key in ids) >= STREAMING_ROWS for ids in files)


def _process_state(pid: int) -> str:
    """A waiting process's state, threads and kernel wait channel (Linux /proc)."""
    proc = Path(f"/proc/{pid}")
    try:
        status = dict(line.split(":\t", 1) for line in (proc / "status").read_text().splitlines() if ":\t" in line)
        wchan = (proc / "wchan").read_text()
    except OSError as exc:
        return f"no process state: {exc}"
    return f"state {status.get('State', '?').strip()}, {status.get('Threads', '?').strip()} threads, wchan {wchan}"


@pytest.mark.slow
def test_continuous_jobs_wait_out_broker_and_registry_outages_and_lose_nothing(tmp_path: Path) -> None:
    settings = load_settings(
        **PORTS, stack_dir=tmp_path / "stack", spark_shuffle_partitions=2, spark_driver_java_options=SHORT_RUN_JVM
    )
    stack = LocalStack(settings)
    stack.up()
    jobs: dict[str, subprocess.Popen[str]] = {}
    producers: dict[str, subprocess.Popen[str]] = {}  # kappa produce runs, by how long they wait for Kafka
    outputs: dict[str, list[str]] = {"raw_clicks": [], "enrich_clicks": []}  # read as it comes: a full pipe blocks
    output = outputs["raw_clicks"]
    try:
        pipeline = deploy_copy(
            settings, tmp_path / "pipeline", "outage_", catalog_edits={"USER_PROFILES = Topic(": INGEST_DECLARATION}
        )
        source = Topic("outage_clicks", 4, Cleanup.COMPACT, value_schema="clicks.avsc")
        table = tmp_path / "pipeline" / "delta" / "raw_clicks" / "v1"
        enriched = topic_named(settings, r"outage_enriched_clicks(\.v1)?")
        before = produce_clicks(settings, source, 600, first=0)
        for name, lines in outputs.items():
            jobs[name] = started = pipeline.popen("jobs", "run", name)
            threading.Thread(target=lambda s=started, o=lines: o.extend(s.stdout), daemon=True).start()
        wait_until(lambda: len(event_ids(table)) == len(before), 240, "the first clicks in Delta", log=output)
        wait_until(lambda: live_keys(settings, enriched) == before, 240, "the first clicks enriched", log=output)

        # Two files streamed into the ingest topic (100 rows/s): the broker goes away while both are half-way.
        patient, impatient = tmp_path / "patient.jsonl", tmp_path / "impatient.jsonl"
        patient_ids, impatient_ids = _rows_file(patient, 0, 3000), _rows_file(impatient, 3000, 2000)
        impatient_env = {"KAPPA_PRODUCE_TIMEOUT_S": str(SHORT_TIMEOUT_S)}
        producers |= {
            "patient": pipeline.popen("produce", INGEST, str(patient), "--rate", "100"),
            "impatient": pipeline.popen("produce", INGEST, str(impatient), "--rate", "100", env=impatient_env),
        }
        said: dict[str, list[str]] = {name: [] for name in producers}
        for name, running in producers.items():
            threading.Thread(target=lambda r=running, o=said[name]: o.extend(r.stdout), daemon=True).start()
        # Each producer has rows acknowledged before the broker goes: both stream (under load one starts seconds
        # after the other; its producer must have met the broker, the outage is of a running ingest).
        wait_until(lambda: _streaming(settings, patient_ids, impatient_ids), 90, "both files are streaming",
                   log=said["patient"])  # fmt: skip

        clock = {"broker gone": time.time()}  # when each outage began and ended, against the jobs' log lines
        said_by = {"broker gone": {name: len(lines) for name, lines in outputs.items()}}  # where each job's lines were
        stack.stop_component(BROKER)  # every Kafka client of the job loses it: source, dead letters, progress
        back_at = time.monotonic() + OUTAGE_S
        while time.monotonic() < back_at:  # the outage itself, not a wait for a condition
            for name, running in jobs.items():
                assert running.poll() is None, f"{name} exited during the outage:\n" + "".join(outputs[name][-40:])
            assert producers["patient"].poll() is None, "".join(said["patient"])  # it waits
            time.sleep(5)
        # The impatient one gave up on its unacknowledged rows inside the outage, and named them.
        assert producers["impatient"].wait(timeout=5) == 3, "".join(said["impatient"])
        clock["broker back"] = time.time()
        stack.start_component(BROKER)
        try:
            assert producers["patient"].wait(timeout=300) == 0, "".join(said["patient"])
        except subprocess.TimeoutExpired:  # what it said and what its process does, to see why it still waits
            raise AssertionError(
                "the patient producer still waits 300 s after the broker came back "
                f"({_process_state(producers['patient'].pid)}):\n" + "".join(said["patient"])
            ) from None
        again = pipeline.kappa("produce", INGEST, str(impatient))  # once Kafka answers: the rest, exactly once
        ingested = Counter(key for key, _alive in records(settings, INGEST))

        after = produce_clicks(settings, source, 400, first=600)
        wait_until(lambda: len(event_ids(table)) >= 1000, 300, "the clicks after the outage in Delta", log=output)

        # The registry goes away: clicks of known writer versions still flow.
        encoded, during = encode_clicks(settings, source, 200, first=1000)
        clock["registry gone"] = time.time()
        said_by["registry gone"] = {name: len(lines) for name, lines in outputs.items()}
        stack.stop_component(REGISTRY)
        produce_all(settings, source.name, encoded)
        wait_until(lambda: len(event_ids(table)) >= 1200, 300, "clicks in Delta without the registry", log=output)
        # A record of a schema id the job does not know: it waits for the registry instead of dead-lettering it.
        produce_all(settings, source.name, [Outgoing(b"unknown-id", frame(987654, b"\x02"))])
        back_at = time.monotonic() + REGISTRY_OUTAGE_S
        while time.monotonic() < back_at:  # the outage itself, not a wait for a condition
            for name, running in jobs.items():
                assert running.poll() is None, f"{name} exited without the registry:\n" + "".join(outputs[name][-40:])
            time.sleep(5)
        assert any("the schema registry is unavailable (" in line for line in output), "".join(output[-40:])
        clock["registry back"] = time.time()
        stack.start_component(REGISTRY)
        wait_until(
            lambda: inspect(settings, source.name).by_job == {"raw_clicks": 1, "enrich_clicks": 1},
            300,
            "the unknown schema id dead-lettered by each job once the registry says it is unknown",
            log=output,
        )
        letters = inspect(settings, source.name)
        wait_until(lambda: live_keys(settings, enriched) == before | after | during, 300, "every click enriched")
        enriched_keys = live_keys(settings, enriched)
        for running in jobs.values():
            running.send_signal(signal.SIGTERM)
        for running in jobs.values():
            running.wait(timeout=120)
    finally:
        for running in [*jobs.values(), *producers.values()]:
            if running.poll() is None:
                running.kill()
        stack.down(purge=True)
    assert sorted(event_ids(table)) == sorted(before | after | during)  # nothing lost, nothing twice
    _check_ingest(said, again.stdout, ingested, patient_ids, impatient_ids)
    assert enriched_keys == before | after | during  # the compacted output: every click, nothing else
    assert letters.by_kind == {DeadLetterKind.UNKNOWN_SCHEMA_ID: 1}  # one bad record, reported by each job once
    for name, lines in outputs.items():
        out = "".join(lines)
        assert jobs[name].returncode == 0, out[-3000:]
        # Each job waited for the registry while it was away, one line per attempt, saying when it starts again.
        waits = [line for line in lines if "is unavailable (" in line]
        registry_waits = _logged(
            lines, "the schema registry is unavailable (", clock["registry gone"], clock["registry back"]
        )
        assert registry_waits, f"{name} said nothing of the registry outage:\n{out[-3000:]}"
        assert all("starting again in" in line for line in waits), "\n".join(waits)
        # It saw the broker's outage (its lines from then on name the lost broker), and went on once the broker was
        # back: batches of rows (the clicks produced after the outage) before the registry went away.
        outage = lines[said_by["broker gone"][name] : said_by["registry gone"][name]]
        lost = [line for line in outage if any(marker in line for marker in KAFKA_LOST)]
        assert lost, f"{name} said nothing of the broker outage:\n{''.join(outage)[-3000:]}"
        assert _batches_with_rows(lines, clock["broker back"], clock["registry gone"]), f"{name}:\n{out[-3000:]}"
        assert "Traceback" not in out
        assert "stopped by signal" in out  # a clean stop after the outage, not a crash
        record = run_record.read(run_record.record_path(pipeline.settings(settings), name, 1))
        assert record is not None  # what `kappa jobs status` reads: stopped, its last wait as its last error
        assert record.state is RunState.STOPPED
        assert record.last_error == waits[-1].split(": ", 1)[1].split("; starting again in ")[0]
    # raw_clicks read on once the registry answered: the unknown id's batch (its progress line may come after the
    # dead letter the test waited for, and after the stop signal).
    assert _batches_with_rows(output, clock["registry back"], float("inf")), "".join(output[-40:])


def _check_ingest(
    said: dict[str, list[str]], again: str, ingested: Counter[str], patient: set[str], impatient: set[str]
) -> None:
    """Every row of both files in the ingest topic exactly once; each producer said what it went through."""
    assert set(ingested) == patient | impatient
    assert set(ingested.values()) == {1}  # none twice: not the waiting one's retries, not the re-run's
    patient_out, impatient_out = "".join(said["patient"]), "".join(said["impatient"])
    assert "is out of reach" in patient_out  # it saw the outage, and said so while it waited
    assert "answers again" in patient_out
    assert "produced 3000 records" in patient_out
    assert "Traceback" not in patient_out + impatient_out
    [unconfirmed] = [line for line in said["impatient"] if line.startswith("unconfirmed: ")]
    named = re.search(r"unconfirmed: (\d+) rows \(([\d, -]+)\)", unconfirmed)
    assert named is not None, unconfirmed
    count = int(named.group(1))
    rows = {n for span in named.group(2).split(", ") for n in _span(span)}
    assert count == len(rows) > 0  # the rows the outage left unconfirmed, each named
    # The re-run produced exactly the rows the topic did not hold: the unconfirmed ones that had not landed.
    produced, found = (int(n) for n in re.findall(r"produced (\d+) records.*?(\d+) rows were in the topic", again)[0])
    assert produced + found == len(impatient)
    assert produced <= count


def _span(text: str) -> range:
    first, _, last = text.partition("-")
    return range(int(first), int(last or first) + 1)
