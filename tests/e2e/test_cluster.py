"""Beyond one JVM: deployments, a replay and a cutover on the stack's Spark standalone cluster and 3-broker Kafka
(`kappa up --brokers 3 --spark-workers 2`), with their driver, a worker (its executors) and a broker killed under
them, and nothing lost or doubled. The commands are the README's ("Run on a cluster"), run as written, in its order;
the one liberty is the stack's ports, this test's own (the master's 7077 is MASTER_PORT)."""

import dataclasses
import os
import shlex
import signal
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import httpx
import psutil
import pytest
from confluent_kafka.admin import AdminClient

from jobs.clickstream.generator import Click, clickstream
from kappa.contracts.topic_declarations import Cleanup, Topic
from kappa.core.settings import load_settings
from kappa.kafka.topic_admin import describe
from kappa.runtime.readers import AliasConsumer
from kappa.spark.session import SHORT_RUN_JVM
from kappa.stack import LocalStack
from kappa.stack.process import port_in_use
from tests.e2e.faults import event_ids, records
from tests.e2e.stackctl import kappa, stack_processes
from tests.integration.replay_pipeline import CONFIG, Deployment, deploy_copy, enriched_table, produce, rule
from tests.waiting import wait_until

MASTER_PORT, MASTER_UI = 22077, 22180  # worker i: 22077 + i and 22180 + i
EXECUTOR = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
# A broker of three is down at least this long: past its partitions' leader elections and every client's metadata
# refresh (a single broker's outage, which the jobs wait out, is tests/e2e/test_outages.py's).
BROKER_DOWN_S = 45
JOBS = ("raw_clicks", "enrich_clicks")  # a Delta table and a keyed topic, the as-of join's state among them
README = Path(__file__).resolve().parents[2] / "README.md"


@dataclass(frozen=True)
class Line:
    """One `uv run kappa` line of the README's cluster block: kappa's arguments, and the settings it runs with
    (set on the line, or exported before it), the stack's ports made this test's (7077 -> MASTER_PORT)."""

    env: dict[str, str]
    args: tuple[str, ...]


def readme_cluster_lines() -> list[Line]:
    """The README's "Run on a cluster" commands, in order: what this test runs, as written."""
    text = README.read_text()
    section = text[text.index("### Run on a cluster") :]
    start = section.index("```bash\n") + len("```bash\n")
    block = section[start : section.index("\n```", start)]
    exported: dict[str, str] = {}
    lines = []
    for written in block.splitlines():
        words = shlex.split(written, comments=True)
        exporting = words[:1] == ["export"]
        words = words[1:] if exporting else words
        settings: dict[str, str] = {}
        while words and "=" in words[0]:
            name, value = words.pop(0).split("=", 1)
            settings[name] = value.replace(":7077", f":{MASTER_PORT}")
        if exporting:
            exported |= settings
        elif words:
            assert words[:3] == ["uv", "run", "kappa"], f"not a kappa line of the README: {written}"
            lines.append(Line({**exported, **settings}, tuple(words[3:])))
    return lines


def clicks_in(part: slice) -> set[str]:
    """The event ids of the clicks in that part of the seeded stream (CONFIG: clicks and profile versions)."""
    emitted = list(clickstream(CONFIG))[part]
    return {e.record.event_id for e in emitted if isinstance(e.record, Click)}


def executors_of(worker_pid: int) -> list[psutil.Process]:
    """The executor JVMs a worker runs (its children: a worker launches each executor as a process)."""
    try:
        children = psutil.Process(worker_pid).children()
    except psutil.NoSuchProcess:
        return []
    return [c for c in children if EXECUTOR in " ".join(c.cmdline())]


def watches(executor: psutil.Process, worker_port: int) -> bool:
    """The executor holds a connection to its worker's RPC port (its WorkerWatcher's)."""
    return any(
        c.raddr and c.raddr.port == worker_port and c.status == psutil.CONN_ESTABLISHED
        for c in executor.net_connections("tcp")
    )


def ended(process: psutil.Process) -> bool:
    """Gone, or a zombie: exited, not yet reaped by whoever inherited it from its killed parent."""
    return state_of(process) in ("gone", psutil.STATUS_ZOMBIE)


def state_of(process: psutil.Process) -> str:
    try:
        return str(process.status()) if process.is_running() else "gone"
    except psutil.NoSuchProcess:
        return "gone"


def executors_anywhere() -> list[int]:
    """Every executor JVM on the machine that serves this test's workers (an orphan too: its worker gone)."""
    workers = {f"127.0.0.1:{MASTER_PORT + i}" for i in (1, 2)}
    found = []
    for process in psutil.process_iter():
        try:
            cmdline = " ".join(process.cmdline())
        except psutil.Error:
            continue
        if EXECUTOR in cmdline and any(w in cmdline for w in workers):
            found.append(process.pid)
    return found


