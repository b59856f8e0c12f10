"""Continuous jobs outlive a broker outage of two minutes and a registry outage on a stack of their own: they wait
(a query that fails for want of Kafka is started again from its checkpoint, one line per attempt), need no human,
and afterwards every click is in Delta exactly once (`raw_clicks`) and in the compacted `enriched_clicks` output
(`enrich_clicks`, which writes to Kafka). (Before, the job's own progress recorder crashed the process
when the broker came back: an admin request left pending in librdkafka.)

Without the registry, batches go on with the writer schemas the job knows; only a record of a schema id it does not
know makes it wait (it might be a version registered meanwhile), and once the registry answers that the id is
unknown, the record is a dead letter."""

import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from kappa.contracts.dead_letter_format import DeadLetterKind
from kappa.contracts.topic_declarations import Cleanup, Topic
from kappa.contracts.wire_format import frame
from kappa.core.settings import load_settings
from kappa.kafka.clients import Outgoing, produce_all
from kappa.ops.dlq import inspect
from kappa.runtime import run_record
from kappa.runtime.run_record import RunState
from kappa.stack import LocalStack
from tests.conftest import SHORT_RUN_JVM
from tests.e2e.faults import OUTAGE_S, encode_clicks, event_ids, live_keys, produce_clicks, topic_named
from tests.integration.replay_pipeline import deploy_copy
from tests.waiting import wait_until

PORTS = {"kafka_port": 23092, "controller_port": 23192, "registry_port": 23081}
BROKER, REGISTRY = "kafka-1", "registry"
REGISTRY_OUTAGE_S = 30  # with a record of an unknown schema id waiting for it


@pytest.mark.slow
def test_continuous_jobs_wait_out_broker_and_registry_outages_and_lose_nothing(tmp_path: Path) -> None:
    settings = load_settings(
        **PORTS, stack_dir=tmp_path / "stack", spark_shuffle_partitions=2, spark_driver_java_options=SHORT_RUN_JVM
    )
    stack = LocalStack(settings)
    stack.up()
    jobs: dict[str, subprocess.Popen[str]] = {}
    outputs: dict[str, list[str]] = {"raw_clicks": [], "enrich_clicks": []}  # read as it comes: a full pipe blocks
    output = outputs["raw_clicks"]
    try:
        pipeline = deploy_copy(settings, tmp_path / "pipeline", "outage_")
        source = Topic("outage_clicks", 4, Cleanup.COMPACT, value_schema="clicks.avsc")
        table = tmp_path / "pipeline" / "delta" / "raw_clicks" / "v1"
        enriched = topic_named(settings, r"outage_enriched_clicks(\.v1)?")
        before = produce_clicks(settings, source, 600, first=0)
        for name, lines in outputs.items():
            jobs[name] = started = pipeline.popen("jobs", "run", name)
            threading.Thread(target=lambda s=started, o=lines: o.extend(s.stdout), daemon=True).start()  # type: ignore[arg-type, misc]
        wait_until(lambda: len(event_ids(table)) == len(before), 240, "the first clicks in Delta", log=output)
        wait_until(lambda: live_keys(settings, enriched) == before, 240, "the first clicks enriched", log=output)

        stack.stop_component(BROKER)  # every Kafka client of the job loses it: source, dead letters, progress
        back_at = time.monotonic() + OUTAGE_S
        while time.monotonic() < back_at:  # the outage itself, not a wait for a condition
            for name, running in jobs.items():
                assert running.poll() is None, f"{name} exited during the outage:\n" + "".join(outputs[name][-40:])
            time.sleep(5)
        stack.start_component(BROKER)

        after = produce_clicks(settings, source, 400, first=600)
        wait_until(lambda: len(event_ids(table)) >= 1000, 300, "the clicks after the outage in Delta", log=output)

        # The registry goes away: clicks of known writer versions still flow.
        encoded, during = encode_clicks(settings, source, 200, first=1000)
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
        for running in jobs.values():
            if running.poll() is None:
                running.kill()
        stack.down(purge=True)
    assert sorted(event_ids(table)) == sorted(before | after | during)  # nothing lost, nothing twice
    assert enriched_keys == before | after | during  # the compacted output: every click, nothing else
    assert letters.by_kind == {DeadLetterKind.UNKNOWN_SCHEMA_ID: 1}  # one bad record, reported by each job once
    for name, lines in outputs.items():
        out = "".join(lines)
        assert jobs[name].returncode == 0, out[-3000:]
        assert all("starting again in" in line for line in lines if "is unavailable (" in line)  # one line each
        assert "Traceback" not in out
        assert "stopped by signal" in out  # a clean stop after the outage, not a crash
        record = run_record.read(run_record.record_path(pipeline.settings(settings), name, 1))
        assert record is not None  # what `kappa jobs status` reads: stopped, its last wait as its last error
        assert record.state is RunState.STOPPED
        waits = [line for line in lines if "is unavailable (" in line]
        assert record.last_error == (waits[-1].split(": ", 1)[1].split("; starting again in ")[0] if waits else None)
