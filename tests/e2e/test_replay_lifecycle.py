"""The replay lifecycle on one pipeline copy, as operators run it: the CLI step by step, every runbook as
written, and the Dagster UI.

One copy of the pipeline (its own topics, code, Delta, checkpoints and deployments on the session's stack) is
deployed once for the module: enrich_clicks v1 is live over the first part of the log. The three flows then
build on it, in this order, each starting from the version that is live and declared when it starts:

1. The replay protocol through the CLI: a logic change (a shorter profile lateness) as v2, killed halfway and
   resumed, stopped while it verifies (recorded as interrupted), verified, cut over, then rolled back while the
   log grows. A consumer following the alias sees every change exactly once; its table equals a fresh
   computation of v2 after the cutover and of v1 after the rollback. (v2's code is a second copy: the shared
   copy still declares v1 afterwards.)
2. Every runbook in replays/, its commands run as written: a planned logic change (v1 -> v2, v1 retired), a
   bug-fix replay (v3), a rollback (to v2), a replay from a timestamp (v4, cut over with --force after the
   verification fails as the runbook says it will) and a schema change (v5). The code changes the runbooks
   describe in prose are made here, on the copy; each deployment is stopped once the flow no longer needs it.
3. The Dagster UI in a real browser (Debian's chromium, headless, driven by Playwright, which downloads no
   browser here): the asset graph, and a replay of the next version launched from the Launchpad. The run's
   steps run the `kappa` CLI, so the test then asserts on what they did; then the output asset's plots, drawn
   from the health sensor's observations of the version gone live. Screenshots are kept in
   `build/test-artifacts/`.

Each flow also passes run alone (`pytest -k`): it reads the live version instead of assuming one.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from kappa.contracts.expectations import suite_for
from kappa.contracts.topic_declarations import Cleanup, Topic
from kappa.core.settings import KappaSettings
from kappa.kafka.aliases import AliasRegistry, Step
from kappa.kafka.clients import Outgoing, produce_all
from kappa.lifecycle import deployments
from kappa.lifecycle.lag import lag
from kappa.runtime.readers import AliasConsumer
from tests.conftest import PORT_OFFSET
from tests.integration.replay_pipeline import (
    CONFIG,
    REPO,
    Deployment,
    deploy_copy,
    enriched_table,
    produce,
    produce_clicks,
    rule,
)
from tests.waiting import wait_until

FIRST_PART = slice(0, 2200)  # the log when v1 goes live; the CLI flow adds the rest after its cutover
DECLARATION = "enrich_clicks/declaration.py"


@pytest.fixture(scope="module")
def pipeline(stack: KappaSettings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """The module's copy: topics, schemas and suites set up, the first part of the log, v1 live."""
    prefix = f"rl{uuid.uuid4().hex[:6]}_"  # short: the UI's asset graph truncates long names
    # One shuffle partition: one state store per stateful batch instead of two (the partition counts are
    # test_enrich_clicks_job's and test_sessionize_job's subject, not this module's).
    d = deploy_copy(
        stack, tmp_path_factory.mktemp("replay-lifecycle"), prefix, env={"KAPPA_SPARK_SHUFFLE_PARTITIONS": "1"}
    )
    produce(stack, d, FIRST_PART)
    d.kappa("jobs", "run", "enrich_clicks", "--available-now")  # the first version: live by definition
    yield d
    settings = d.settings(stack)
    for state in deployments.status(settings):  # no deployment of the copy outlives the module
        deployments.stop_if_running(settings, state.deployment.job, state.deployment.version, timeout_s=30)


def copy_steps(registry: AliasRegistry, dataset: str) -> list[Step]:
    """enrich_clicks' audit steps on this copy's dataset: the audit topic is the session stack's, and other
    modules' copies replay an enrich_clicks too."""
    return [s for s in registry.steps("enrich_clicks") if s.facts.get("dataset") == dataset]


def dataset_of(d: Deployment) -> str:
    return f"{d.prefix}enriched_clicks"


def live_version(registry: AliasRegistry, d: Deployment) -> int:
    alias = registry.live(dataset_of(d))
    assert alias is not None, f"{dataset_of(d)} has no live version"
    return alias.version


