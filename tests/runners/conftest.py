"""Runner tests count the runner processes they start themselves."""

from __future__ import annotations

import pytest

from runners import helpers


@pytest.fixture(autouse=True)
def runners_of_other_tests() -> None:
    """Leave out of `runner_children` the runners alive before the test (a shared server's)."""
    helpers.runners_before = {p.pid for p in helpers.all_runner_children()}
