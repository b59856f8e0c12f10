"""How `kappa replay check` and `kappa replay plan` word an input's replay horizon (issue 41: a topic with
nothing deleted read "complete since complete")."""

from __future__ import annotations

from kappa.cli.replay import horizon_line


def test_a_topic_that_kept_every_record_is_complete_without_a_since() -> None:
    line = horizon_line("clicks", "complete")
    assert line == "clicks: complete, every record since the first retained"
    assert "since complete" not in line


def test_a_topic_that_lost_older_records_is_complete_since_a_time() -> None:
    line = horizon_line("user_profiles", "2026-01-01T00:00:00Z")
    assert line == "user_profiles: complete since 2026-01-01T00:00:00Z, older records deleted (retention or compaction)"
