"""The one way tests wait for a condition: poll it, and fail with what was awaited (and a log tail) when it
does not come. No test sleeps in place of a condition, and no wait gives up silently."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path


def wait_until(
    condition: Callable[[], object],
    timeout_s: float,
    what: str,
    log: Path | Sequence[str] | None = None,
    interval_s: float = 0.5,
) -> None:
    """Return as soon as `condition()` is truthy; fail naming `what` (and the log's last lines) after
    `timeout_s`. The condition is tried once more at the deadline, so a slow poll never fails a met condition."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            if condition():
                return
            raise AssertionError(f"not within {timeout_s:.0f} s: {what}{_tail(log)}")
        time.sleep(interval_s)


def _tail(log: Path | Sequence[str] | None) -> str:
    if log is None:
        return ""
    if isinstance(log, Path):
        text = log.read_text(errors="replace")[-3000:] if log.is_file() else "(no log yet)"
    else:
        text = "".join(log[-30:])
    return f"\nlast output:\n{text}"