def declared_version(d: Deployment) -> int:
    found = re.search(r"version=(\d+),", (d.code / "jobs" / DECLARATION).read_text())
    assert found, "enrich_clicks declares no version"
    return int(found.group(1))


def stop_deployment(d: Deployment, version: int) -> None:
    """`kappa jobs stop`, as an operator ends a version the flow no longer needs (SIGTERM, after its batch)."""
    stopped = d.kappa("jobs", "stop", "enrich_clicks", "--version", str(version))
    assert f"enrich_clicks v{version}: stopped" in stopped.stdout, stopped.stdout


# --- 1. the replay protocol through the CLI -------------------------------------------------------------------


def a_value_of(stack: KappaSettings, topic: str) -> bytes:
    """The value bytes of one record of the topic (Confluent-framed Avro, as its writer produced it)."""
    consumer = Consumer({"bootstrap.servers": stack.bootstrap, "group.id": "test-replay-sample", "log_level": 0})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(4)])
        while True:
            message = consumer.poll(10)
            assert message is not None, f"{topic} holds no record"
            if message.error() is None and message.value() is not None:
                return bytes(message.value())
    finally:
        consumer.close()


def follow(consumer: AliasConsumer, seen: dict[str, dict[str, object] | None], counts: list[int]) -> None:
    """Drain the follower: apply every change to `seen`, count the changes of this round."""
    n = 0
    for change in consumer.changes(idle_timeout_s=4):
        seen[change.key] = change.value
        n += 1
    counts.append(n)


def follow_until(
    consumer: AliasConsumer,
    seen: dict[str, dict[str, object] | None],
    counts: list[int],
    expected: dict[str, tuple[int | None, str]],
) -> None:
    """Drain the follower until its table is `expected`, for at most 120 s (the caller asserts). For records
    written while it waited: the writer's progress says they are written, and one idle timeout of the
    follower's fetch is no promise that they reached it on a loaded machine."""
    deadline = time.monotonic() + 120
    follow(consumer, seen, counts)
    while enriched_table(seen) != expected and time.monotonic() < deadline:
        follow(consumer, seen, counts)


