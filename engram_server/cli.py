"""`engram serve` and friends."""

from __future__ import annotations

import argparse
import asyncio
import sys

from engram_server import __version__
from engram_server.config import SETTINGS_DOC, ConfigError, Settings, load_settings
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
    compact_p = sub.add_parser(
        "compact",
        help="embedded store, server stopped: merge segments down to ENGRAM_EDGE_SEGMENTS and build due "
        "indexes (e.g. after an import done with ENGRAM_EDGE_SEGMENTS=8)",
    )
    compact_p.add_argument(
        "--collection", action="append", default=[], help="only this collection (repeatable; default: all)"
    )
    migrate_p = sub.add_parser(
        "migrate",
        help="bring every collection written by an older release to this release's storage format "
        "(embedded store: with the server stopped)",
    )
    migrate_p.add_argument("--dry-run", action="store_true", help="only list what would be migrated")
    hash_p = sub.add_parser(
        "hash-key", help="print the line to store in ENGRAM_AUTH_FILE for an API key (never the key itself)"
    )
    hash_p.add_argument("key", nargs="?", help="the key (default: read from stdin, out of history)")
    hash_p.add_argument("--generate", action="store_true", help="make a new random key and print it too")
    hash_p.add_argument(
        "--scheme", choices=("sha256", "scrypt"), default="sha256", help="scrypt for human-chosen keys"
    )
    args = parser.parse_args(argv)
    if args.command == "hash-key":
        _hash_key(args.key, generate=args.generate, scheme=args.scheme)
        return

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
    if args.command == "compact":
        _compact(settings, args.collection)
        return
    if args.command == "migrate":
        _migrate(settings, dry_run=args.dry_run)
        return
    overrides = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    settings = settings.with_overrides(**overrides)
    from engram_server.app import BindError, serve  # noqa: PLC0415

    try:
        asyncio.run(serve(settings))
    except BindError as exc:
        sys.exit(f"engram: {exc}")
    except (EngramError, ConfigError) as exc:
        sys.exit(f"engram: cannot start: {exc}")
    except OSError as exc:
        sys.exit(f"engram: cannot start: {exc}")
    except KeyboardInterrupt:
        pass


def _compact(settings: Settings, collections: list[str]) -> None:
    from engram_server.app import compact  # noqa: PLC0415

    try:
        reports = asyncio.run(compact(settings, collections))
    except (EngramError, ConfigError) as exc:
        sys.exit(f"engram: compact: {exc}")
    if not reports:
        print(f"engram: compact: no collections under {settings.data_dir}")
    for r in reports:
        print(
            f"{r.collection}: {r.segments_before} -> {r.segments_after} segments, {r.points:,} points "
            f"({r.indexed_vectors:,} vectors indexed), {r.optimizer_rounds} optimizer round(s), "
            f"{r.seconds:.1f} s"
            + (f", {r.access_folded:,} access counters written into the engine" if r.access_folded else "")
            + (", dense vectors quantized (int8)" if r.quantized else "")
        )


def _migrate(settings: Settings, *, dry_run: bool) -> None:
    from engram_server.app import migrate  # noqa: PLC0415
    from engram_server.domain.model import STORAGE_FORMAT  # noqa: PLC0415

    try:
        done = asyncio.run(migrate(settings, dry_run=dry_run))
    except (EngramError, ConfigError) as exc:
        sys.exit(f"engram: migrate: {exc}")
    if not done:
        print(f"engram: migrate: every collection is at storage format {STORAGE_FORMAT}")
    for m in done:
        verb = "would migrate" if dry_run else "migrated"
        print(f"{m.collection}: {verb} storage format {m.from_format} -> {m.to_format}")


def _hash_key(key: str | None, *, generate: bool, scheme: str) -> None:
    from engram_server.domain.auth import generate_key, hash_key  # noqa: PLC0415

    if generate:
        key = generate_key()
        print(f"key: {key}")
    elif key is None:
        if sys.stdin.isatty():
            import getpass  # noqa: PLC0415

            key = getpass.getpass("API key: ")
        else:
            key = sys.stdin.readline().rstrip("\r\n")
    if not key or not key.strip():
        sys.exit("engram: hash-key: the key must not be empty")
    print(hash_key(key, scheme=scheme))


if __name__ == "__main__":
    main()
