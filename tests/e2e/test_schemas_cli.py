"""`kappa schemas check --offline` catches an incompatible change against git history, as CI would."""

import json
import shutil
import subprocess
from pathlib import Path

from kappa.core.settings import project_root
from tests.e2e.stackctl import kappa


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def test_incompatible_change_is_caught_against_git_history(tmp_path: Path) -> None:
    root = project_root()
    assert root is not None
    repo = tmp_path / "repo"
    schemas = repo / "schemas"
    shutil.copytree(root / "schemas", schemas)
    _git(repo, "init", "-q")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "empty")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "schemas v1")
    env = {"KAPPA_SCHEMAS_DIR": str(schemas)}

    ok = kappa("schemas", "check", "--offline", env=env)
    assert ok.code == 0, ok.out + ok.err
    assert "0 with problems" in ok.out

    # Someone makes `referrer` required and renames the enum type: committed, as CI sees it.
    click = json.loads((schemas / "clicks.avsc").read_text())
    click["fields"][3] = {"name": "referrer", "type": "string", "doc": "Previous page."}
    (schemas / "clicks.avsc").write_text(json.dumps(click, indent=2))
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "make referrer required")

    bad = kappa("schemas", "check", "--offline", env=env)
    assert bad.code == 1
    assert "FAIL clicks.avsc (clicks-value)" in bad.out
    assert (
        "against git: [new reads old] ClickEvent.referrer: the writer's union branch null cannot be read by the "
        "reader's string"
    ) in bad.out
    assert "compared with 1 earlier version(s) in git" in bad.out
    assert "1 with problems" in bad.out