@pytest.mark.timeout(1200)
def test_replay_cutover_and_rollback_through_the_cli(
    stack: KappaSettings, pipeline: Deployment, tmp_path: Path, unique_name: Callable[[str], str]
) -> None:
    v1 = pipeline
    registry = AliasRegistry(stack)
    dataset = dataset_of(v1)
    assert live_version(registry, v1) == 1, "the CLI flow starts where the module's copy starts: v1 live"

    enriched = Topic(dataset, 4, Cleanup.COMPACT, value_schema="enriched_clicks.avsc")
    seen: dict[str, dict[str, object] | None] = {}
    counts: list[int] = []
    consumer = AliasConsumer(stack, enriched, group=unique_name("follower"), alias_poll_s=0.5)
    try:
        follow(consumer, seen, counts)
        v1_first = rule(CONFIG, 20, FIRST_PART)
        assert enriched_table(seen) == v1_first

        # The logic change, in a new copy of the code: v1 keeps its own.
        v2 = v1.copy(tmp_path / "v2")
        v2.edit("enrich_clicks/declaration.py", "version=1,", "version=2,")
        v2.edit("enrich_clicks/declaration.py", "profile_lateness_minutes=20", "profile_lateness_minutes=5")
        v2_first = rule(CONFIG, 5, FIRST_PART)
        differing = {k for k in v1_first if v1_first[k] != v2_first[k]}
        assert differing, "the logic change must change some answers, or the test proves nothing"

        # Cutover before verification is refused.
        refused = v2.kappa("replay", "cutover", "enrich_clicks", check=False)
        assert refused.returncode == 2
        assert "has not passed verification" in refused.stderr

        # Replay, killed after its first catch-up batch, then launched again: it resumes.
        replay = v2.popen("replay", "start", "enrich_clicks", "--max-offsets-per-trigger", "400", "--by", "alice")
        assert replay.stdout is not None
        for line in replay.stdout:
            if "catch-up enrich_clicks v2:" in line and " 0/" not in line:
                os.killpg(replay.pid, signal.SIGKILL)
                break
        replay.wait(60)
        # Its checkpoint began at the earliest record: a relaunch asking for another start is refused, not ignored.
        moved = v2.kappa("replay", "start", "enrich_clicks", "--from", "2026-01-01T00:00:00Z", check=False)
        assert moved.returncode == 2, moved.stdout + moved.stderr
        assert "enrich_clicks v2 started from earliest" in moved.stderr
        # Relaunched, it resumes and catches up. Stopped while it verifies (SIGTERM to its Python, as Dagster
        # stops a run), it records the step as interrupted and exits 130; `replay verify` finishes the job.
        relaunch = v2.popen("replay", "start", "enrich_clicks", "--by", "alice")  # the rest in one batch
        assert relaunch.stdout is not None
        lines = []
        for line in relaunch.stdout:
            lines.append(line)
            if "verifying enrich_clicks v2" in line:
                relaunch.send_signal(signal.SIGTERM)
                break
        out = "".join(lines) + relaunch.communicate(timeout=120)[0]
        assert relaunch.returncode == 130, out[-3000:]
        assert "kappa: interrupted" in out
        resumed = [s for s in copy_steps(registry, dataset) if s.step == "prepare" and s.to_version == 2]
        assert resumed[-1].facts["resuming"] is True  # the relaunch found the killed run's checkpoint
        stopped = [s for s in copy_steps(registry, dataset) if s.step == "verify"][-1]
        assert (stopped.outcome, stopped.facts["error"]) == ("interrupted", "stopped by SIGTERM")
        # Meanwhile the live v1 goes on writing: here a key that no replay of this log can have. Verification
        # compares with v1 as it was when the catch-up started, so the key is not counted as lost.
        later = Outgoing(key=unique_name("written-later").encode(), value=a_value_of(stack, f"{dataset}.v1"))
        produce_all(stack, f"{dataset}.v1", [later])
        done = v2.kappa("replay", "verify", "enrich_clicks", "--by", "alice", check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "verification: PASSED" in done.stdout
        assert f"{len(differing):,} changed" in done.stdout  # the reconciliation found exactly the changed keys
        verified = [s for s in copy_steps(registry, dataset) if s.step == "verify"]
        quality = verified[-1].facts["quality"]  # the data contract ran on the whole new output, and held
        suite = suite_for(v2.settings(stack), dataset)
        assert suite is not None
        assert quality["suite"] == suite.name
        assert (quality["success"], quality["evaluated"]) == (True, len(suite.expectations)), quality

        assert " as of " in done.stdout  # against v1 as of the catch-up's start
        produce_all(stack, f"{dataset}.v1", [Outgoing(key=later.key, value=None)])  # v1 deletes it again
        follow(consumer, seen, counts)  # the follower sees both before the cutover
        assert seen.get(later.key.decode()) is None

        # A cutover to a version that does not run is refused: readers would follow a version nobody updates.
        idle = v2.kappa("replay", "cutover", "enrich_clicks", "--version", "2", check=False)
        assert idle.returncode == 2
        assert "enrich_clicks v2 is not running" in idle.stderr
        v2.kappa("replay", "golive", "enrich_clicks", "--by", "alice")
        cut = v2.kappa("replay", "cutover", "enrich_clicks", "--version", "2", "--by", "alice")
        assert "v1 -> v2" in cut.stdout
        follow(consumer, seen, counts)
        assert counts[-1] == len(differing)  # each changed key once, nothing else again
        assert enriched_table(seen) == v2_first

        # The log grows; both versions keep running, the follower reads v2.
        v1.kappa("jobs", "start", "enrich_clicks")
        produce(stack, v1, slice(FIRST_PART.stop, None))
        wait_until(
            lambda: v1.caught_up(stack, {"enrich_clicks": 1}) and v2.caught_up(stack, {"enrich_clicks": 2}),
            300,
            "both versions to read the grown log",
            interval_s=1,
        )
        grown = rule(CONFIG, 5, slice(0, None))
        follow_until(consumer, seen, counts, grown)
        got = enriched_table(seen)
        assert got == grown, (  # what tells a slow follower from a writer that did not write, if it ever fails
            f"{len(grown.keys() - got.keys())} keys missing, {sum(got[k] != v for k, v in grown.items() if k in got)} "
            f"with another value; v2's lag now: {lag(v2.settings(stack), 'enrich_clicks', 2).total}"
        )

        back = v2.kappa("replay", "rollback", "enrich_clicks", "--by", "bob")
        assert "v2 -> v1" in back.stdout
        follow(consumer, seen, counts)
        assert enriched_table(seen) == rule(CONFIG, 20, slice(0, None))
        assert consumer.version == 1
        # A second rollback would undo the first, to an unverified state: refused, naming the way back.
        again = v2.kappa("replay", "rollback", "enrich_clicks", "--by", "bob", check=False)
        assert again.returncode == 2
        assert "is at v1 by a rollback from v2" in again.stderr
    finally:
        consumer.close()
        for version in (1, 2):  # the next flow starts from v1 live, nothing running
            deployments.stop_if_running(v1.settings(stack), "enrich_clicks", version, timeout_s=30)

    steps = [(s.step, s.from_version, s.to_version, s.outcome, s.by) for s in copy_steps(registry, dataset)]
    assert ("cutover", 1, 2, "ok", "alice") in steps
    assert ("rollback", 2, 1, "ok", "bob") in steps
    assert any(s[0] == "cutover" and s[2] == 2 and s[3] == "refused" for s in steps)
    history = [(a.version, a.previous_version, a.changed_by) for a in registry.history(dataset)]
    assert history[-2:] == [(2, 1, "alice"), (1, 2, "bob")]


# --- 2. every runbook in replays/, as written ---------------------------------------------------------------


RUNBOOKS = REPO / "replays"
EXPECTED_EXIT = re.compile(r"#\s*exits\s+(\d+)")


def commands(runbook: str) -> list[tuple[list[str], int]]:
    """The runbook's commands (lines of its bash blocks) and the exit status each is expected to end with."""
    text = (RUNBOOKS / runbook).read_text()
    found = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.DOTALL):
        for line in block.splitlines():
            if not line.strip():
                continue
            expected = EXPECTED_EXIT.search(line)
            command = shlex.split(line.split("#")[0])
            assert command[0] == "kappa", f"{runbook}: a step is one kappa command, got {line!r}"
            found.append((command[1:], int(expected.group(1)) if expected else 0))
    assert found, f"{runbook} has no commands"
    return found


