"""The shim's settings, all from the environment (the Engram connection itself — ``ENGRAM_ADDR``,
``ENGRAM_API_KEY``, ``ENGRAM_TLS*``, ``ENGRAM_TIMEOUT`` — is read by engram-client).

=========================  ==========================================================================
``ENGRAM_MCP_COLLECTION``  Pin every tool to this collection. The tools then have no collection
                           parameter, so a model cannot reach another collection (tenant).
``ENGRAM_MCP_READ_ONLY``   ``1``/``true``: register ``memory_context``, ``memory_search`` and
                           ``memory_triggers`` only; no tool that writes.
``ENGRAM_MCP_TRANSPORT``   ``stdio`` (default) or ``streamable-http``.
``ENGRAM_MCP_HOST``        Streamable HTTP bind address (default ``127.0.0.1``).
``ENGRAM_MCP_PORT``        Streamable HTTP port (default ``8000``).
``ENGRAM_MCP_PATH``        Streamable HTTP endpoint path (default ``/mcp``).
``ENGRAM_MCP_AGENT_ID``    The agent these tools act for (letters, digits and ``. _ : @ / + -``): its
                           memories carry it and ``memory_context`` finds its last session by it.
                           Default: none (the anonymous agent).
``ENGRAM_MCP_SESSION_ID``  The session id (default: a new one each time the shim starts, i.e. one
                           per MCP session for a stdio shim). Memories added carry it.
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
_SESSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@/+-]{0,127}")
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
    agent_id: str | None = None
    session_id: str | None = None

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
        for name, value in (
            ("ENGRAM_MCP_AGENT_ID", self.agent_id),
            ("ENGRAM_MCP_SESSION_ID", self.session_id),
        ):
            if value is not None and not _SESSION.fullmatch(value):
                raise ValueError(
                    f"{name} {value!r}: 1-128 characters of letters, digits and . _ : @ / + -, "
                    "starting with a letter or digit"
                )

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
            agent_id=env.get("ENGRAM_MCP_AGENT_ID", "").strip() or None,
            session_id=env.get("ENGRAM_MCP_SESSION_ID", "").strip() or None,
        )
