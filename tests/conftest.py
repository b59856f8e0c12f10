"""Shared fixtures. The layers (a test's folder sets its marker):

- tests/unit         pure logic, and pure transforms on the one shared local SparkSession
- tests/integration  real Kafka, registry, Spark and Delta: one stack per test session (started here)
- tests/e2e          the CLI and whole flows; tests that need their own stack give it its own ports

One broker, one registry and one Spark session serve the whole test session (2 cores are shared), and each
test names its topics uniquely.
"""

from __future__ import annotations

import fcntl
import os
import signal
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kappa.core.settings import KappaSettings, load_settings
from kappa.spark.session import SHORT_RUN_JVM

# Ports of the test session's stack: away from the defaults so a developer's own `kappa up` can keep running.
# Every port the tests use is below 32768, outside Linux's ephemeral range: a client retrying a stopped
# broker can otherwise be handed the broker's own port and connect to itself, blocking the next start.
# KAPPA_TEST_PORT_OFFSET shifts them (and the stack's folder) so a second checkout can test at the same time.
PORT_OFFSET = int(os.environ.get("KAPPA_TEST_PORT_OFFSET", "0"))
# Every Spark driver a test starts is short-lived (kappa.spark.session.SHORT_RUN_JVM says what that saves).
LONG_RUN_JVM = "-XX:+UseSerialGC"  # the test process's own session (the `spark` fixture)
TEST_PORTS = {
    "kafka_port": 19092 + PORT_OFFSET,
    "controller_port": 19192 + PORT_OFFSET,
    "registry_port": 18081 + PORT_OFFSET,
}


# `make test` runs two pytest-xdist workers, each on whole test files (a module's fixtures stay in one process);
# the workers share the session's stack: the first that needs it starts it, the controller stops it at the end.
TEST_STACK_DIR = f"test-stack-{PORT_OFFSET}" if PORT_OFFSET else "test-stack"

REPORTS = Path(__file__).resolve().parents[1] / "build" / "test-reports"
QUICK_S = 10.0  # an integration test this slow or slower is marked `slow` (make test-quick leaves it out)
_durations: dict[str, dict[str, float]] = {}
_placement: dict[str, tuple[str, float]] = {}  # test -> (xdist worker, wall-clock start): who held the cores when
_unmarked_slow: list[tuple[str, float]] = []
# The whole machine's CPU (every process: the workers, their Spark drivers, the stack) as the controller sees the
# reports arrive: how busy the cores were while each test ran, and over the run (near 100 %: CPU-bound).
_machine_at_setup: dict[str, tuple[float, float]] = {}
_machine_busy: dict[str, float] = {}  # test -> share of the machine's cores busy while it ran
_machine_at_start: tuple[float, float] = (0.0, 0.0)


def _machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, from /proc/stat; (0, 0) where there is none."""
    try:
        ticks = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    except OSError:
        return (0.0, 0.0)
    hz = os.sysconf("SC_CLK_TCK")
    total = sum(ticks)  # user nice system idle iowait irq softirq steal (guest time is within user)
    return ((total - ticks[3] - ticks[4]) / hz, total / hz)


def _busy_since(start: tuple[float, float]) -> float:
    busy, total = _machine_cpu()
    return (busy - start[0]) / max(total - start[1], 1e-9)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _durations.setdefault(report.nodeid, {})[report.when] = report.duration
    if report.when == "setup":
        worker = getattr(getattr(report, "node", None), "gateway", None)
        _placement[report.nodeid] = (getattr(worker, "id", "-"), report.start)
        _machine_at_setup[report.nodeid] = _machine_cpu()
    elif report.when == "teardown" and report.nodeid in _machine_at_setup:
        _machine_busy[report.nodeid] = _busy_since(_machine_at_setup.pop(report.nodeid))
    integration = "/integration/" in f"/{report.nodeid}"
    if report.when == "call" and integration and report.duration >= QUICK_S and "slow" not in report.keywords:
        _unmarked_slow.append((report.nodeid, report.duration))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for test, seconds in _unmarked_slow:  # keeps `make test-quick` quick
        terminalreporter.write_line(f"took {seconds:.0f} s, mark it @pytest.mark.slow: {test}", yellow=True)
    if _machine_at_start[1] and not _is_worker(terminalreporter.config):
        cores, share = os.cpu_count() or 1, _busy_since(_machine_at_start)
        terminalreporter.write_line(f"the machine's {cores} cores were {share:.0%} busy over the run")


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _is_controller(config: pytest.Config) -> bool:
    """The process that hands files to xdist workers (it runs no test itself)."""
    return not _is_worker(config) and bool(getattr(config.option, "numprocesses", None))


def _stack_settings() -> KappaSettings:
    """The ports and folder of the test session's stack (what the controller needs to stop it)."""
    return load_settings(**TEST_PORTS, stack_dir=load_settings().state_dir / TEST_STACK_DIR)


