"""Every integration test runs against the session's real stack: start it before the first one."""

import pytest

from kappa.settings import KappaSettings


@pytest.fixture(autouse=True)
def _stack_is_up(stack: KappaSettings) -> None:
    return None
