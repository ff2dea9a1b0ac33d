"""The shim's settings, all from the environment (the Engram connection itself — ``ENGRAM_ADDR``,
``ENGRAM_API_KEY``, ``ENGRAM_TLS*``, ``ENGRAM_TIMEOUT`` — is read by engram-client).

=========================  ==========================================================================
``ENGRAM_MCP_COLLECTION``  Pin every tool to this collection. The tools then have no collection
                           parameter, so a model cannot reach another collection (tenant).
``ENGRAM_MCP_READ_ONLY``   ``1``/``true``: register ``memory_search`` only; no tool that writes.
``ENGRAM_MCP_TRANSPORT``   ``stdio`` (default) or ``streamable-http``.
``ENGRAM_MCP_HOST``        Streamable HTTP bind address (default ``127.0.0.1``).
``ENGRAM_MCP_PORT``        Streamable HTTP port (default ``8000``).
``ENGRAM_MCP_PATH``        Streamable HTTP endpoint path (default ``/mcp``).
=========================  ==========================================================================
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

Transport = Literal["stdio", "streamable-http"]

_COLLECTION = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


@dataclass(frozen=True, slots=True)
class ShimSettings:
    collection: str | None = None
    read_only: bool = False
    transport: Transport = "stdio"
    host: str = "127.0.0.1"
    port: int = 8000
    path: str = "/mcp"

    def __post_init__(self) -> None:
        if self.collection is not None and not _COLLECTION.match(self.collection):
            raise ValueError(
                f"ENGRAM_MCP_COLLECTION {self.collection!r} is not a collection name "
                "(1-64 of a-z, 0-9, '_', '-', starting with a letter or digit)"
            )
        if self.transport not in ("stdio", "streamable-http"):
            raise ValueError(f"transport must be stdio or streamable-http; got {self.transport!r}")
        if not 0 < self.port < 65536:
            raise ValueError(f"port must be in 1-65535; got {self.port}")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ShimSettings:
        env = os.environ if env is None else env
        read_only = env.get("ENGRAM_MCP_READ_ONLY", "").strip().lower()
        if read_only not in _TRUE | _FALSE:
            raise ValueError(f"ENGRAM_MCP_READ_ONLY must be a boolean; got {read_only!r}")
        raw_transport = env.get("ENGRAM_MCP_TRANSPORT", "").strip() or "stdio"
        transports: dict[str, Transport] = {"stdio": "stdio", "streamable-http": "streamable-http"}
        if raw_transport not in transports:
            raise ValueError(f"ENGRAM_MCP_TRANSPORT must be stdio or streamable-http; got {raw_transport!r}")
        return cls(
            collection=env.get("ENGRAM_MCP_COLLECTION", "").strip() or None,
            read_only=read_only in _TRUE,
            transport=transports[raw_transport],
            host=env.get("ENGRAM_MCP_HOST", "").strip() or "127.0.0.1",
            port=int(env.get("ENGRAM_MCP_PORT", "").strip() or 8000),
            path=env.get("ENGRAM_MCP_PATH", "").strip() or "/mcp",
        )
