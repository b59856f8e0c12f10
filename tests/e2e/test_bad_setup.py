"""Each bad set-up gives one clear message (exit status 2), never a stack trace."""

import socket
from pathlib import Path

import pytest

from tests.e2e.stackctl import kappa


def _assert_clear_error(run_err: str, *phrases: str) -> None:
    assert "Traceback" not in run_err
    assert run_err.startswith("kappa: error: ")
    for phrase in phrases:
        assert phrase in run_err


def test_taken_port_names_the_port_and_the_setting(tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        env = {"KAPPA_KAFKA_PORT": str(port), "KAPPA_STACK_DIR": str(tmp_path / "s")}
        run = kappa("up", env=env)
    assert run.code == 2
    _assert_clear_error(run.err, f"port {port}", "already in use", "KAPPA_KAFKA_PORT")


def test_missing_java_is_named(tmp_path: Path) -> None:
    env = {"KAPPA_STACK_JAVA": str(tmp_path / "no-java"), "KAPPA_STACK_DIR": str(tmp_path / "s")}
    run = kappa("up", env=env)
    assert run.code == 2
    _assert_clear_error(run.err, "java not found", "KAPPA_STACK_JAVA")


def test_too_old_java_is_refused(tmp_path: Path) -> None:
    import shutil

    system_java = shutil.which("java")
    if system_java is None:
        pytest.skip("no system java on PATH to play the old one")
    from kappa.stack.java import java_major_version

    if java_major_version(system_java) >= 21:
        pytest.skip("the system java is new enough")
    run = kappa("up", env={"KAPPA_STACK_JAVA": system_java, "KAPPA_STACK_DIR": str(tmp_path / "s")})
    assert run.code == 2
    _assert_clear_error(run.err, "the registry needs Java 21 or newer")


def test_corrupt_state_folder(tmp_path: Path) -> None:
    stack_dir = tmp_path / "s"
    stack_dir.mkdir()
    (stack_dir / "stack.json").write_text("{not json")
    # The purge deletes the checkpoints, tables and deployments that refer to the stack, and stops those
    # deployments: the test's own, never the checkout's (.state).
    derived = {name: tmp_path / name for name in ("checkpoints", "delta", "deployments")}
    for folder in derived.values():
        folder.mkdir()
    env = {"KAPPA_STACK_DIR": str(stack_dir), "KAPPA_CHECKPOINT_ROOT": str(derived["checkpoints"]),
           "KAPPA_DELTA_ROOT": str(derived["delta"]), "KAPPA_DEPLOYMENTS_DIR": str(derived["deployments"])}  # fmt: skip
    for command in ("status", "up", "down"):
        run = kappa(command, env=env)
        assert run.code == 2, command
        _assert_clear_error(run.err, "state folder is corrupt", "kappa down --purge")
    assert kappa("down", "--purge", env=env).code == 0
    assert not stack_dir.exists()
    assert not any(folder.exists() for folder in derived.values())


def test_broker_data_without_state_file_is_corrupt(tmp_path: Path) -> None:
    stack_dir = tmp_path / "s"
    (stack_dir / "kafka-1" / "data").mkdir(parents=True)
    run = kappa("up", env={"KAPPA_STACK_DIR": str(stack_dir), "KAPPA_KAFKA_PORT": "23092"})
    assert run.code == 2
    _assert_clear_error(run.err, "state folder is corrupt", "holds broker data")


def test_bad_setting_is_named(tmp_path: Path) -> None:
    run = kappa("status", env={"KAPPA_KAFKA_PORT": "not-a-port"})
    assert run.code == 2
    _assert_clear_error(run.err, "KAPPA_KAFKA_PORT", "valid integer")


def test_unreachable_kafka_is_a_clear_error(tmp_path: Path) -> None:
    run = kappa("topics", "list", env={"KAPPA_KAFKA_PORT": "24092"}, timeout=120)
    assert run.code == 2
    _assert_clear_error(run.err, "Kafka is not reachable at 127.0.0.1:24092", "kappa up")
