"""The innermost server interceptor: requests that do not parse, and the bytes of answers waiting
for slow readers.

Malformed bodies. grpc-python deserializes a request before any handler runs; a body that fails
to parse (truncated, wrong wire types, invalid UTF-8 in a ``string`` field) used to escape as
UNKNOWN with the parser's text and an ERROR traceback per call. Here every request deserializer
is wrapped: a body that does not parse becomes a :class:`Malformed` marker, and the call is
answered INVALID_ARGUMENT (``ERROR_REASON_INVALID_ARGUMENT``, a short fixed message) with one
WARNING line — at most one per :data:`LOG_INTERVAL_SECONDS` per method, with a count of the
ones left out. With auth on, the auth interceptor (outside this one) checks the key first, so an
unauthenticated caller learns nothing about parsing.

Answers waiting for slow readers. A unary answer is handed to gRPC and held in memory until the
client reads it; a client that opens streams and never reads pins every answer. The guard
charges each answer's serialized size to one server-wide budget (``ENGRAM_MAX_PENDING_RESPONSE_
BYTES``) until the call is over (read, cancelled, or its connection closed). An answer that
does not fit is not produced: the call gets RESOURCE_EXHAUSTED (``ERROR_REASON_RATE_LIMITED``,
``RetryInfo``), and memory stays bounded by the budget whatever the readers do.
"""

from __future__ import annotations

import ctypes
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from engram_server.api.errors import to_status
from engram_server.api.wrapping import WrappingInterceptor
from engram_server.domain.errors import InvalidArgument, QuotaViolation, RateLimited

log = logging.getLogger(__name__)

Behavior = Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Awaitable[Any]]

#: One log line per key (method, peer) at most this often.
LOG_INTERVAL_SECONDS = 10.0


class Malformed:
    """What a request deserializer returns for a body that does not parse."""

    __slots__ = ("error", "size")

    def __init__(self, error: BaseException, size: int) -> None:
        self.error = error
        self.size = size

    def __repr__(self) -> str:
        return f"Malformed({self.size} bytes: {type(self.error).__name__})"


