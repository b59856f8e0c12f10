"""The one way tests wait for a condition: the platform's `wait_until`, failing with what was awaited and a log
tail. No test sleeps in place of a condition, and no wait gives up silently."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from kappa.core.waiting import wait_until as _wait_until


def wait_until(
    condition: Callable[[], object],
    timeout_s: float,
    what: str,
    log: Path | Sequence[str] | None = None,
    interval_s: float = 0.5,
) -> None:
    """Return as soon as `condition()` is truthy; fail naming `what` (and the log's last lines) after
    `timeout_s` (kappa.core.waiting.wait_until, the platform's own, with a test's message)."""
    _wait_until(
        condition, timeout_s, lambda: f"not within {timeout_s:.0f} s: {what}{_tail(log)}", interval_s=interval_s
    )


def _tail(log: Path | Sequence[str] | None) -> str:
    if log is None:
        return ""
    if isinstance(log, Path):
        text = log.read_text(errors="replace")[-3000:] if log.is_file() else "(no log yet)"
    else:
        text = "".join(log[-30:])
    return f"\nlast output:\n{text}"
