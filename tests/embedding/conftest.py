"""Fixtures for the embedding adapter tests (the wire server is described in ``_wire.py``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.support.wire import WireServer


@pytest.fixture
async def wire_server() -> AsyncIterator[WireServer]:
    server = WireServer()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()