def safe_deserializer(inner: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    if inner is None:
        return None

    def deserialize(raw: bytes) -> Any:
        try:
            return inner(raw)
        except Exception as exc:  # DecodeError, UnicodeDecodeError, RuntimeWarning-as-error, …
            return Malformed(exc, len(raw))

    return deserialize


class LogThrottle:
    """At most one message per key every ``interval`` seconds; the ones held back are counted and
    reported with the next one let through. Bounded: at most ``max_keys`` keys are remembered."""

    def __init__(
        self,
        interval: float = LOG_INTERVAL_SECONDS,
        *,
        max_keys: int = 1024,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval = interval
        self.max_keys = max_keys
        self._now = now
        self._last: dict[str, tuple[float, int]] = {}  # key -> (last emitted, suppressed since)

    def allow(self, key: str) -> int | None:
        """None: hold this one back. Otherwise log it, noting the returned count of held-back ones."""
        now = self._now()
        last = self._last.get(key)
        if last is not None and now - last[0] < self.interval:
            self._last[key] = (last[0], last[1] + 1)
            return None
        if last is None and len(self._last) >= self.max_keys:
            oldest = min(self._last, key=lambda k: self._last[k][0])
            del self._last[oldest]
        self._last[key] = (now, 0)
        return last[1] if last is not None else 0


#: After this many bytes of answers were released and none is pending, free memory is handed
#: back to the operating system (glibc keeps freed heap otherwise).
TRIM_AFTER_BYTES = 64 * 1024 * 1024


def release_free_memory() -> None:
    """``malloc_trim(0)`` where glibc has it: return freed heap pages to the OS, so memory that
    slow readers made the server hold comes back after they go. Elsewhere a no-op."""
    try:
        libc = ctypes.CDLL(None)
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return
    trim(0)


class ResponseBudget:
    """Bytes of answers handed to gRPC and not yet read by their callers, with a ceiling."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.pending = 0
        self.taken = 0
        self.refused = 0
        self._released = 0  # bytes given back since the last trim

    def try_take(self, size: int) -> bool:
        if self.limit <= 0:
            return True
        if self.pending > 0 and self.pending + size > self.limit:
            self.refused += 1
            return False
        self.pending += size  # one answer larger than the whole budget still goes alone
        self.taken += 1
        return True

    def full(self) -> bool:
        return 0 < self.limit <= self.pending

    def give_back(self, size: int) -> None:
        if self.limit <= 0:
            return
        self.pending = max(0, self.pending - size)
        self._released += size
        if self.pending == 0 and self._released >= TRIM_AFTER_BYTES:
            self._released = 0
            release_free_memory()


class GuardInterceptor(WrappingInterceptor):
    def __init__(self, *, max_pending_response_bytes: int = 0, retry_after: float = 1.0) -> None:
        super().__init__()
        self.budget = ResponseBudget(max_pending_response_bytes)
        self.retry_after = retry_after
        self.throttle = LogThrottle()
        self.malformed = 0

    def _wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        deserializer = safe_deserializer(handler.request_deserializer)
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(method, handler.unary_unary),
                request_deserializer=deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._streaming(method, handler.unary_stream),
                request_deserializer=deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.stream_unary is not None:  # (ImportMemories) its servicer refuses a Malformed message
            return grpc.stream_unary_rpc_method_handler(
                self._client_streaming(method, handler.stream_unary),
                request_deserializer=deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler  # bidirectional streaming (reflection): its servicer reads the stream itself

    def _overloaded(self) -> grpc.Status:
        return to_status(
            RateLimited(
                "the server holds too many unread answers; retry shortly",
                retry_after=self.retry_after,
                violations=(
                    QuotaViolation(
                        subject="server:pending_response_bytes",
                        description=f"at most {self.budget.limit} bytes of unread answers",
                    ),
                ),
                metadata={"limit": "pending_response_bytes"},
            )
        )

    def _client_streaming(self, method: str, inner: Callable[..., Any]) -> Callable[..., Any]:
        """A client-streaming call: its servicer refuses a Malformed message of the stream itself;
        the guard counts and logs it as it does a unary body."""

        async def behavior(request_iterator: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            async def noted() -> Any:
                async for request in request_iterator:
                    if isinstance(request, Malformed):
                        self.note_malformed(method, request, context)
                    yield request

            return await inner(noted(), context)

        return behavior

    def note_malformed(
        self, method: str, request: Malformed, context: grpc.aio.ServicerContext[Any, Any]
    ) -> None:
        """Count a message that does not parse, and log it (rate limited)."""
        self.malformed += 1
        held_back = self.throttle.allow(f"malformed {method}")
        if held_back is not None:
            log.warning(
                "malformed request to %s from %s: %d bytes that do not parse (%s)%s",
                method,
                context.peer(),
                request.size,
                type(request.error).__name__,
                f"; {held_back} more since the last report" if held_back else "",
            )

    async def refuse_malformed(
        self, method: str, request: Malformed, context: grpc.aio.ServicerContext[Any, Any]
    ) -> None:
        self.note_malformed(method, request, context)
        await context.abort_with_status(
            to_status(
                InvalidArgument(
                    "the request body is not a valid protobuf message for this method",
                    metadata={"method": method},
                )
            )
        )

    def _unary(self, method: str, inner: Behavior) -> Behavior:
        budget = self.budget

        async def behavior(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            if isinstance(request, Malformed):
                await self.refuse_malformed(method, request, context)
            if budget.full():  # refuse before doing the work: the answer could not be held
                budget.refused += 1
                await context.abort_with_status(self._overloaded())
            response = await inner(request, context)
            if budget.limit <= 0 or response is None:
                return response
            size = response.ByteSize()
            if not budget.try_take(size):
                del response
                await context.abort_with_status(self._overloaded())
            context.add_done_callback(lambda _ctx: budget.give_back(size))
            return response

        return behavior

    def _streaming(self, method: str, inner: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.isasyncgenfunction(inner):

            async def generating(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
                if isinstance(request, Malformed):
                    await self.refuse_malformed(method, request, context)
                async for item in inner(request, context):
                    yield item

            return generating

        async def writing(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            if isinstance(request, Malformed):
                await self.refuse_malformed(method, request, context)
            return await inner(request, context)

        return writing
