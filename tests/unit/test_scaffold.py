"""kappa.ops.scaffold without Spark: what `kappa jobs new` writes, and what it refuses."""

from pathlib import Path

import pytest

from kappa.core.errors import KappaError
from kappa.core.settings import load_settings
from kappa.ops import scaffold

SETTINGS = load_settings()


def test_a_job_reading_a_catalog_topic() -> None:
    made = scaffold.scaffold(SETTINGS, "bounced_clicks", "clicks")
    assert set(made.files) == {
        Path("jobs/bounced_clicks/__init__.py"),
        Path("jobs/bounced_clicks/transforms.py"),
        Path("jobs/bounced_clicks/declaration.py"),
        Path("tests/unit/test_bounced_clicks.py"),
    }
    declaration = made.files[Path("jobs/bounced_clicks/declaration.py")]
    assert "from jobs.catalog import CLICKS\n" in declaration
    assert "    inputs=(CLICKS,),\n" in declaration
    assert 'TABLE = DeltaTable("bounced_clicks"' in declaration
    test = made.files[Path("tests/unit/test_bounced_clicks.py")]
    assert '    "event_time": datetime(2026, 1, 1, 12, 0, tzinfo=UTC),\n' in test  # timestamp-millis
    assert '    "device": "TABLET",\n' in test  # an enum: one of its symbols
    assert '        "referrer STRING",\n' in test  # a nullable string: its other branch
    assert made.skipped == ()
    compile(declaration, "declaration.py", "exec")
    compile(test, "test.py", "exec")


def test_refusals_name_the_problem(tmp_path: Path) -> None:
    with pytest.raises(KappaError, match="job name 'Bounced-Clicks': use lower_case_with_underscores"):
        scaffold.scaffold(SETTINGS, "Bounced-Clicks", "clicks")
    with pytest.raises(KappaError, match="a job 'raw_clicks' exists already"):
        scaffold.scaffold(SETTINGS, "raw_clicks", "clicks")
    with pytest.raises(
        KappaError, match="no topic 'clickz' is declared; the declared topics are: clicks, enriched_clicks"
    ):
        scaffold.scaffold(SETTINGS, "bounced_clicks", "clickz")
    made = scaffold.scaffold(SETTINGS, "bounced_clicks", "clicks")
    (tmp_path / "jobs" / "bounced_clicks").mkdir(parents=True)
    (tmp_path / "jobs" / "bounced_clicks" / "transforms.py").write_text("# mine\n")
    with pytest.raises(KappaError, match=r"jobs/bounced_clicks/transforms.py exist already: nothing written"):
        scaffold.write(tmp_path, made)
    assert (tmp_path / "jobs" / "bounced_clicks" / "transforms.py").read_text() == "# mine\n"
    assert not (tmp_path / "tests").exists()
