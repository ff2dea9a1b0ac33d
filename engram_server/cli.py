"""`engram serve` and friends."""

from __future__ import annotations

import argparse
import asyncio
import sys

from engram_server import __version__
from engram_server.config import SETTINGS_DOC, ConfigError, load_settings
from engram_server.domain.errors import EngramError
from engram_server.telemetry import configure_logging


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="engram", description="Engram long-term memory service")
    parser.add_argument("--version", action="version", version=f"engram {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve_p = sub.add_parser("serve", help="run the gRPC server (configured by ENGRAM_* variables)")
    serve_p.add_argument("--host", help="override ENGRAM_HOST")
    serve_p.add_argument("--port", type=int, help="override ENGRAM_PORT")
    sub.add_parser("config", help="print the configuration variables and their current values")
    args = parser.parse_args(argv)

    try:
        settings = load_settings()
    except ConfigError as exc:
        sys.exit(f"engram: configuration error: {exc}")
    try:
        configure_logging(settings.log_level, settings.log_format, settings.log_levels)
    except ValueError as exc:
        sys.exit(f"engram: configuration error: ENGRAM_LOG_LEVELS: {exc}")
    if args.command == "config":
        for name, var, _ in SETTINGS_DOC:
            value = getattr(settings, name)
            shown = "***" if value and "key" in name else value
            print(f"{var}={'' if shown is None else shown}")
        return
    overrides = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    settings = settings.with_overrides(**overrides)
    from engram_server.app import serve  # noqa: PLC0415

    try:
        asyncio.run(serve(settings))
    except EngramError as exc:
        sys.exit(f"engram: cannot start: {exc}")
    except OSError as exc:
        sys.exit(f"engram: cannot start: {exc}")
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
