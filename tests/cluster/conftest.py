"""The cluster tests start three Qdrant nodes and kill one: about two minutes on two busy cores, so
they run with `make test-cluster` (ENGRAM_TEST_CLUSTER=1), not in the default test run."""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if os.environ.get("ENGRAM_TEST_CLUSTER") == "1":
        return
    skip = pytest.mark.skip(
        reason="a 3-node Qdrant cluster: run with `make test-cluster` (ENGRAM_TEST_CLUSTER=1)"
    )
    for item in items:
        if item.get_closest_marker("cluster"):
            item.add_marker(skip)