def cores_used() -> dict[int, int]:
    """Worker RPC port -> cores its executors hold, for the workers the master holds alive."""
    state = httpx.get(f"http://127.0.0.1:{MASTER_UI}/json/", timeout=5).json()
    return {int(w["port"]): int(w["coresused"]) for w in state["workers"] if w["state"] == "ALIVE"}


def applications() -> list[str]:
    """The names of the applications the master runs now."""
    state = httpx.get(f"http://127.0.0.1:{MASTER_UI}/json/", timeout=5).json()
    return sorted(app["name"] for app in state["activeapps"])


def has_rows(table: Path, count: int) -> bool:
    return len(event_ids(table)) >= count


def job_row(d: Deployment, job: str, version: int) -> list[str]:
    """The job version's row of `kappa jobs status`: job, version, state, pid, ..."""
    listed = d.kappa("jobs", "status", check=False)
    [row] = [r for r in (line.split() for line in listed.stdout.splitlines()) if r[:2] == [job, str(version)]]
    return row


def with_env(d: Deployment, **env: str) -> Deployment:
    """The same copy, its commands run with other KAPPA_* settings (a start records them)."""
    return dataclasses.replace(d, env={**d.env, **env})


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_the_pipeline_deploys_replays_and_cuts_over_on_the_cluster_through_every_kill(tmp_path: Path) -> None:
    """raw_clicks and enrich_clicks deployed on the cluster (`KAPPA_SPARK_MASTER=spark://...`, `kappa jobs
    start`: the job host's application, its code shipped to the executors), at one core. SIGKILL their driver:
    the deployments are seen crashed and `kappa jobs restart` (what the health sensor's run calls) resumes them
    from their checkpoints. Rescaled by a restart at two cores: an executor on each worker. SIGKILL one worker:
    its executor ends with it, the master replaces it on the other worker, the jobs go on. SIGKILL one broker
    (replication 3, min.insync.replicas 2; producers acks=all). Then raw_clicks v2 is replayed on the cluster
    beside live v1 (its own application, its own cores), verified, deployed and cut over to. Each
    raw_clicks version's table holds every click exactly once; enriched_clicks holds the as-of join of every
    click, computed independently (tests/oracles.py), and no other key. `kappa down` leaves no process and no
    port behind."""
    stack_dir = tmp_path / "cluster"
    env = {
        "KAPPA_KAFKA_PORT": "22092", "KAPPA_CONTROLLER_PORT": "22192", "KAPPA_REGISTRY_PORT": "22081",
        "KAPPA_SPARK_MASTER_PORT": str(MASTER_PORT), "KAPPA_SPARK_MASTER_UI_PORT": str(MASTER_UI),
        "KAPPA_STACK_DIR": str(stack_dir),
    }  # fmt: skip
    settings = load_settings(
        kafka_port=22092, controller_port=22192, registry_port=22081, brokers=3, stack_dir=stack_dir,
        spark_master_port=MASTER_PORT, spark_master_ui_port=MASTER_UI, spark_workers=2, spark_worker_cores=2,
        spark_shuffle_partitions=2, spark_driver_java_options=SHORT_RUN_JVM,
    )  # fmt: skip
    # The README's commands, in its order, the test's own steps between them: `step` is the next one.
    readme = iter(readme_cluster_lines())

    def step(*expected: str) -> Line:
        line = next(readme)
        assert line.args[: len(expected)] == expected, f"the README's next cluster command is {line}"
        return line

    up_line, status_line, start_line = step("up"), step("status"), step("jobs", "start", "raw_clicks")
    replay_lines = [step("replay", "start", "raw_clicks"), step("replay", "golive"), step("replay", "cutover")]
    stop_line, down_line = step("jobs", "stop", "raw_clicks", "--version", "1"), step("down")
    assert start_line.env["KAPPA_SPARK_MASTER"] == f"spark://127.0.0.1:{MASTER_PORT}"
    # 4 task slots: the live version's application at 1 core (then at the README's 2), its replay's at 2 beside it.
    on_cluster = {**start_line.env, "KAPPA_SPARK_CORES_MAX": "1", "KAPPA_SPARK_EXECUTOR_JAVA_OPTIONS": SHORT_RUN_JVM}
    table, v2_table = (tmp_path / "pipeline" / "delta" / "raw_clicks" / f"v{v}" for v in (1, 2))

    def host_logs() -> list[Path]:  # the job hosts' logs (their JVMs' too): where a wait's failure shows why
        return sorted((tmp_path / "pipeline" / "deployments").glob("host-*.log"))

    def in_table(count: int, what: str, timeout_s: float = 180) -> None:
        wait_until(partial(has_rows, table, count), timeout_s, what, log=host_logs()[-1])

    def each_job(d: Deployment, *command: str) -> None:
        for job in JOBS:
            d.kappa("jobs", *command, job)

    copies: list[Deployment] = []  # whose deployments the end stops, whatever failed
    written: list[str] = []  # the keys of every record in enriched_clicks v1, in its partitions' order
    try:
        up = kappa(*up_line.args, env={**env, **up_line.env})
        assert up.code == 0, up.err
        for component in ("kafka", "registry", "spark-master", "spark-worker-1", "spark-worker-2"):
            assert f"{component}: healthy after" in up.out, up.out
        status = kappa(*status_line.args, env=env)
        assert status.code == 0, status.out + status.err
        lines = {line.split()[0]: line for line in status.out.splitlines()[1:]}
        assert f"spark://127.0.0.1:{MASTER_PORT}, UI http://127.0.0.1:{MASTER_UI}" in lines["spark-master"]
        assert f"http://127.0.0.1:{MASTER_UI + 2}" in lines["spark-worker-2"]
        assert all(line.endswith("healthy") for line in lines.values()), status.out
        admin = AdminClient({"bootstrap.servers": settings.bootstrap})
        cluster = admin.describe_cluster().result(timeout=15)
        assert sorted(n.port for n in cluster.nodes) == [22092, 22093, 22094]

        v1 = deploy_copy(settings, tmp_path / "pipeline", "three_", env=on_cluster)
        copies.append(v1)
        source = Topic("three_clicks", 4, Cleanup.COMPACT, value_schema="clicks.avsc")
        state = describe(admin, [source])[0]
        assert (state.replication_factor, state.configs["min.insync.replicas"]) == (3, "2")

        def produce_part(part: slice) -> set[str]:
            produce(settings, v1, part)
            return clicks_in(part)

        produced = produce_part(slice(0, 1200))
        v1.kappa(*start_line.args)
        v1.kappa("jobs", "start", "enrich_clicks")
        in_table(len(produced), "the first clicks in Delta", 300)
        # The job host's application runs its tasks in one executor of one core; the code shipped with it
        # (kappa.spark.code_archive): the executor fetched it into its folder.
        assert applications() == ["kappa-jobs"]
        assert sorted(cores_used().values()) == [0, 1]
        assert list(stack_dir.glob("spark-worker-*/work/app-*/*/kappa-jobs-*.zip"))

        # SIGKILL the driver: the job host's process, the pid `kappa jobs status` shows. Its application ends
        # with it (the master removes its executor); the deployments are seen crashed, with the signal.
        [_, _, health, pid, *_] = job_row(v1, "raw_clicks", 1)
        assert health == "running"
        os.kill(int(pid), signal.SIGKILL)
        produced |= produce_part(slice(1200, 1700))  # while nothing runs
        wait_until(lambda: job_row(v1, "raw_clicks", 1)[2] == "crashed", 60, "the crash seen by the deployment")
        wait_until(lambda: applications() == [], 60, "the killed driver's application ended by the master")
        each_job(v1, "restart")
        assert "killed by SIGKILL" in v1.kappa("jobs", "status", "--verbose").stdout  # why they were restarted
        in_table(len(produced), "the clicks after the restart", 300)
        assert sorted(cores_used().values()) == [0, 1]

        # Rescale by restart: stopped, their host gone (it ends when idle), started at two cores; they resume.
        each_job(v1, "stop")
        wait_until(lambda: applications() == [], 60, "the idle job host's application to end")
        v1 = with_env(v1, KAPPA_SPARK_CORES_MAX=start_line.env["KAPPA_SPARK_CORES_MAX"])
        each_job(v1, "start")
        wait_until(lambda: cores_used() == {MASTER_PORT + 1: 1, MASTER_PORT + 2: 1}, 120, "an executor on each")
        stack = LocalStack(settings)
        pids = {c.name: c.pid for c in stack.status() if c.pid is not None}
        assert all(executors_of(pids[f"spark-worker-{i}"]) for i in (1, 2)), "an executor on each worker"

        [lost] = executors_of(pids["spark-worker-1"])
        # An executor ends with its worker once its watcher has connected to it (Spark's WorkerWatcher connects
        # after the executor starts: one whose worker dies before that lives on until its application ends).
        wait_until(lambda: watches(lost, MASTER_PORT + 1), 60, "the executor's watch on its worker")
        os.kill(pids["spark-worker-1"], signal.SIGKILL)
        wait_until(lambda: ended(lost), 60, f"the killed worker's executor (pid {lost.pid}) to end with it")
        # The master replaces it where cores are free: on the other worker.
        wait_until(lambda: cores_used() == {MASTER_PORT + 2: 2}, 120, "the lost executor replaced")
        produced |= produce_part(slice(1700, 2200))
        in_table(len(produced), "clicks in Delta with a worker gone")
        assert job_row(v1, "raw_clicks", 1)[2] == "running", "the job ended with a worker gone"
        stack.stop_component("spark-worker-1")  # forget the killed process, then start it on its port again
        stack.start_component("spark-worker-1")
        wait_until(lambda: cores_used() == {MASTER_PORT + 1: 0, MASTER_PORT + 2: 2}, 60, "the worker back, idle")

        [victim] = [c.pid for c in stack.status() if c.name == "kafka-3"]
        assert victim is not None
        os.kill(victim, signal.SIGKILL)
        back_at = time.monotonic() + BROKER_DOWN_S
        produced |= produce_part(slice(2200, 2700))  # acks=all: two in-sync replicas do
        in_table(len(produced), "clicks in Delta with a broker gone")
        while time.monotonic() < back_at:  # the rest of the outage itself, not a wait for a condition
            assert job_row(v1, "enrich_clicks", 1)[2] == "running", "the job ended with a broker gone"
            time.sleep(5)
        stack.stop_component("kafka-3")
        stack.start_component("kafka-3")

        # A replay of v2 on the cluster beside live v1: its own application at two cores, the other two slots.
        v2 = v1.copy(tmp_path / "v2")
        v2.edit("raw_clicks/declaration.py", "version=1,", "version=2,")
        replayed, _, cut = (with_env(v2, **line.env).kappa(*line.args) for line in replay_lines)
        assert "verification: PASSED" in replayed.stdout, replayed.stdout + replayed.stderr
        assert "v1 -> v2" in cut.stdout, cut.stdout
        produced |= produce_part(slice(2700, None))
        for t in (table, v2_table):
            wait_until(partial(has_rows, t, len(produced)), 180, f"the last clicks in {t.name}", log=host_logs()[-1])
        assert applications() == ["kappa-jobs", "kappa-jobs"]  # each version's code in its own host

        # enriched_clicks as a reader of its alias sees it: the as-of join of every click, no other key.
        expected = rule(CONFIG, 20, slice(0, None))
        enriched = Topic("three_enriched_clicks", 4, Cleanup.COMPACT, value_schema="enriched_clicks.avsc")
        seen: dict[str, dict[str, object] | None] = {}
        with AliasConsumer(settings, enriched, group="cluster-reader", alias_poll_s=0.5) as reader:
            deadline = time.monotonic() + 180
            while enriched_table(seen) != expected and time.monotonic() < deadline:
                seen.update((change.key, change.value) for change in reader.changes(idle_timeout_s=4))
        written = [key for key, _ in records(settings, "three_enriched_clicks.v1")]
        v2.kappa(*stop_line.args)
        for version, job in ((1, "enrich_clicks"), (2, "raw_clicks")):
            v2.kappa("jobs", "stop", job, "--version", str(version))
        copies.clear()
    finally:
        for job in JOBS if copies else ():  # the test failed: nothing of it may run on
            for version in (1, 2):
                copies[0].kappa("jobs", "stop", job, "--version", str(version), check=False)
        down = kappa(*down_line.args, env=env)
    assert sorted(event_ids(table)) == sorted(produced)  # once each, after every kill
    assert sorted(event_ids(v2_table)) == sorted(produced)
    assert enriched_table(seen) == expected  # nothing lost, nothing different, no other key
    # At least once by key (README, Jobs): a batch redone after a kill writes its records again, same values.
    print(f"enriched_clicks: {len(expected):,} keys, {len(written) - len(set(written)):,} records written again")
    for log in host_logs():
        assert "Traceback" not in log.read_text(), log
    assert down.code == 0, down.err
    assert stack_processes(stack_dir) == []
    wait_until(lambda: executors_anywhere() == [], 30, "no executor left once its workers stopped")
    spark_ports = (MASTER_PORT, MASTER_PORT + 1, MASTER_PORT + 2, MASTER_UI, MASTER_UI + 1, MASTER_UI + 2)
    for port in (22092, 22093, 22094, 22192, 22193, 22194, 22081, 22082, *spark_ports):
        assert not port_in_use(port), f"port {port} still bound after `kappa down`"
