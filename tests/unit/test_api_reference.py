"""docs/job_api.md is generated from the code (docs/api_reference.py): the committed page is what the generator
writes now, and it shows every field a job declares and every setting."""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
import sys
from pathlib import Path
from types import ModuleType

import pytest

from kappa.contracts.topic_declarations import Topic
from kappa.core.settings import KappaSettings
from kappa.runtime.declaration import JobSpec
from kappa.runtime.outputs import DeltaTable

GENERATOR = Path(__file__).resolve().parents[2] / "docs" / "api_reference.py"


@pytest.fixture(scope="module")
def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("api_reference", GENERATOR)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the generator's classes are made
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def page(generator: ModuleType) -> str:
    rendered: str = generator.render()
    return rendered


def _entry(page: str, heading: str) -> str:
    """One entry of the page: from its `### `heading`` to the next entry or section."""
    start = page.index(f"\n### `{heading}`\n")
    ends = [at for at in (page.find("\n### ", start + 1), page.find("\n## ", start + 1)) if at != -1]
    return page[start : min(ends, default=len(page))]


def _first_difference(committed: str, generated: str) -> str:
    pairs = itertools.zip_longest(committed.splitlines(), generated.splitlines())
    for number, (was, now) in enumerate(pairs, 1):
        if was != now:
            return f"line {number}: {was!r}, generated {now!r}"
    return "the line endings"


def test_the_committed_page_is_what_the_generator_writes(generator: ModuleType, page: str) -> None:
    target: Path = generator.TARGET
    committed = target.read_text(encoding="utf-8") if target.is_file() else ""
    if committed != page:
        difference = _first_difference(committed, page)
        pytest.fail(f"docs/job_api.md is out of date: run `make docs` (first difference: {difference})", pytrace=False)


@pytest.mark.parametrize("cls", [JobSpec, Topic, DeltaTable])
def test_every_public_field_is_on_the_page_with_its_explanation(generator: ModuleType, page: str, cls: type) -> None:
    entry = _entry(page, cls.__name__)
    docs = generator.field_docs(cls)
    for field in dataclasses.fields(cls):
        if field.name.startswith("_"):
            continue
        assert f"| `{field.name}` |" in entry, f"{cls.__name__}.{field.name} is not on the page: run `make docs`"
        assert docs[field.name], (
            f"{cls.__name__}.{field.name} has no explanation: write it as a comment at the end of the field's line "
            "(or right above it), then run `make docs`"
        )


def test_every_setting_is_on_the_page(page: str) -> None:
    entry = _entry(page, "KappaSettings")
    prefix = KappaSettings.model_config.get("env_prefix", "")
    missing = [name for name in KappaSettings.model_fields if f"| `{prefix}{name.upper()}` |" not in entry]
    assert not missing, f"settings missing from docs/job_api.md: {missing}; run `make docs`"


def test_check_fails_with_one_line_when_the_page_differs(
    generator: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stale = tmp_path / "job_api.md"
    stale.write_text("# an old page\n", encoding="utf-8")
    monkeypatch.setattr(generator, "TARGET", stale)

    assert generator.main(["--check"]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [generator.CHECK_MESSAGE]
    assert stale.read_text(encoding="utf-8") == "# an old page\n"  # --check never writes
