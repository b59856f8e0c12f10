"""The job code a cluster's executors import: one archive per version of the code, holding exactly its files."""

import zipfile
from pathlib import Path

import pytest

import jobs
import kappa
from kappa.core.settings import load_settings
from kappa.spark import code_archive as archive_module
from kappa.spark.code_archive import code_archive, code_fingerprint


def python_files(package: object) -> set[str]:
    roots = [Path(r) for r in package.__path__]  # type: ignore[attr-defined]
    return {f"{package.__name__}/{p.relative_to(r).as_posix()}" for r in roots for p in r.rglob("*.py")}  # type: ignore[attr-defined]


def test_the_archive_holds_every_python_file_of_kappa_and_jobs_and_is_built_once(tmp_path: Path) -> None:
    settings = load_settings(state_dir=tmp_path)
    archive = code_archive(settings)
    assert archive.name == f"kappa-jobs-{code_fingerprint()}.zip"
    with zipfile.ZipFile(archive) as zipped:
        names = set(zipped.namelist())
        assert names == python_files(jobs) | python_files(kappa)
        assert zipped.read("kappa/__init__.py") == (Path(kappa.__file__)).read_bytes()
    built = archive.stat().st_mtime_ns
    assert code_archive(settings) == archive
    assert archive.stat().st_mtime_ns == built
    assert [p.name for p in archive.parent.iterdir()] == [archive.name]  # nothing half-written left beside it


def test_changed_code_gets_an_archive_of_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = tmp_path / "src" / "jobs" / "extra.py"
    module.parent.mkdir(parents=True)
    module.write_text("X = 1\n")
    files = archive_module.code_files()
    monkeypatch.setattr(archive_module, "code_files", lambda: [*files, (module, "jobs/extra.py")])
    settings = load_settings(state_dir=tmp_path / "state")
    first = code_archive(settings)
    module.write_text("X = 2\n")  # a job edited: a replay's new version beside the live one
    second = code_archive(settings)
    assert first != second
    with zipfile.ZipFile(second) as zipped:
        assert zipped.read("jobs/extra.py") == b"X = 2\n"