def pytest_sessionstart(session: pytest.Session) -> None:
    global _machine_at_start
    _machine_at_start = _machine_cpu()
    if _is_controller(session.config):
        from kappa.stack import LocalStack

        LocalStack(_stack_settings()).down(purge=True)  # whatever a killed earlier session left behind


def pytest_sessionfinish(session: pytest.Session) -> None:
    """build/test-reports/durations.tsv: every test's setup, call and teardown seconds, slowest first (written by
    the controller, which sees every worker's reports); the controller also stops the workers' shared stack."""
    if _is_worker(session.config):
        return
    if _is_controller(session.config) and not os.environ.get("KAPPA_TEST_KEEP_STACK"):
        from kappa.stack import LocalStack

        LocalStack(_stack_settings()).down(purge=True)
    if not _durations:
        return
    REPORTS.mkdir(parents=True, exist_ok=True)
    rows = sorted(_durations.items(), key=lambda item: -sum(item[1].values()))
    first = min((start for _, start in _placement.values()), default=0.0)

    def placed(test: str) -> str:  # which worker ran it, when it started (seconds into the run), how busy the cores
        worker, start = _placement.get(test, ("-", first))
        busy = f"{_machine_busy[test]:.0%}" if test in _machine_busy else "-"
        return f"{worker}\t{start - first:.0f}\t{busy}"

    lines = ["seconds\tsetup\tcall\tteardown\tworker\tstarted\tcores_busy\ttest"] + [
        f"{sum(p.values()):.2f}\t{p.get('setup', 0):.2f}\t{p.get('call', 0):.2f}\t{p.get('teardown', 0):.2f}"
        f"\t{placed(test)}\t{test}"
        for test, p in rows
    ]
    (REPORTS / "durations.tsv").write_text("\n".join(lines) + "\n")


