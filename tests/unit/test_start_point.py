"""kappa.runtime.start_point on folders laid out as Spark leaves a version's checkpoints (no Spark needed):
the first run pins where the version starts, and a later run asking for another start point is refused."""

from pathlib import Path

import pytest

from kappa.core.errors import KappaError
from kappa.runtime.declaration import Starting
from kappa.runtime.start_point import MARKER, StartPointError, pin, pinned

EARLIEST = Starting()
AT_NOON = Starting.parse("2026-01-01T12:00:00Z")


def spark_started(checkpoints: Path, query: str = "output") -> None:
    """What Spark writes once a query has fixed its start: the Kafka source's initial offsets."""
    (checkpoints / query / "sources" / "0").mkdir(parents=True)
    (checkpoints / query / "sources" / "0" / "0").write_text('v1\n{"clicks":{"0":0}}\n')


def test_the_first_run_pins_its_start_and_the_same_start_resumes(tmp_path: Path) -> None:
    checkpoints = tmp_path / "enrich_clicks" / "v2"
    pin(str(checkpoints), "enrich_clicks", 2, AT_NOON)
    spark_started(checkpoints)
    assert pinned(str(checkpoints)) == AT_NOON
    pin(str(checkpoints), "enrich_clicks", 2, AT_NOON)  # a relaunch of the same command resumes
    pin(str(checkpoints), "enrich_clicks", 2, None)  # so does a restart that asks for nothing (a deployment)
    assert pinned(str(checkpoints)) == AT_NOON


def test_another_start_is_refused_once_the_checkpoint_has_one(tmp_path: Path) -> None:
    checkpoints = tmp_path / "enrich_clicks" / "v2"
    pin(str(checkpoints), "enrich_clicks", 2, None)  # nothing asked: earliest
    spark_started(checkpoints, "dlq_clicks")  # any query of the version fixes it
    with pytest.raises(StartPointError) as refused:
        pin(str(checkpoints), "enrich_clicks", 2, AT_NOON)
    message = str(refused.value)
    assert "enrich_clicks v2 started from earliest" in message
    assert "--from 2026-01-01T12:00:00Z would be ignored" in message
    assert "Launch it with --from earliest to resume" in message
    assert "kappa replay retire enrich_clicks --version 2" in message
    assert pinned(str(checkpoints)) == EARLIEST  # the pin is unchanged


def test_a_run_that_never_fixed_its_start_may_start_elsewhere(tmp_path: Path) -> None:
    checkpoints = tmp_path / "raw_clicks" / "v1"
    pin(str(checkpoints), "raw_clicks", 1, EARLIEST)  # killed while Spark was still starting: no source log
    (checkpoints / "output" / "offsets").mkdir(parents=True)  # an empty log fixes nothing either
    pin(str(checkpoints), "raw_clicks", 1, AT_NOON)
    spark_started(checkpoints)
    assert pinned(str(checkpoints)) == AT_NOON


def test_a_checkpoint_older_than_pins_is_left_to_itself(tmp_path: Path) -> None:
    checkpoints = tmp_path / "sessionize" / "v1"
    spark_started(checkpoints)  # started before start points were recorded: where is unknown
    pin(str(checkpoints), "sessionize", 1, AT_NOON)
    assert not (checkpoints / MARKER).exists()
    assert pinned(str(checkpoints)) is None


def test_an_unreadable_pin_is_named(tmp_path: Path) -> None:
    checkpoints = tmp_path / "page_stats" / "v1"
    spark_started(checkpoints)
    (checkpoints / MARKER).write_text("{not json")
    with pytest.raises(KappaError, match=r"start.json is unreadable .* it records where this version started"):
        pin(str(checkpoints), "page_stats", 1, EARLIEST)


def test_a_remote_checkpoint_root_is_not_checked() -> None:
    pin("s3a://bucket/checkpoints/enrich_clicks/v2", "enrich_clicks", 2, AT_NOON)
    assert pinned("s3a://bucket/checkpoints/enrich_clicks/v2") is None
