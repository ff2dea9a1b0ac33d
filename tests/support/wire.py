"""A local HTTP server for the remote embedding adapter tests.

The remote providers (OpenAI, Voyage) are tested against :class:`WireServer`, a small HTTP/1.1
server started on 127.0.0.1 (port 0) in the test's own event loop that speaks their real wire
protocol: ``POST /v1/embeddings`` with a JSON body, answered with the providers' JSON shapes.
Each test decides how the server answers (success, 429/5xx, malformed bodies, stalls) and can
inspect every request the adapter sent (method, path, headers, JSON body).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import http
import inspect
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engram_server.domain.model import Vector


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    raw_body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.raw_body)


@dataclass
class Reply:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of_json(cls, status: int, payload: Any, headers: dict[str, str] | None = None) -> Reply:
        return cls(status, json.dumps(payload).encode(), dict(headers or {}))


Handler = Callable[[Recorded], Reply | Awaitable[Reply]]


def fake_vector(text: str, dim: int) -> list[float]:
    """A deterministic, deliberately un-normalised vector for ``text``."""
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    values = np.random.default_rng(seed).normal(size=dim) * 3.0
    return [float(x) for x in values]


def unit(rows: Sequence[list[float]]) -> Vector:
    m: Vector = np.asarray(rows, dtype=np.float32)
    norms: Vector = np.linalg.norm(m, axis=1, keepdims=True).astype(np.float32)
    return m / norms


def embeddings_reply(texts: list[str], dim: int, *, model: str, reverse: bool = True) -> Reply:
    """The success body both OpenAI and Voyage return; items listed in reverse order (with their
    ``index``) so that order restoration is exercised."""
    data = [
        {"object": "embedding", "index": i, "embedding": fake_vector(t, dim)} for i, t in enumerate(texts)
    ]
    if reverse:
        data.reverse()
    return Reply.of_json(
        200,
        {"object": "list", "data": data, "model": model, "usage": {"prompt_tokens": 3, "total_tokens": 3}},
    )


class WireServer:
    """Minimal keep-alive HTTP/1.1 server; ``handler`` decides each reply."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.handler: Handler = self._default
        self.dim = 8
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[Any]] = set()

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        await self._server.wait_closed()

    def _default(self, request: Recorded) -> Reply:
        body = request.json
        dim = body.get("dimensions") or body.get("output_dimension") or self.dim
        return embeddings_reply(list(body["input"]), int(dim), model=str(body["model"]))

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            while True:
                line = await reader.readline()
                if not line:
                    break
                method, path, _ = line.decode("latin-1").split(" ", 2)
                headers: dict[str, str] = {}
                while True:
                    header = await reader.readline()
                    if header in (b"\r\n", b"\n", b""):
                        break
                    name, value = header.decode("latin-1").split(":", 1)
                    headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                request = Recorded(method, path, headers, body)
                self.requests.append(request)
                reply = self.handler(request)
                if inspect.isawaitable(reply):
                    reply = await reply
                phrase = http.HTTPStatus(reply.status).phrase
                head = [f"HTTP/1.1 {reply.status} {phrase}", f"Content-Length: {len(reply.body)}"]
                head.append("Content-Type: application/json")
                head.extend(f"{k}: {v}" for k, v in reply.headers.items())
                writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + reply.body)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            # stop() cancels idle keep-alive connections; end normally, since asyncio's stream
            # callback (3.11) logs an error for a connection task that ends cancelled.
            pass
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                await writer.wait_closed()
