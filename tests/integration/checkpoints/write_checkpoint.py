"""Writes a checkpoint folder of this package with the operators jar that KAPPA_JARS_DIR selects (README.md)."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from kappa.core.settings import load_settings
from kappa.spark.session import get_spark
from tests.batch_streams import run_batches, write_batches

CHECKPOINTS = Path(__file__).parent
INPUT = "@KAPPA_CHECKPOINT_INPUT@"  # where the file source's log names the input folder


def write(target: Path) -> None:
    """Runs the first batches of the operator's upgrade log (the folder's name, `<operator>_format<N>`, names the
    operator) with the jar of this process, and keeps the checkpoint at `target`."""
    from tests.integration import test_operators_differential as differential  # which imports `placed` from here

    operators = {
        "as_of": (differential.upgrade_log, differential.SCHEMA, differential.enriched_changes_of_both),
        "sessions": (differential.sessions_upgrade_log, differential.SESSION_SCHEMA, differential.sessions_of),
    }
    upgrade_log, schema, job = operators[target.name.rsplit("_format", 1)[0]]
    batches, first = upgrade_log()
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "in"
        write_batches(folder, batches[:first], schema)
        spark = get_spark(load_settings(), "write-checkpoint")
        seen = run_batches(spark, folder, schema, job, 4)
        spark.stop()
        assert sorted(seen) == list(range(first)), sorted(seen)
        keep(folder.parent / "in-checkpoint", target, str(folder))


def keep(checkpoint: Path, target: Path, input_folder: str) -> None:
    """The checkpoint without Hadoop's checksums, the input folder's absolute path replaced (the checkpoint is its
    sibling, so that replaces the checkpoint's own paths too)."""
    if target.exists():
        raise SystemExit(f"{target} exists: a checkpoint of an earlier layout is written once, never rewritten")
    for source in sorted(checkpoint.rglob("*")):
        if source.is_dir() or source.name.endswith(".crc"):
            continue
        data = source.read_bytes().replace(input_folder.encode(), INPUT.encode())
        (target / source.relative_to(checkpoint)).parent.mkdir(parents=True, exist_ok=True)
        (target / source.relative_to(checkpoint)).write_bytes(data)


def placed(fixture: Path, checkpoint: Path, input_folder: Path) -> None:
    """A copy of the kept checkpoint at `checkpoint` (the sibling `<input folder>-checkpoint`, as run_batches
    has it), reading `input_folder`."""
    shutil.copytree(fixture, checkpoint)
    for path in checkpoint.rglob("*"):
        if path.is_file() and INPUT.encode() in (data := path.read_bytes()):
            path.write_bytes(data.replace(INPUT.encode(), str(input_folder).encode()))


if __name__ == "__main__":
    write(CHECKPOINTS / sys.argv[1])