def run(d: Deployment, runbook: str) -> str:
    """Run every command of the runbook; return their output."""
    out = []
    for args, status in commands(runbook):
        done = d.kappa(*args, check=False)
        assert done.returncode == status, (
            f"{runbook}: kappa {shlex.join(args)} exited {done.returncode}, expected {status}:\n"
            f"{done.stdout}\n{done.stderr}"
        )
        out.append(done.stdout)
    return "\n".join(out)


def test_every_runbook_in_replays_is_covered() -> None:
    assert {p.name for p in RUNBOOKS.glob("*.md")} - {"README.md"} == {
        "planned-logic-change.md",
        "bug-fix-replay.md",
        "rollback.md",
        "replay-from-timestamp.md",
        "schema-change.md",
        "cascade-replay.md",  # and the cascade's two: tests/e2e/test_cascade_replay.py
        "cascade-rollback.md",
    }


@pytest.mark.timeout(1800)
def test_runbooks_as_written(stack: KappaSettings, pipeline: Deployment) -> None:
    d = pipeline
    registry = AliasRegistry(stack)
    assert (live_version(registry, d), declared_version(d)) == (1, 1), (
        "the runbooks start where the module's copy starts: v1 live and declared (the planned change retires v1)"
    )
    schemas = d.settings(stack).schemas_path  # the copy's own: the schema change edits it

    def live() -> int:
        return live_version(registry, d)

    started: list[int] = []
    try:
        # A planned change: a shorter profile lateness, as v2.
        d.edit(DECLARATION, "version=1,", "version=2,")
        d.edit(DECLARATION, "profile_lateness_minutes=20", "profile_lateness_minutes=5")
        out = run(d, "planned-logic-change.md")
        started.append(2)
        assert "checks passed" in out
        assert "quality suite enriched_clicks: ok" in out  # the data contract ran on the new output
        assert "verification: PASSED" in out
        assert "v1 -> v2" in out
        assert "v1 retired" in out
        assert live() == 2

        # A bug fix: the lateness should have been 10, as v3.
        d.edit(DECLARATION, "version=2,", "version=3,")
        d.edit(DECLARATION, "profile_lateness_minutes=5", "profile_lateness_minutes=10")
        out = run(d, "bug-fix-replay.md")
        started.append(3)
        assert "verification: PASSED" in out
        assert "v2 -> v3" in out
        assert live() == 3

        out = run(d, "rollback.md")
        assert "v3 -> v2" in out
        assert live() == 2
        stop_deployment(d, 3)  # the rolled-back version: the flow has no more use for it

        # From a timestamp: v4 has no output before it, so verification fails, and the cutover is forced.
        d.edit(DECLARATION, "version=3,", "version=4,")
        out = run(d, "replay-from-timestamp.md")
        started.append(4)
        assert "verification: FAILED" in out
        assert "only in live" in out
        assert live() == 4
        forced = [s for s in copy_steps(registry, dataset_of(d)) if s.step == "cutover" and s.to_version == 4]
        assert forced[-1].facts["forced"] is True
        stop_deployment(d, 2)

        # A schema change: enriched clicks gain the lateness the job applied, with a default; v5.
        avsc = schemas / "enriched_clicks.avsc"
        avsc.write_text(avsc.read_text().replace(
            '"doc": "Country of the user at event_time; null without a profile."}',
            '"doc": "Country of the user at event_time; null without a profile."},\n'
            '    {"name": "profile_lateness_minutes", "type": "int", "default": 20, '
            '"doc": "The profile lateness L the enrichment applied (minutes)."}',
        ))  # fmt: skip
        d.edit(DECLARATION, "version=4,", "version=5,")
        d.edit(
            DECLARATION,
            "topics), lateness_ms, disorder_ms)",  # the job's rows: the output gains a column
            "topics), lateness_ms, disorder_ms).withColumn(\n"
            '        "profile_lateness_minutes", F.lit(settings.profile_lateness_minutes)\n'
            "    )",
        )
        out = run(d, "schema-change.md")
        started.append(5)
        schema_line = next(line for line in out.splitlines() if line.strip().startswith("schema:"))
        assert "compatible, registered at prepare" in schema_line, schema_line
        assert "verification: PASSED" in out
        assert live() == 5
        stop_deployment(d, 4)
        stop_deployment(d, 5)  # the runbooks are done; the next flow replays from the alias, not a running job
    finally:
        for version in started:  # whatever a failure left running
            deployments.stop_if_running(d.settings(stack), "enrich_clicks", version, timeout_s=30)

    steps = [(s.step, s.from_version, s.to_version, s.outcome) for s in copy_steps(registry, dataset_of(d))]
    for expected in [("cutover", 1, 2, "ok"), ("retire", 2, 1, "ok"), ("cutover", 2, 3, "ok"),
                     ("rollback", 3, 2, "ok"), ("cutover", 2, 4, "ok"), ("cutover", 4, 5, "ok")]:  # fmt: skip
        assert expected in steps


