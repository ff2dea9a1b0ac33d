"""The shared shape of Engram's server interceptors: wrap each method's handler once, reuse it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import grpc

__all__ = ["WrappingInterceptor"]


class WrappingInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """An interceptor that replaces a method's handler by ``_wrap(method, handler)``.

    The wrapped handler is cached per method for as long as the inner handler is the same object,
    so a call costs one dictionary lookup. Unknown methods (no handler) pass through untouched:
    gRPC answers UNIMPLEMENTED and nothing runs.
    """

    def __init__(self) -> None:
        self._cache: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        method: str = handler_call_details.method
        cached = self._cache.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        wrapped = self._wrap(method, handler)
        self._cache[method] = (handler, wrapped)
        return wrapped

    def _wrap(self, full_method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        raise NotImplementedError
