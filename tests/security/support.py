"""Shared helpers for the security tests: a live server on a background thread (so sync gRPC
channels and Hypothesis can drive it), auth files, and the figures CI reports."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import grpc
from google.rpc import error_details_pb2, status_pb2

from engram_server.app import EngramServer
from engram_server.domain.auth import hash_key
from engram_server.testing import running_server

#: Figures gathered by the security tests, printed at the end of the run (see conftest.py).
FIGURES: dict[str, int] = {}


def add_figure(name: str, amount: int) -> None:
    FIGURES[name] = FIGURES.get(name, 0) + amount


def write_auth_file(path: Path, principals: Mapping[str, Mapping[str, Any]]) -> Path:
    """principals: name -> {"key": plaintext, "grants": {...}, optional "rate_limit": {...}}.
    Only hashes are written, as an operator would (``engram hash-key``)."""
    doc = {
        "principals": [
            {
                "name": name,
                "keys": [hash_key(spec["key"])],
                "grants": dict(spec.get("grants", {})),
                **({"rate_limit": dict(spec["rate_limit"])} if "rate_limit" in spec else {}),
            }
            for name, spec in principals.items()
        ]
    }
    path.write_text(json.dumps(doc, indent=2))
    return path


@contextlib.contextmanager
def threaded_server(data_dir: Path, **overrides: Any) -> Iterator[EngramServer]:
    """``running_server`` on its own event loop in a daemon thread."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="engram-test-server", daemon=True)
    thread.start()
    manager = running_server(data_dir, **overrides)
    try:
        server = asyncio.run_coroutine_threadsafe(manager.__aenter__(), loop).result(timeout=120)
        try:
            yield server
        finally:
            asyncio.run_coroutine_threadsafe(manager.__aexit__(None, None, None), loop).result(timeout=60)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


def bearer(key: str | None) -> tuple[tuple[str, str], ...]:
    return () if key is None else (("authorization", f"Bearer {key}"),)


def details(exc: grpc.RpcError) -> dict[str, Any]:
    """reason, metadata, QuotaFailure subjects and RetryInfo delay (seconds) of a failed call."""
    out: dict[str, Any] = {"reason": "", "metadata": {}, "quota": [], "retry_after": None}
    for key, value in exc.trailing_metadata() or ():  # type: ignore[attr-defined]
        if key != "grpc-status-details-bin":
            continue
        status = status_pb2.Status.FromString(value)
        for detail in status.details:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                out["reason"], out["metadata"] = info.reason, dict(info.metadata)
            elif detail.Is(error_details_pb2.QuotaFailure.DESCRIPTOR):
                quota = error_details_pb2.QuotaFailure()
                detail.Unpack(quota)
                out["quota"] = [v.subject for v in quota.violations]
            elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
                retry = error_details_pb2.RetryInfo()
                detail.Unpack(retry)
                out["retry_after"] = retry.retry_delay.ToNanoseconds() / 1e9
    return out
