"""A replay that needs records older than an input's replay horizon is refused, naming the input and the
earliest start that works; from the horizon on, the check passes. (The replay lifecycle itself, with cutover,
rollback, the runbooks and the UI: tests/e2e/test_replay_lifecycle.py.)"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from kappa.core.settings import KappaSettings
from kappa.kafka.aliases import AliasRegistry
from tests.integration.replay_pipeline import deploy_copy, produce


@pytest.mark.slow
def test_a_replay_older_than_an_input_horizon_is_refused(
    stack: KappaSettings, tmp_path: Path, unique_name: Callable[[str], str]
) -> None:
    prefix = unique_name("hz") + "_"
    # Clicks kept for a time (compact,delete), as many teams run them; retention deletes a partition's start.
    retained = {"cleanup=Cleanup.COMPACT,\n    retention_ms=FOREVER,": "cleanup=Cleanup.COMPACT_DELETE,"}
    d = deploy_copy(stack, tmp_path / "code", prefix, catalog_edits=retained)
    produce(stack, d, slice(0, 400))
    clicks = f"{prefix}clicks"
    admin = AdminClient({"bootstrap.servers": stack.bootstrap})
    for future in admin.delete_records([TopicPartition(clicks, 0, 20)]).values():
        future.result(timeout=30)

    refused = d.kappa("replay", "check", "enrich_clicks", check=False)
    assert refused.returncode == 2
    assert f"the earliest record of {clicks}" in refused.stderr
    assert "complete only since" in refused.stderr
    horizon = refused.stderr.split("Start at --from ")[1].split(" or later")[0]

    before = d.kappa("replay", "check", "enrich_clicks", "--from", "2025-12-31T00:00:00Z", check=False)
    assert before.returncode == 2
    assert "older than the replay horizon" in before.stderr

    accepted = d.kappa("replay", "check", "enrich_clicks", "--from", horizon)
    assert "checks passed" in accepted.stdout
    steps = [(s.step, s.outcome) for s in AliasRegistry(stack).steps("enrich_clicks")]
    assert ("check", "refused") in steps
    assert ("check", "ok") in steps