# --- 3. the Dagster UI ------------------------------------------------------------------------------------------


CHROMIUM = Path("/usr/bin/chromium")  # `make system-packages` installs it
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
DAGSTER_PORT = 13300 + PORT_OFFSET  # below the ephemeral range, like the stack's ports
LOCATION = "dagster_project.definitions"
ARTIFACTS = REPO / "build" / "test-artifacts"
OPERATOR = "ui-test-operator"


def _serving(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@pytest.fixture
def dagster_ui(tmp_path: Path) -> Callable[[Deployment], str]:
    """Start `dagster dev` (webserver, daemon, code server) for a pipeline copy; stop its process group after."""
    started: list[subprocess.Popen[bytes]] = []

    def start(d: Deployment) -> str:
        home = tmp_path / "dagster_home"
        home.mkdir()
        (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
        log = (tmp_path / "dagster-dev.log").open("wb")
        process = subprocess.Popen(
            [sys.executable, "-m", "dagster", "dev", "-h", "127.0.0.1", "-p", str(DAGSTER_PORT), "-m", LOCATION],
            cwd=d.code,  # the copy's jobs/ come first; dagster_project from the repository
            env={**d.env, "DAGSTER_HOME": str(home), "PYTHONPATH": f"{d.code}{os.pathsep}{REPO}"},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        started.append(process)
        url = f"http://127.0.0.1:{DAGSTER_PORT}"

        def serving() -> bool:
            assert process.poll() is None, (tmp_path / "dagster-dev.log").read_text()[-4000:]
            return _serving(f"{url}/server_info")

        wait_until(serving, 180, "dagster dev serves its UI", log=tmp_path / "dagster-dev.log", interval_s=1)
        return url

    yield start  # type: ignore[misc]
    for process in started:
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    assert CHROMIUM.exists(), f"no {CHROMIUM}: `make system-packages` installs Debian's chromium"
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        yield chromium
        chromium.close()


# How long the UI may take to show what it is loading. Playwright's `expect` waits 5 s unless told (the page's
# default timeout does not reach it), and on a busy machine the webserver takes longer than that to load the code
# location after a first request: the page says "Loading dagster_project.definitions…" meanwhile.
UI_WAIT_MS = 120_000


def _plot_the_live_version(stack: KappaSettings, d: Deployment, dagster_home: Path) -> int:
    """Tick the health sensor of the copy's code location 6 times, 5 s apart, on the UI's instance while 200
    clicks arrive before each tick; how many ticks observed something."""
    clicks = Topic(f"{d.prefix}clicks", 4, Cleanup.COMPACT, value_schema="clicks.avsc")
    env = {**d.env, "DAGSTER_HOME": str(dagster_home), "PYTHONPATH": f"{d.code}{os.pathsep}{REPO}"}
    command = [sys.executable, "-m", "tests.e2e.sensor_ticks", "--ticks", "6", "--every", "5"]
    ticks = subprocess.Popen(command, cwd=d.code, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)  # fmt: skip
    for burst in range(6):
        produce_clicks(stack, clicks, 200, seed=100 + burst)
        time.sleep(5)
    out = ticks.communicate(timeout=300)[0]
    assert ticks.returncode == 0, out[-3000:]
    return len(re.findall(r"tick \d+: [1-9]\d* observations", out))


def _run_ended(url: str, run_id: str) -> bool:
    """Whether a Dagster run has ended, asked of the webserver's GraphQL API."""
    from dagster import DagsterRunStatus
    from dagster_graphql import DagsterGraphQLClient

    address = urllib.parse.urlsplit(url)
    client = DagsterGraphQLClient(address.hostname or "127.0.0.1", port_number=address.port, timeout=30)
    ended = (DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED)
    return client.get_run_status(run_id) in ended


@pytest.mark.timeout(1500)
def test_launch_a_replay_from_the_dagster_ui(
    stack: KappaSettings,
    pipeline: Deployment,
    dagster_ui: Callable[[Deployment], str],
    browser: object,
    tmp_path: Path,
) -> None:
    from playwright.sync_api import Browser, expect

    assert isinstance(browser, Browser)
    d, prefix = pipeline, pipeline.prefix
    registry = AliasRegistry(stack)
    dataset = dataset_of(d)
    old = live_version(registry, d)
    assert declared_version(d) == old, "the copy declares the live version"
    new = old + 1  # a logic change: another profile lateness than any earlier version had
    lateness = re.search(r"profile_lateness_minutes=(\d+)", (d.code / "jobs" / DECLARATION).read_text())
    assert lateness is not None
    d.edit(DECLARATION, f"version={old},", f"version={new},")
    d.edit(DECLARATION, lateness.group(0), "profile_lateness_minutes=7")

    url = dagster_ui(d)
    page = browser.new_page(viewport={"width": 1600, "height": 1000})
    page.set_default_timeout(UI_WAIT_MS)
    # A first visit asks to join the community, in a dialog that may open at any moment and covers the page:
    # Playwright dismisses it before whichever action it would block.
    page.add_locator_handler(page.get_by_role("button", name="Skip"), lambda skip: skip.click())
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        # The asset graph: every job's output, lineage from the source topics.
        page.goto(f"{url}/locations/{LOCATION}/asset-groups/jobs", wait_until="networkidle")
        topics = [f"{prefix}{name}" for name in ("clicks", "user_profiles", "enriched_clicks", "sessions")]
        for asset in ("raw_clicks", "page_stats", "user_activity", *topics):
            expect(page.get_by_text(asset, exact=True).first).to_be_visible(timeout=UI_WAIT_MS)
        page.screenshot(path=str(ARTIFACTS / "dagster-ui-asset-graph.png"))

        # The Launchpad of replay_enrich_clicks: the declared version is the default; who acts is typed in.
        page.goto(f"{url}/locations/{LOCATION}/jobs/replay_enrich_clicks/playground", wait_until="networkidle")
        expect(page.get_by_text(f"version: {new}")).to_be_visible(timeout=UI_WAIT_MS)
        page.locator(".CodeMirror").first.click()
        page.keyboard.press("Control+A")
        page.keyboard.type(f"by: {OPERATOR}\nfrom: earliest\nversion: {new}\n")
        expect(page.get_by_text("No errors")).to_be_visible(timeout=UI_WAIT_MS)
        page.get_by_role("button", name="Launch Run").click()

        # The run page: wait for the run to end, then look at how it ended. Meanwhile the browser is away from it:
        # a run page streams its logs, and drawing them for minutes cost as much CPU as the replay it shows.
        page.wait_for_url("**/runs/**")
        run_page = page.url
        run_id = run_page.rstrip("/").split("/")[-1]
        page.goto("about:blank")
        wait_until(lambda: _run_ended(url, run_id), timeout_s=900,
                   what=f"the Dagster run {run_id} ends", interval_s=2)  # fmt: skip
        page.goto(run_page, wait_until="networkidle")
        ended = page.get_by_text("Success", exact=True).or_(page.get_by_text("Failure", exact=True))
        expect(ended.first).to_be_visible(timeout=UI_WAIT_MS)
        page.screenshot(path=str(ARTIFACTS / "dagster-ui-replay-run.png"), full_page=True)
        expect(page.get_by_text("Success", exact=True).first).to_be_visible(timeout=1_000)

        # The output asset's plots (its overview's metadata section): the health sensor's observations of the
        # version now live, while clicks arrive in bursts (the test ticks the sensor every 5 s; its daemon does
        # every 30 s).
        page.goto("about:blank")  # nothing to draw while the sensor ticks
        plotted = _plot_the_live_version(stack, d, tmp_path / "dagster_home")
        assert plotted >= 3, "the sensor observed the live version at fewer than 3 ticks"
        page.goto(f"{url}/assets/kafka/{prefix}enriched_clicks", wait_until="networkidle")
        page.get_by_role("button", name="Plots").click()  # the metadata section's table, drawn over time
        plot = page.get_by_text("input_records_per_s").last
        expect(plot).to_be_visible(timeout=UI_WAIT_MS)
        plot.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "dagster-ui-asset-plots.png"), full_page=True)
    finally:
        page.screenshot(path=str(ARTIFACTS / "dagster-ui-last.png"), full_page=True)
        deployments.stop_if_running(d.settings(stack), "enrich_clicks", new, timeout_s=30)  # its go-live

    # What the run's steps did, in the platform's own records.
    alias = registry.live(dataset)
    assert alias is not None
    assert (alias.version, alias.previous_version, alias.changed_by) == (new, old, OPERATOR)
    mine = [  # other copies record steps of enrich_clicks too; this run's are this dataset's, by this operator
        s for s in copy_steps(registry, dataset) if s.to_version == new and s.by == OPERATOR
    ]  # fmt: skip
    steps = [(s.step, s.outcome) for s in mine]
    for step in ("check", "prepare", "catch-up", "verify", "go-live", "cutover"):
        assert (step, "ok") in steps, (step, steps, run_id)
    [verified] = [s for s in mine if s.step == "verify"]
    quality = verified.facts["quality"]  # what the blocking replay_quality check showed: the suite ran and held
    assert (quality["suite"], quality["success"]) == ("enriched_clicks", True), quality
