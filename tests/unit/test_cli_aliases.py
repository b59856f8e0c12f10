"""`kappa aliases`: each dataset's live version and physical name (a topic, or a Delta table's path, which readers
outside Python open), in columns that fit however long the path."""

from __future__ import annotations

from typing import Any

import pytest

import kappa.cli.replay as replay_cli
from kappa.cli.main import main
from kappa.kafka.aliases import DELTA_KIND, TOPIC_KIND, Alias

PATH = "/srv/a/checkout/deeper/than/forty/characters/.state/delta/page_stats/v2"
ALIASES = {
    "page_stats": Alias("page_stats", DELTA_KIND, "page_stats", 2, PATH, 1, "ana", 1767225600000, "cutover"),
    "enriched_clicks": Alias(
        "enriched_clicks", TOPIC_KIND, "enrich_clicks", 1, "enriched_clicks.v1", None, "kappa", 1767225600000, "first"
    ),
}


class _Registry:
    def __init__(self, _settings: Any) -> None:
        pass

    def all(self) -> dict[str, Alias]:
        return ALIASES


def test_aliases_prints_each_live_version_and_its_topic_or_table_path(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(replay_cli, "AliasRegistry", _Registry)  # no Kafka: the aliases as the topic would hold them
    assert main(["aliases"]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split() == ["dataset", "live", "previous", "physical", "changed"]
    assert [row.split()[:4] for row in rows] == [
        ["enriched_clicks", "v1", "-", "enriched_clicks.v1"],
        ["page_stats", "v2", "v1", PATH],
    ]
    changed = header.index("changed")  # the column after the long path starts at one place on every line
    assert [row[changed:] for row in rows] == [
        "2026-01-01 00:00:00 UTC by kappa (first)",
        "2026-01-01 00:00:00 UTC by ana (cutover)",
    ]
