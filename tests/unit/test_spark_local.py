"""A driver's scratch folders: its own, and those of processes that are gone removed, no other."""

import os
import subprocess
from pathlib import Path

import pytest

from kappa.core.settings import load_settings
from kappa.spark.driver_files import remove_orphaned_scratch, use_scratch_folder


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_the_folders_of_gone_drivers_are_removed_and_only_those(tmp_path: Path) -> None:
    gone, alive = tmp_path / str(_dead_pid()), tmp_path / str(os.getpid())
    (gone / "blockmgr-1").mkdir(parents=True)
    (gone / "blockmgr-1" / "shuffle_0.data").write_bytes(b"x" * 1024)
    (alive / "blockmgr-2").mkdir(parents=True)
    other = tmp_path / "not-a-driver"
    other.mkdir()

    removed = remove_orphaned_scratch(tmp_path)

    assert removed == [gone]
    assert not gone.exists()
    assert (alive / "blockmgr-2").is_dir()
    assert other.is_dir()


def test_no_scratch_root_yet_is_nothing_to_remove(tmp_path: Path) -> None:
    assert remove_orphaned_scratch(tmp_path / "absent") == []


def test_spark_local_dirs_is_this_drivers_own_unless_the_user_chose_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = load_settings(state_dir=tmp_path)
    own = str(tmp_path / "spark-local" / str(os.getpid()))
    monkeypatch.delenv("SPARK_LOCAL_DIRS", raising=False)
    use_scratch_folder(settings)
    assert os.environ["SPARK_LOCAL_DIRS"] == own
    # Inherited from a parent kappa process: the parent's folder, removed once the parent is gone. Replaced.
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(tmp_path / "spark-local" / "1"))
    use_scratch_folder(settings)
    assert os.environ["SPARK_LOCAL_DIRS"] == own
    # The user's own choice is kept.
    monkeypatch.setenv("SPARK_LOCAL_DIRS", "/mnt/fast-disk")
    use_scratch_folder(settings)
    assert os.environ["SPARK_LOCAL_DIRS"] == "/mnt/fast-disk"
