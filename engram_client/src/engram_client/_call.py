"""One call's attempt loop, written once for both clients.

:func:`attempts` is the whole policy of a call (deadline, trace context per attempt, error
mapping, retries with backoff, the "lost attempt already did it" answer, the span's record) as a
generator that does no I/O: it yields :class:`Rpc` ("send this request now") and :class:`Sleep`
("wait this long"), and is sent each RPC's response or thrown its ``grpc.RpcError``. Its return
value is the call's result; an exception it raises is the call's error. The blocking client drives
it with a stub call and ``time.sleep``, the asyncio client with ``await`` and ``asyncio.sleep``:
two thin faces over one loop.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message

from engram_client import _otel
from engram_client._plans import Plan
from engram_client.config import RetryPolicy
from engram_client.errors import EngramError, error_from_rpc_error

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Rpc:
    """Send ``request`` now, with this deadline (seconds left, None = none) and metadata."""

    request: Message
    timeout: float | None
    metadata: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Sleep:
    """Wait ``seconds`` before the next attempt."""

    seconds: float


Step = Rpc | Sleep


class Attempts:
    """The retry bookkeeping of one call."""

    def __init__(self, policy: RetryPolicy, timeout: float | None) -> None:
        self.policy = policy
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.attempt = 0
        self.unavailable_seen = False

    def remaining(self) -> float | None:
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - time.monotonic())

    def next_delay(self, plan: Plan[Any], error: EngramError) -> float | None:
        """Seconds to wait before retrying, or None to give up and raise ``error``."""
        if error.code != grpc.StatusCode.UNAVAILABLE or not plan.retry:
            return None
        if self.attempt >= self.policy.max_attempts:
            return None
        delay = self.policy.backoff(self.attempt)
        if error.retry_after is not None:
            delay = max(delay, error.retry_after.total_seconds())
        remaining = self.remaining()
        if remaining is not None and delay >= remaining:
            return None
        self.unavailable_seen = True
        return delay

    def gone(self, plan: Plan[R], error: EngramError) -> bool:
        return (
            self.unavailable_seen
            and plan.gone is not None
            and plan.gone_error is not None
            and isinstance(error, plan.gone_error)
        )


def attempts(
    plan: Plan[R],
    *,
    policy: RetryPolicy,
    timeout: float | None,
    metadata: tuple[tuple[str, str], ...],
    span: _otel.CallSpan,
) -> Generator[Step, Any, R]:
    """The attempts of one call of ``plan``; see the module docstring for how to drive it."""
    tries = Attempts(policy, timeout)
    while True:
        tries.attempt += 1
        # Every attempt carries the current trace context (this call's span, if any).
        try:
            response = yield Rpc(plan.request, tries.remaining(), _otel.trace_metadata(metadata))
        except grpc.RpcError as exc:
            error = error_from_rpc_error(exc)
        else:
            span.finish(tries.attempt)
            return plan.convert(response)
        if tries.gone(plan, error):
            assert plan.gone is not None
            span.finish(tries.attempt)
            return plan.gone()
        delay = tries.next_delay(plan, error)
        if delay is None:
            span.finish(tries.attempt, error)
            if plan.map_error is not None:
                mapped = plan.map_error(error)
                if mapped is not error:
                    raise mapped from error
            raise error
        span.retry(tries.attempt, error, delay)
        yield Sleep(delay)
