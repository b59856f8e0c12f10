from pathlib import Path

import pytest

from kappa.core.errors import SettingsError
from kappa.core.settings import Profile, load_settings, unknown_variables


def test_local_profile_derives_addresses_from_ports(tmp_path: Path) -> None:
    s = load_settings(state_dir=tmp_path, kafka_port=19092, controller_port=19192, registry_port=18081, brokers=3)
    assert s.bootstrap == "127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094"
    assert s.registry == "http://127.0.0.1:18081/apis/ccompat/v7"
    assert s.stack_path == tmp_path / "stack"
    assert s.jars_path == tmp_path / "jars"
    assert s.delta_root == str(tmp_path / "delta")


def test_environment_overrides_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KAPPA_KAFKA_PORT", "29092")
    monkeypatch.setenv("KAPPA_SPARK_MASTER", "local[2]")
    s = load_settings(state_dir=tmp_path)
    assert s.kafka_port == 29092
    assert s.bootstrap == "127.0.0.1:29092"
    assert s.spark_master == "local[2]"


def test_yaml_file_is_read_and_environment_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    config = tmp_path / "kappa.yaml"
    config.write_text("registry_port: 28081\nspark_shuffle_partitions: 8\n")
    monkeypatch.setenv("KAPPA_CONFIG_FILE", str(config))
    monkeypatch.setenv("KAPPA_SPARK_SHUFFLE_PARTITIONS", "3")
    s = load_settings(state_dir=tmp_path)
    assert s.registry_port == 28081
    assert s.spark_shuffle_partitions == 3


def test_cluster_profile_takes_external_addresses(tmp_path: Path) -> None:
    s = load_settings(
        state_dir=tmp_path,
        profile="cluster",
        bootstrap_servers="kafka-a:9092,kafka-b:9092",
        registry_url="http://registry:8080/apis/ccompat/v7",
        spark_master="spark://master:7077",
    )
    assert s.profile is Profile.CLUSTER
    assert s.bootstrap == "kafka-a:9092,kafka-b:9092"


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"KAPPA_KAFKA_PORT": "abc"}, "KAPPA_KAFKA_PORT: Input should be a valid integer"),
        ({"KAPPA_REGISTRY_PORT": "80"}, "KAPPA_REGISTRY_PORT: Input should be greater than or equal to 1024"),
        ({"KAPPA_KAFKA_HEAP": "lots"}, "KAPPA_KAFKA_HEAP: String should match pattern"),
        ({"KAPPA_PROFILE": "cloud"}, "KAPPA_PROFILE: Input should be 'local' or 'cluster'"),
        ({"KAPPA_PROFILE": "cluster"}, "the cluster profile needs KAPPA_BOOTSTRAP_SERVERS, KAPPA_REGISTRY_URL"),
        ({"KAPPA_CONTROLLER_PORT": "9092"}, "ports overlap"),
        # Worker i listens on the master's port + i: two workers from 9090 reach the broker's 9092.
        ({"KAPPA_SPARK_MASTER_PORT": "9090", "KAPPA_SPARK_WORKERS": "2"}, "ports overlap"),
        ({"KAPPA_SPARK_WORKER_MEMORY": "3 GB"}, "KAPPA_SPARK_WORKER_MEMORY: String should match pattern"),
        ({"KAPPA_SPARK_WORKERS": "9"}, "KAPPA_SPARK_WORKERS: Input should be less than or equal to 8"),
        ({"KAPPA_NO_SUCH_SETTING": "1"}, None),  # unknown KAPPA_ variables are not errors (a warning, below)
    ],
)
def test_bad_settings_name_the_setting(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, env: dict[str, str], expected: str | None
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    if expected is None:
        load_settings(state_dir=tmp_path)
        return
    with pytest.raises(SettingsError) as err:
        load_settings(state_dir=tmp_path)
    assert expected in str(err.value)
    assert str(err.value).startswith("bad setting:")


def test_missing_or_malformed_config_file_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KAPPA_CONFIG_FILE", str(tmp_path / "absent.yaml"))
    with pytest.raises(SettingsError, match="no such file"):
        load_settings(state_dir=tmp_path)
    bad = tmp_path / "bad.yaml"
    bad.write_text("- just\n- a list\n")
    monkeypatch.setenv("KAPPA_CONFIG_FILE", str(bad))
    with pytest.raises(SettingsError, match="expected a mapping"):
        load_settings(state_dir=tmp_path)


def test_an_unknown_key_in_the_config_file_is_a_bad_setting(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    config = tmp_path / "kappa.yaml"
    config.write_text("registry_port: 28081\nregistry_prot: 1\n")  # misspelled: it would have been ignored
    monkeypatch.setenv("KAPPA_CONFIG_FILE", str(config))
    with pytest.raises(SettingsError, match="KAPPA_REGISTRY_PROT: Extra inputs are not permitted"):
        load_settings(state_dir=tmp_path)


def test_a_misspelled_variable_is_a_warning_naming_the_nearest_setting() -> None:
    environ = {"KAPPA_KAFKA_PRT": "9092", "KAPPA_KAFKA_PORT": "9092", "KAPPA_OPERATOR": "ana", "KAPPA_TEST_X": "1"}
    assert unknown_variables(environ | {"KAPPA_ZZZ": "1", "PATH": "/bin"}) == [
        "warning: KAPPA_KAFKA_PRT is not a setting, ignored; did you mean KAPPA_KAFKA_PORT?",
        "warning: KAPPA_ZZZ is not a setting, ignored",
    ]


def test_relative_folders_become_absolute(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The stack's services start in their own folders: a relative KAPPA_STACK_DIR must not mean another place."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KAPPA_STACK_DIR", "state/my-stack")
    settings = load_settings(state_dir=Path("state"), deployments_dir=Path("deps"))
    assert settings.stack_dir == tmp_path / "state" / "my-stack"
    assert settings.state_dir == tmp_path / "state"
    assert settings.deployments_dir == tmp_path / "deps"
    assert settings.jars_path == tmp_path / "state" / "jars"
