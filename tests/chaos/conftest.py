"""The standing chaos suite (issue 27): hostile clients against the real server over loopback.
Part of every ``pytest`` run (and ``make chaos`` alone); each test is bounded to two minutes."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent
TIMEOUT_SECONDS = 120


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.timeout(TIMEOUT_SECONDS))
