"""The Dagster UI in a real browser: a data engineer finds the pipeline's asset graph, launches a replay of
enrich_clicks from the Launchpad, and watches it succeed.

Debian's chromium, headless, driven by Playwright (which downloads no browser here). `dagster dev` serves the
code location of a pipeline copy (its own topics, Delta, checkpoints and deployments on the session's stack)
where v1 of enrich_clicks is live and the code declares v2. The run's steps run the `kappa` CLI, so the test
then asserts on what they did: the alias moved to v2, by the user typed in the Launchpad, after a passing
verification. The screenshots are kept in `build/test-artifacts/`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kappa.aliases import AliasRegistry
from kappa.settings import KappaSettings
from tests.conftest import PORT_OFFSET
from tests.integration.replay_pipeline import REPO, Deployment, deploy_copy, produce

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
        deadline = time.monotonic() + 180
        while not _serving(f"{url}/server_info"):
            assert process.poll() is None, (tmp_path / "dagster-dev.log").read_text()[-4000:]
            assert time.monotonic() < deadline, "dagster dev did not serve within 180 s"
            time.sleep(2)
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


@pytest.mark.timeout(1500)
def test_launch_a_replay_from_the_dagster_ui(
    stack: KappaSettings,
    tmp_path: Path,
    dagster_ui: Callable[[Deployment], str],
    browser: object,
) -> None:
    from playwright.sync_api import Browser, expect

    assert isinstance(browser, Browser)
    prefix = f"ui{uuid.uuid4().hex[:6]}_"  # short: the graph truncates long asset names
    d = deploy_copy(stack, tmp_path / "pipeline", prefix)
    produce(stack, d, slice(0, None))
    d.kappa("jobs", "run", "enrich_clicks", "--available-now")  # v1: live as the first version
    declaration = "enrich_clicks/declaration.py"
    d.edit(declaration, "version=1,", "version=2,")
    d.edit(declaration, '"profile_lateness_minutes": 20', '"profile_lateness_minutes": 5')
    dataset = f"{prefix}enriched_clicks"
    registry = AliasRegistry(stack)
    live = registry.live(dataset)
    assert live is not None
    assert live.version == 1

    url = dagster_ui(d)
    page = browser.new_page(viewport={"width": 1600, "height": 1000})
    page.set_default_timeout(60_000)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        # The asset graph: every job's output, lineage from the source topics.
        page.goto(f"{url}/locations/{LOCATION}/asset-groups/jobs", wait_until="networkidle")
        skip = page.get_by_role("button", name="Skip")  # a first visit may ask to join the community
        if skip.count():
            skip.click()
        topics = [f"{prefix}{name}" for name in ("clicks", "user_profiles", "enriched_clicks", "sessions")]
        for asset in ("raw_clicks", "page_stats", "user_activity", *topics):
            expect(page.get_by_text(asset, exact=True).first).to_be_visible()
        page.screenshot(path=str(ARTIFACTS / "dagster-ui-asset-graph.png"))

        # The Launchpad of replay_enrich_clicks: the declared version is the default; who acts is typed in.
        page.goto(f"{url}/locations/{LOCATION}/jobs/replay_enrich_clicks/playground", wait_until="networkidle")
        expect(page.get_by_text("version: 2")).to_be_visible()
        page.locator(".CodeMirror").first.click()
        page.keyboard.press("Control+A")
        page.keyboard.type(f"by: {OPERATOR}\nfrom: earliest\nversion: 2\n")
        expect(page.get_by_text("No errors")).to_be_visible()
        page.get_by_role("button", name="Launch Run").click()

        # The run page: wait for the run to end, then look at how it ended.
        page.wait_for_url("**/runs/**")
        run_id = page.url.rstrip("/").split("/")[-1]
        ended = page.get_by_text("Success", exact=True).or_(page.get_by_text("Failure", exact=True))
        expect(ended.first).to_be_visible(timeout=900_000)
        page.screenshot(path=str(ARTIFACTS / "dagster-ui-replay-run.png"), full_page=True)
        expect(page.get_by_text("Success", exact=True).first).to_be_visible(timeout=1_000)
    finally:
        page.screenshot(path=str(ARTIFACTS / "dagster-ui-last.png"), full_page=True)
        from kappa import deployments

        for version in (1, 2):
            deployments.stop_if_running(d.settings(stack), "enrich_clicks", version, timeout_s=30)

    # What the run's steps did, in the platform's own records.
    alias = registry.live(dataset)
    assert alias is not None
    assert (alias.version, alias.previous_version, alias.changed_by) == (2, 1, OPERATOR)
    steps = [
        (s.step, s.to_version, s.outcome, s.by)
        for s in registry.steps("enrich_clicks")
        if s.facts.get("dataset") == dataset  # other tests' copies record steps of enrich_clicks too
    ]
    for step in ("check", "prepare", "catch-up", "verify", "go-live", "cutover"):
        assert (step, 2, "ok", OPERATOR) in steps, (step, steps, run_id)
    [verified] = [
        s for s in registry.steps("enrich_clicks") if s.step == "verify" and s.facts.get("dataset") == dataset
    ]
    quality = verified.facts["quality"]  # what the blocking replay_quality check showed: the suite ran and held
    assert (quality["suite"], quality["success"]) == ("enriched_clicks", True), quality
