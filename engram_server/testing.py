"""Run a real Engram server in-process for tests (port 0, real adapters, real gRPC)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from google.rpc import error_details_pb2, status_pb2

from engram_server.app import EngramServer
from engram_server.config import Settings
from engram_server.domain.clock import Clock
from engram_server.ports import Embedder, Llm, Store

RunningServer = EngramServer


@contextlib.asynccontextmanager
async def running_server(
    data_dir: Path,
    *,
    clock: Clock | None = None,
    store: Store | None = None,
    embedder: Embedder | None = None,
    llm: Llm | None = None,
    **settings_overrides: Any,
) -> AsyncIterator[EngramServer]:
    """Start a server on 127.0.0.1:<free port> with its data under ``data_dir``.

    ``address`` is "127.0.0.1:PORT"; ``service``, ``store`` and ``clock`` are the live
    components. The sweeper is off unless ``sweep_interval_seconds`` is given.
    """
    settings = Settings(
        host="127.0.0.1",
        port=0,
        data_dir=data_dir,
        grace_seconds=2.0,
        sweep_interval_seconds=0.0,
    ).with_overrides(**settings_overrides)
    server = EngramServer.create(settings, clock=clock, store=store, embedder=embedder, llm=llm)
    await server.start()
    try:
        yield server
    finally:
        await server.stop(grace=1.0)


GRPC_DETAILS_KEY = "grpc-status-details-bin"


@dataclass
class RichError:
    code: grpc.StatusCode
    message: str
    reason: str = ""
    domain: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    violations: dict[str, str] = field(default_factory=dict)


def rich(exc: grpc.aio.AioRpcError) -> RichError:
    out = RichError(code=exc.code(), message=exc.details() or "")
    for key, value in exc.trailing_metadata() or ():
        if key != GRPC_DETAILS_KEY:
            continue
        status = status_pb2.Status.FromString(value)
        assert status.code == exc.code().value[0]
        for detail in status.details:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                out.reason, out.domain, out.metadata = info.reason, info.domain, dict(info.metadata)
            elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
                bad = error_details_pb2.BadRequest()
                detail.Unpack(bad)
                out.violations = {v.field: v.description for v in bad.field_violations}
    return out
