"""Every runbook in replays/, its commands run as written, in the order an on-call engineer would meet them.

One pipeline copy on the session's stack (its own topics) goes through: a planned logic change (v1 -> v2,
v1 retired), a bug-fix replay (v3), a rollback (back to v2), a replay from a timestamp (v4, cut over with
--force after the verification fails as the runbook says it will) and a schema change (v5). The code changes
the runbooks describe in prose (bump `version`, change the logic or the schema) are made here, on the copy.
After each runbook the test checks the alias the runbook promises.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from pathlib import Path

import pytest

from kappa.aliases import AliasRegistry
from kappa.settings import KappaSettings
from tests.integration.replay_pipeline import REPO, Deployment, deploy_copy, produce

RUNBOOKS = REPO / "replays"
EXPECTED_EXIT = re.compile(r"#\s*exits\s+(\d+)")


def commands(runbook: str) -> list[tuple[list[str], int]]:
    """The runbook's commands (lines of its bash blocks) and the exit status each is expected to end with."""
    text = (RUNBOOKS / runbook).read_text()
    found = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.DOTALL):
        for line in block.splitlines():
            if not line.strip():
                continue
            expected = EXPECTED_EXIT.search(line)
            command = shlex.split(line.split("#")[0])
            assert command[0] == "kappa", f"{runbook}: a step is one kappa command, got {line!r}"
            found.append((command[1:], int(expected.group(1)) if expected else 0))
    assert found, f"{runbook} has no commands"
    return found


def run(d: Deployment, runbook: str) -> str:
    """Run every command of the runbook; return their output."""
    out = []
    for args, status in commands(runbook):
        done = d.kappa(*args, check=False)
        assert done.returncode == status, (
            f"{runbook}: kappa {shlex.join(args)} exited {done.returncode}, expected {status}:\n"
            f"{done.stdout}\n{done.stderr}"
        )
        out.append(done.stdout)
    return "\n".join(out)


def test_every_runbook_in_replays_is_covered() -> None:
    assert {p.name for p in RUNBOOKS.glob("*.md")} - {"README.md"} == {
        "planned-logic-change.md",
        "bug-fix-replay.md",
        "rollback.md",
        "replay-from-timestamp.md",
        "schema-change.md",
    }


@pytest.mark.timeout(1800)
def test_runbooks_as_written(stack: KappaSettings, tmp_path: Path, unique_name: Callable[[str], str]) -> None:
    prefix = unique_name("rb") + "_"
    d = deploy_copy(stack, tmp_path / "pipeline", prefix)
    schemas = d.settings(stack).schemas_path  # the copy's own: the schema change edits it
    produce(stack, d, slice(0, None))
    d.kappa("jobs", "run", "enrich_clicks", "--available-now")  # v1: live as the first version
    registry = AliasRegistry(stack)
    dataset = f"{prefix}enriched_clicks"

    def live() -> int:
        alias = registry.live(dataset)
        assert alias is not None
        return alias.version

    declaration = "enrich_clicks/declaration.py"
    started: list[int] = []
    try:
        # A planned change: a shorter profile lateness, as v2.
        d.edit(declaration, "version=1,", "version=2,")
        d.edit(declaration, '"profile_lateness_minutes": 20', '"profile_lateness_minutes": 5')
        out = run(d, "planned-logic-change.md")
        started.append(2)
        assert "checks passed" in out
        assert "quality suite enriched_clicks: ok" in out  # the data contract ran on the new output
        assert "verification: PASSED" in out
        assert "v1 -> v2" in out
        assert "v1 retired" in out
        assert live() == 2

        # A bug fix: the lateness should have been 10, as v3.
        d.edit(declaration, "version=2,", "version=3,")
        d.edit(declaration, '"profile_lateness_minutes": 5', '"profile_lateness_minutes": 10')
        out = run(d, "bug-fix-replay.md")
        started.append(3)
        assert "verification: PASSED" in out
        assert "v2 -> v3" in out
        assert live() == 3

        out = run(d, "rollback.md")
        assert "v3 -> v2" in out
        assert live() == 2

        # From a timestamp: v4 has no output before it, so verification fails, and the cutover is forced.
        d.edit(declaration, "version=3,", "version=4,")
        out = run(d, "replay-from-timestamp.md")
        started.append(4)
        assert "verification: FAILED" in out
        assert "only in live" in out
        assert live() == 4
        forced = [s for s in registry.steps("enrich_clicks") if s.step == "cutover" and s.to_version == 4]
        assert forced[-1].facts["forced"] is True

        # A schema change: enriched clicks gain the lateness the job applied, with a default; v5.
        avsc = schemas / "enriched_click.avsc"
        avsc.write_text(avsc.read_text().replace(
            '"doc": "Country of the user at event_time; null without a profile."}',
            '"doc": "Country of the user at event_time; null without a profile."},\n'
            '    {"name": "profile_lateness_minutes", "type": "int", "default": 20, '
            '"doc": "The profile lateness L the enrichment applied (minutes)."}',
        ))  # fmt: skip
        d.edit(declaration, "version=4,", "version=5,")
        d.edit(
            declaration,
            'enriched = batch.where(F.col("kind") == ENRICHED)',
            'enriched = batch.where(F.col("kind") == ENRICHED).withColumn(\n'
            '                "profile_lateness_minutes", F.lit(int(ctx.spec.settings["profile_lateness_minutes"]))\n'
            "            )",
        )
        out = run(d, "schema-change.md")
        started.append(5)
        schema_line = next(line for line in out.splitlines() if line.strip().startswith("schema:"))
        assert "compatible, registered at prepare" in schema_line, schema_line
        assert "verification: PASSED" in out
        assert live() == 5
    finally:
        from kappa import deployments

        for version in started:
            deployments.stop_if_running(d.settings(stack), "enrich_clicks", version, timeout_s=30)

    steps = [(s.step, s.from_version, s.to_version, s.outcome) for s in registry.steps("enrich_clicks")]
    for expected in [("cutover", 1, 2, "ok"), ("retire", 2, 1, "ok"), ("cutover", 2, 3, "ok"),
                     ("rollback", 3, 2, "ok"), ("cutover", 2, 4, "ok"), ("cutover", 4, 5, "ok")]:  # fmt: skip
        assert expected in steps
