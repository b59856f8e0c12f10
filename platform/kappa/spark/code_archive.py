"""The job code as a cluster's executors import it: the `kappa` package and the user's `jobs/`, zipped once per
version of the code and shipped with the application (`spark.submit.pyFiles`: each executor fetches it into its
work folder and puts it first on its Python workers' path). Local mode needs none: its Python workers are this
machine's, with the project on their path.

The fingerprint is of the same files: what a deployment runs and what a job host is started for
(kappa.lifecycle.host_registry).
"""

from __future__ import annotations

import hashlib
import os
import zipfile
from pathlib import Path

import kappa
from kappa.core.settings import KappaSettings


def code_files() -> list[tuple[Path, str]]:
    """(file, its name in the archive) of every Python file of `jobs` and `kappa`, as they are on disk now."""
    # Lazy: jobs/ is the user's code, found at run time (and it imports this library).
    import jobs

    files = []
    for package in (jobs, kappa):
        for root in package.__path__:
            for path in sorted(Path(root).rglob("*.py")):
                files.append((path, f"{package.__name__}/{path.relative_to(root).as_posix()}"))
    return files


def code_fingerprint() -> str:
    """The code a deployment would run now: the jobs' and the platform's Python files as they are on disk."""
    digest = hashlib.sha256()
    for path, name in code_files():
        digest.update(f"{name.split('/', 1)[1]}\0".encode())  # as before the archive: relative to its package
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def code_archive(settings: KappaSettings) -> Path:
    """The zip of the code as it is now, built once per fingerprint under `<state>/code/` (written aside, then
    renamed into place: a driver starting beside another never ships half an archive)."""
    folder = settings.state_dir / "code"
    archive = folder / f"kappa-jobs-{code_fingerprint()}.zip"
    if archive.exists():
        return archive
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f".{archive.name}.{os.getpid()}"
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as zipped:
        for path, name in code_files():
            zipped.write(path, name)
    partial.replace(archive)
    return archive