# Test files longest first (seconds in CI at 49944be, from its slowest durations), so the workers finish
# together: a worker takes its next file while it still has two tests to go, so a file handed out late must be
# short. The outage tests mostly wait (a broker is down for two minutes in each): early, they overlap the other
# workers' busiest files. Files not listed (all under 20 s) follow in collection order.
LONGEST_FIRST = (
    "e2e/test_replay_lifecycle.py",  # 1,300 (its module's pipeline, then three flows on it)
    "e2e/test_cascade_replay.py",  # 820
    "e2e/test_cluster.py",  # 500 (alone: a deployment, its kills, a replay and a cutover on Spark workers)
    "e2e/test_outages.py",  # 440
    "integration/test_kappa_promise.py",  # 480
    "integration/test_exactly_once_delta.py",  # 325
    "e2e/test_tutorial.py",  # 280
    "e2e/test_demo.py",  # 270
    "integration/test_views_jobs.py",  # 240
    "integration/test_job_runner.py",  # 220
    "integration/test_job_host.py",  # 210
    "integration/test_monitoring.py",  # 130
    "unit/test_page_stats_transforms.py",  # 125
    "integration/test_replay_protocol.py",  # 110
    "e2e/test_stack_lifecycle.py",  # 90 (estimated, without the 3-broker test)
    "integration/test_deployments.py",  # 85
    "unit/test_decoding_is_total.py",  # 70
    "integration/test_dagster_materialize.py",  # 65
    "integration/test_operators_differential.py",  # 60
    "integration/test_readers.py",  # 55
    "integration/test_enrich_clicks_job.py",  # 50
    "integration/test_aliases.py",  # 35
    "integration/test_realtime_lane.py",  # 30
    "integration/test_python_keyed_rule.py",  # 30
    "integration/test_view_operators_differential.py",  # 30
    "integration/test_sessionize_job.py",  # 25
    "e2e/test_bad_setup.py",  # 20
    "integration/test_replay_horizon.py",  # 20
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        layer = Path(str(item.fspath)).relative_to(here).parts[0]
        if layer in {"unit", "integration", "e2e"}:
            item.add_marker(getattr(pytest.mark, layer))

    def rank(item: pytest.Item) -> int:
        path = Path(str(item.fspath)).relative_to(here).as_posix()
        return LONGEST_FIRST.index(path) if path in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: the other files keep their order


@pytest.fixture(scope="session")
def state_dir() -> Path:
    """The project's state folder: its fetched jars are shared; each stack gets its own folder below."""
    return load_settings().state_dir


@pytest.fixture(scope="session")
def settings(tmp_path_factory: pytest.TempPathFactory, state_dir: Path) -> KappaSettings:
    """Settings of the test session's stack (its own stack, Delta and checkpoint folders)."""
    base = tmp_path_factory.mktemp("kappa")
    return load_settings(
        **TEST_PORTS,
        # A fixed folder: a session that was killed left its stack here, and the next one stops it first.
        stack_dir=state_dir / TEST_STACK_DIR,
        delta_root=str(base / "delta"),
        checkpoint_root=str(base / "checkpoints"),
        spark_shuffle_partitions=2,
        spark_driver_java_options=SHORT_RUN_JVM,
        # Tests read a run's whole offset log as their oracle's input (each batch's answer, the partitions of batch
        # 0): keep Spark's 100 batches in the session's runs (deployed runs keep the platform's 20).
        streaming_batches_retained=100,
    )


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


@pytest.fixture(scope="session")
def stack(settings: KappaSettings, request: pytest.FixtureRequest) -> Iterator[KappaSettings]:
    """The session's Kafka broker and registry, started once and stopped (purged) at the end."""
    from kappa.stack import LocalStack

    local = LocalStack(settings)
    if _is_worker(request.config):
        # One stack for every worker: `up` starts what is not running yet, one worker at a time.
        settings.stack_dir.parent.mkdir(parents=True, exist_ok=True)
        with (settings.stack_dir.parent / f"{TEST_STACK_DIR}.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            local.up()
        yield settings  # the controller stops it once every worker is done
        return
    local.down(purge=True)  # whatever a killed earlier session left behind
    # SIGTERM (CI's timeout, a developer's kill) must still run the teardown below.
    signal.signal(signal.SIGTERM, _interrupt)
    local.up()
    try:
        yield settings
    finally:
        if not os.environ.get("KAPPA_TEST_KEEP_STACK"):
            local.down(purge=True)


@pytest.fixture(scope="session")
def spark(settings: KappaSettings):  # type: ignore[no-untyped-def]
    from kappa.spark.session import get_spark

    # This session lives as long as its worker, running hundreds of small jobs: the full JIT pays off here
    # (measured: the unit view tests 123 s with C1 only, 106 s with it).
    session = get_spark(settings.model_copy(update={"spark_driver_java_options": LONG_RUN_JVM}), "kappa-tests")
    yield session
    session.stop()


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """`unique_name("clicks")` -> `clicks-test_x-1a2b3c4d`: topics, tables and groups never collide."""

    def make(base: str) -> str:
        test = request.node.name.replace("[", "-").replace("]", "")[:40]
        return f"{base}-{test}-{uuid.uuid4().hex[:8]}"

    return make
