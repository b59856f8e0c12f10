"""docs/architecture.md lists every module of the library, one line each, and nothing that is gone."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "platform" / "kappa"


def test_the_module_list_names_each_module_of_the_library_once() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = text.split("Modules, one line each:", 1)[1].split("```")[1]
    listed = [line.split()[0] for line in block.strip().splitlines()]
    modules = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if path.name not in ("__init__.py", "__main__.py")
    )
    assert len(listed) == len(set(listed)), [m for m in listed if listed.count(m) > 1]
    assert sorted(listed) == modules, (set(modules) - set(listed), set(listed) - set(modules))
    assert all(re.fullmatch(r"[a-z_/]+\.py", module) for module in listed)
