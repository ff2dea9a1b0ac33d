"""The scripted local OpenAI-wire LLM the tests of this package talk to."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.reflection.test_reflection import Llm
from tests.support.wire import WireServer


@pytest.fixture
async def llm() -> AsyncIterator[Llm]:
    """A chat-completions endpoint on loopback, scripted per test (:class:`Llm`)."""
    wire = WireServer()
    await wire.start()
    try:
        yield Llm(wire)
    finally:
        await wire.stop()
