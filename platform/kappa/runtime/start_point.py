"""A version's start point, pinned by its first run.

Spark resumes a query from its checkpoint and ignores `startingOffsets` once the checkpoint exists. A run that
asks a version for another start point than the one its checkpoint began with would silently read on from
the old one. So the first run of a version records its start point beside the version's checkpoints
(`<checkpoint_root>/<job>/v<N>/start.json`), and a later run that asks for a different one is refused with
what to do instead. Retiring the version deletes the folder, and with it the pin.

Only a local checkpoint root is checked (an `s3a://` root is Spark's to read, not this module's).
"""

from __future__ import annotations

import json
from pathlib import Path

from kappa.core.errors import KappaError
from kappa.runtime.declaration import Starting

MARKER = "start.json"
_SPARK_START_LOGS = ("sources", "offsets")  # written once a query has fixed where it starts


class StartPointError(KappaError):
    """A run asked a version to start somewhere else than where its checkpoint started."""


def _local(checkpoints: str) -> Path | None:
    return None if "://" in checkpoints else Path(checkpoints.removeprefix("file:"))


def _started(root: Path) -> bool:
    """Has a query of this version fixed its start (its source or offset log holds an entry)?"""
    if not root.is_dir():
        return False
    return any(
        (query / log).is_dir() and any((query / log).iterdir())
        for query in root.iterdir()
        if query.is_dir()
        for log in _SPARK_START_LOGS
    )


def pinned(checkpoints: str) -> Starting | None:
    """The start point the version's checkpoints began with, once a query has fixed it; None before."""
    root = _local(checkpoints)
    if root is None or not (root / MARKER).is_file() or not _started(root):
        return None
    try:
        recorded = json.loads((root / MARKER).read_text())
        return Starting(offsets=str(recorded["offsets"]), timestamp_ms=recorded.get("timestamp_ms"))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise KappaError(f"{root / MARKER} is unreadable ({exc}): it records where this version started") from None


def refuse_another(checkpoints: str, job: str, version: int, asked: Starting) -> None:
    """Raise StartPointError if the version's checkpoints began somewhere else than `asked`."""
    began = pinned(checkpoints)
    if began is None or began == asked:
        return
    raise StartPointError(
        f"{job} v{version} started from {began.text} and its checkpoint resumes from there, so "
        f"--from {asked.text} would be ignored. Launch it with --from {began.text} to resume; to start "
        f"from {asked.text}, replay it as a new version, or retire this one first "
        f"(`kappa replay retire {job} --version {version}`, never the live one)."
    )


def pin(checkpoints: str, job: str, version: int, asked: Starting | None) -> None:
    """Before a run: refuse a start point other than the pinned one (when one is asked for); on a version's
    first run, record where it starts (`asked`, or earliest when nothing is asked)."""
    root = _local(checkpoints)
    if root is None:
        return
    if asked is not None:
        refuse_another(checkpoints, job, version, asked)
    if _started(root):
        return  # pinned already, or started before pins existed: the checkpoint knows, nothing to record
    start = asked or Starting()
    root.mkdir(parents=True, exist_ok=True)
    (root / MARKER).write_text(json.dumps({"offsets": start.offsets, "timestamp_ms": start.timestamp_ms}) + "\n")
