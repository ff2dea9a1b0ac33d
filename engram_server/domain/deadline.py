"""The caller's deadline, carried in a context variable so the domain can refuse to start a
write it no longer has time for (gRPC cancels an abandoned handler at its next await, but a
write already handed to a storage thread would still land)."""

from __future__ import annotations

import asyncio
from contextvars import ContextVar

_deadline: ContextVar[float | None] = ContextVar("engram_deadline", default=None)


def set_time_remaining(seconds: float | None) -> None:
    """Called by the API edge with the call's remaining time (None = no deadline)."""
    _deadline.set(None if seconds is None else asyncio.get_running_loop().time() + seconds)


def ensure_time_left() -> None:
    """Raise CancelledError — the call is being abandoned — if the deadline has passed."""
    deadline = _deadline.get()
    if deadline is not None and asyncio.get_running_loop().time() >= deadline:
        raise asyncio.CancelledError("the call's deadline passed before its write")


def time_left() -> float | None:
    """Seconds left before the caller's deadline (None = no deadline; may be negative)."""
    deadline = _deadline.get()
    return None if deadline is None else deadline - asyncio.get_running_loop().time()
