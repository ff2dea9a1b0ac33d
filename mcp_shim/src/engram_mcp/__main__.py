"""``engram-mcp`` (or ``python -m engram_mcp``): run the MCP server over stdio or streamable HTTP.

Command-line options override the environment (see :mod:`engram_mcp.settings`)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence

import anyio

from engram_client import ConnectionConfig
from engram_mcp.server import EngramMcp
from engram_mcp.settings import ShimSettings

DESCRIPTION = """\
Give a model Engram's memory tools (memory_search, memory_add, memory_update, memory_delete,
reflection_run) over MCP, on stdio (the default) or streamable HTTP. Each tool calls the Engram
server through engram-client. Options override the environment."""

EPILOG = """\
environment:
  ENGRAM_ADDR            host:port of the Engram server (default localhost:50051; https:// for TLS)
  ENGRAM_API_KEY         API key sent to the server, when it requires one
  ENGRAM_TLS, ENGRAM_TLS_CA_FILE, ENGRAM_TLS_CERT_FILE, ENGRAM_TLS_KEY_FILE
                         TLS and mutual TLS to the server
  ENGRAM_TIMEOUT         seconds per call, retries included (default 10)
  ENGRAM_MCP_TRANSPORT, ENGRAM_MCP_HOST, ENGRAM_MCP_PORT, ENGRAM_MCP_PATH,
  ENGRAM_MCP_COLLECTION, ENGRAM_MCP_READ_ONLY
                         the same as the options above

example:
  ENGRAM_ADDR=127.0.0.1:50051 engram-mcp --collection assistant"""


def _parse(argv: Sequence[str] | None) -> ShimSettings:
    parser = argparse.ArgumentParser(
        prog="engram-mcp",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--transport", choices=["stdio", "streamable-http"], help="default: ENGRAM_MCP_TRANSPORT or stdio"
    )
    parser.add_argument("--host", help="streamable HTTP bind address (ENGRAM_MCP_HOST, 127.0.0.1)")
    parser.add_argument("--port", type=int, help="streamable HTTP port (ENGRAM_MCP_PORT, 8000)")
    parser.add_argument("--path", help="streamable HTTP endpoint path (ENGRAM_MCP_PATH, /mcp)")
    parser.add_argument("--collection", help="pin every tool to this collection (ENGRAM_MCP_COLLECTION)")
    parser.add_argument(
        "--read-only",
        action="store_true",
        default=None,
        help="register memory_search only (ENGRAM_MCP_READ_ONLY=1)",
    )
    args = parser.parse_args(argv)
    settings = ShimSettings.from_env()
    overrides = {
        name: value
        for name, value in (
            ("transport", args.transport),
            ("host", args.host),
            ("port", args.port),
            ("path", args.path),
            ("collection", args.collection),
            ("read_only", args.read_only),
        )
        if value is not None
    }
    return dataclasses.replace(settings, **overrides)


async def serve(settings: ShimSettings) -> None:
    shim = EngramMcp(settings)
    try:
        if settings.transport == "stdio":
            await shim.server.run_stdio_async()
        else:
            await shim.server.run_streamable_http_async(
                host=settings.host, port=settings.port, streamable_http_path=settings.path
            )
    finally:
        await shim.aclose()


def main(argv: Sequence[str] | None = None) -> None:
    try:
        settings = _parse(argv)
        ConnectionConfig.resolve()  # a bad ENGRAM_* connection setting fails here, not in a tool call
    except ValueError as exc:
        sys.exit(f"engram-mcp: {exc}")
    anyio.run(serve, settings)


if __name__ == "__main__":
    main()
