"""Fetch the JVM artifacts declared in infra/jvm/pom.xml into the state folder, once.

Maven resolves with strict checksums into a repository inside the state folder; a stamp (the hash of the poms)
makes a second run fetch nothing. Spark sessions and the stack then use the local files, with no network.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from kappa.core.errors import StackError
from kappa.core.settings import KappaSettings, project_root

# One folder per Maven module of infra/jvm: the broker's classpath, the Spark connectors, the registry app,
# the platform's own Spark operators (compiled from infra/jvm/operators).
JAR_GROUPS = ("kafka", "spark", "registry", "operators")
_STAMP = ".fetched-from"


@dataclass(frozen=True)
class FetchReport:
    fetched: bool  # False: everything was already present, nothing was downloaded
    seconds: float
    jars_dir: Path


def _declaration(root: Path) -> list[Path]:
    """The poms and the operators' sources: a change to either builds again."""
    jvm = root / "infra" / "jvm"
    return sorted([*jvm.rglob("pom.xml"), *jvm.rglob("*.java")])


def _declaration_hash(root: Path) -> str:
    digest = hashlib.sha256()
    for path in _declaration(root):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def artifacts_present(settings: KappaSettings) -> bool:
    jars = settings.jars_path
    return all((jars / group).is_dir() and any((jars / group).iterdir()) for group in JAR_GROUPS)


def ensure_jvm_artifacts(settings: KappaSettings) -> FetchReport:
    """Fetch the jars unless the same declaration was fetched before; return what happened."""
    root = project_root()
    jars = settings.jars_path
    if root is None:
        if artifacts_present(settings):
            return FetchReport(fetched=False, seconds=0.0, jars_dir=jars)
        raise StackError(
            f"no JVM artifacts in {jars} and no checkout to fetch them from "
            "(run `kappa setup` from the repository, or set KAPPA_JARS_DIR to a folder that has them)"
        )
    wanted = _declaration_hash(root)
    stamp = jars / _STAMP
    if artifacts_present(settings) and stamp.is_file() and stamp.read_text().strip() == wanted:
        return FetchReport(fetched=False, seconds=0.0, jars_dir=jars)

    mvn = shutil.which("mvn")
    if mvn is None:
        raise StackError("`mvn` not found on PATH: run `make setup`, which installs Maven with apt-get")
    started = time.monotonic()
    for group in JAR_GROUPS:  # a changed declaration must not leave stale jars on a classpath
        shutil.rmtree(jars / group, ignore_errors=True)
    jars.mkdir(parents=True, exist_ok=True)
    command = [
        mvn,
        "--batch-mode",
        "--quiet",
        "--strict-checksums",
        f"-Dmaven.repo.local={settings.state_dir / 'm2'}",
        f"-Dkappa.jars={jars}",
        "-f",
        str(root / "infra" / "jvm" / "pom.xml"),
        "package",
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-15:])
        raise StackError(f"fetching the JVM artifacts failed (mvn exit {result.returncode}):\n{tail}")
    stamp.write_text(wanted + "\n")
    return FetchReport(fetched=True, seconds=time.monotonic() - started, jars_dir=jars)
