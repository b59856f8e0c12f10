"""The one way the platform and its tests wait for a condition: poll it, and fail with what was awaited when it
does not come. No wait gives up silently: a caller that has a fallback (SIGKILL after SIGTERM) catches
`WaitTimeoutError` and says so where it does."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from kappa.core.errors import KappaError

T = TypeVar("T")


class WaitTimeoutError(KappaError):
    """A condition did not come within its time; the message says what was awaited."""


def wait_until(
    condition: Callable[[], T | None],
    timeout_s: float,
    message: str | Callable[[], str],
    *,
    interval_s: float = 0.2,
) -> T:
    """Return `condition()`'s first truthy value; raise `WaitTimeoutError(message)` after `timeout_s`.

    The condition is tried once more at the deadline, so a slow poll never fails a met condition. `message` may be
    a function, for a message that reads something (a log's last lines) only when the wait fails."""
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        if time.monotonic() >= deadline:
            if value := condition():
                return value
            raise WaitTimeoutError(message() if callable(message) else message)
        time.sleep(interval_s)
    return value
