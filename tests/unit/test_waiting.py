"""kappa.core.waiting.wait_until: the value that ended the wait, or a failure that says what was awaited."""

from __future__ import annotations

import itertools

import pytest

from kappa.core.errors import KappaError
from kappa.core.waiting import WaitTimeoutError, wait_until


def test_returns_the_first_truthy_value_of_the_condition() -> None:
    polls = itertools.count()
    assert wait_until(lambda: next(polls) >= 3 and "ready", 5, "never", interval_s=0) == "ready"
    assert next(polls) == 4  # polled until the fourth call, not after


def test_gives_up_with_its_message_as_a_kappa_error() -> None:
    with pytest.raises(WaitTimeoutError, match=r"^the thing did not come$") as failure:
        wait_until(lambda: None, 0.05, "the thing did not come", interval_s=0.01)
    assert isinstance(failure.value, KappaError)  # the CLI prints it as one line, without a stack trace


def test_a_message_function_is_called_only_when_the_wait_fails() -> None:
    calls: list[str] = []

    def message() -> str:
        calls.append("read")
        return "read when failing"

    assert wait_until(lambda: True, 1, message)
    assert calls == []
    with pytest.raises(WaitTimeoutError, match="read when failing"):
        wait_until(lambda: False, 0.02, message, interval_s=0.01)
    assert calls == ["read"]


def test_the_condition_is_tried_once_more_at_the_deadline() -> None:
    # A condition slower than the timeout, met on its second try: a slow poll must not fail a met condition.
    polls = itertools.count()
    assert wait_until(lambda: next(polls) == 1, 0, "not met", interval_s=0)
