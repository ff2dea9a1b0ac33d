"""The floor of any gRPC search: a bare ``grpc.aio`` unary round trip, measured beside Engram.

    .venv/bin/python bench/grpc_echo.py serve PORT    # a server process answering /bench.Echo/Echo

The server has one unary method that returns the request's bytes as they came (no protobuf
parsing, no interceptors, no service): what a round trip through ``grpc.aio`` costs a client and a
server on this machine with nothing else in it. ``bench/cpu.py`` starts it as its own process,
like ``engram serve``, and measures it as it measures SearchMemories (p50 at c = 1, requests/s at
c = 32 on one channel, the server's CPU per call from ``/proc``). A request the size of a
SearchMemories request is sent and an answer the size of a 10-hit SearchMemories response is
returned (``--reply-bytes``), so the bytes on the wire match a search's too.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import grpc

METHOD = "/bench.Echo/Echo"


def _identity(b: bytes) -> bytes:
    return b


async def serve(port: int, reply_bytes: int) -> None:
    reply = b"x" * reply_bytes

    async def echo(request: bytes, context: Any) -> bytes:
        return reply

    handler = grpc.method_handlers_generic_handler(
        "bench.Echo",
        {
            "Echo": grpc.unary_unary_rpc_method_handler(
                echo, request_deserializer=_identity, response_serializer=_identity
            )
        },
    )
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


def stub(channel: grpc.aio.Channel) -> Any:
    """The echo method on ``channel`` (bytes in, bytes out)."""
    return channel.unary_unary(METHOD, request_serializer=_identity, response_deserializer=_identity)


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] != "serve":
        raise SystemExit("usage: grpc_echo.py serve PORT [REPLY_BYTES]")
    asyncio.run(serve(int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 4000))
