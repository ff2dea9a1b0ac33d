"""`engram export`, `engram import`, `engram backup` (clients of a running server) and `engram restore`
(server stopped). Progress goes to stderr, one line rewritten in place."""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shutil
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from google.protobuf import timestamp_pb2

from engram_server.adapters.storage.edge.lifecycle import _copy_sparse

#: The manifest a backup directory holds (see ``adapters/storage/edge/lifecycle``).
BACKUP_MANIFEST = "engram-backup.json"
#: Bytes of file per ImportMemories message.
IMPORT_CHUNK = 1024 * 1024


class Progress:
    """A progress line on stderr (only when stderr is a terminal, or ``force``)."""

    def __init__(self, what: str, *, force: bool = False) -> None:
        self._what = what
        self._on = force or sys.stderr.isatty()
        self._started = time.monotonic()
        self._shown = 0.0

    def show(self, done: int, total: int, unit: str, *, last: bool = False) -> None:
        now = time.monotonic()
        if not self._on or (not last and now - self._shown < 0.2):
            return
        self._shown = now
        elapsed = max(now - self._started, 1e-9)
        share = f" {100 * done / total:5.1f}%" if total else ""
        rate = f"{done / elapsed:,.0f} {unit}/s"
        sys.stderr.write(f"\r{self._what}: {done:,}/{total:,} {unit}{share}, {rate}, {elapsed:.0f} s")
        if last:
            sys.stderr.write("\n")
        sys.stderr.flush()


def run(args: argparse.Namespace) -> int | str:
    if args.command == "restore":
        return _restore(Path(args.dir), args.data_dir, force=args.force)
    from engram_client import EngramClient, EngramError  # noqa: PLC0415

    try:
        with EngramClient(args.addr) as client:
            if args.command == "export":
                return _export(client, args)
            if args.command == "import":
                return _import(client, args)
            return _backup(client, args)
    except EngramError as exc:
        return f"engram {args.command}: {exc}"
    except (OSError, ValueError) as exc:
        return f"engram {args.command}: {exc}"


def _when(raw: str | None, name: str) -> timestamp_pb2.Timestamp | None:
    if raw is None:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        try:
            moment = datetime.fromisoformat(raw)
        except ValueError:
            raise ValueError(f"--{name}: {raw!r} is neither an ISO 8601 date/time nor unix seconds") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        seconds = moment.timestamp()
    ts = timestamp_pb2.Timestamp()
    ts.FromNanoseconds(int(seconds * 1e9))
    return ts


def _export(client: Any, args: argparse.Namespace) -> int:
    from engram_client.proto.engram.v1 import memory_pb2  # noqa: PLC0415

    flt = memory_pb2.MemoryFilter(tags_any=args.tag)
    flt.types.extend(memory_pb2.MemoryType.Value(f"MEMORY_TYPE_{t.upper()}") for t in args.type)
    since, until = _when(args.since, "since"), _when(args.until, "until")
    if since is not None:
        flt.created_after.CopyFrom(since)
    if until is not None:
        flt.created_before.CopyFrom(until)
    progress = Progress("export")
    done = total = 0
    with _output(args.file) as out:
        for chunk in client.export(
            collections=args.collection, filter=flt, include_vectors=args.vectors, live_only=args.live_only
        ):
            out.write(chunk.data)
            done, total = chunk.memories_done, chunk.memories_total
            progress.show(done, total, "memories")
    progress.show(done, total, "memories", last=True)
    print(f"engram export: {done:,} memories written to {args.file}", file=sys.stderr)
    return 0


@contextlib.contextmanager
def _output(name: str) -> Iterator[IO[bytes]]:
    if name == "-":
        yield sys.stdout.buffer
        return
    tmp = Path(f"{name}.partial")
    with tmp.open("wb") as f:
        yield f
    os.replace(tmp, name)  # a failed export leaves no file that looks complete


def _import(client: Any, args: argparse.Namespace) -> int:
    from engram_client.proto.engram.v1 import memory_service_pb2 as s  # noqa: PLC0415

    source: IO[bytes] = sys.stdin.buffer if args.file == "-" else Path(args.file).open("rb")  # noqa: SIM115
    size = 0 if args.file == "-" else os.fstat(source.fileno()).st_size
    progress = Progress("import")
    sent = 0

    def chunks() -> Iterator[bytes]:
        nonlocal sent
        while data := source.read(IMPORT_CHUNK):
            sent += len(data)
            progress.show(sent // 1024, size // 1024, "KiB")
            yield data

    try:
        result = client.import_memories(
            chunks(),
            mode=s.IMPORT_MODE_MERGE if args.merge else s.IMPORT_MODE_RESTORE,
            reembed={"auto": s.REEMBED_AUTO, "never": s.REEMBED_NEVER, "always": s.REEMBED_ALWAYS}[
                args.reembed
            ],
            collection=args.into,
        )
    finally:
        if source is not sys.stdin.buffer:
            source.close()
    progress.show(sent // 1024, size // 1024, "KiB", last=True)
    print(
        f"engram import: {result.lines:,} lines: {result.created:,} created, {result.replaced:,} replaced, "
        f"{result.unchanged:,} unchanged, {result.duplicates:,} duplicates skipped, "
        f"{result.reembedded:,} re-embedded, into {', '.join(result.collections) or 'no collection'}",
        file=sys.stderr,
    )
    return 0


def _backup(client: Any, args: argparse.Namespace) -> int:
    answer = client.backup(os.path.abspath(args.dir))
    points = sum(c.memory_count for c in answer.collections)
    print(
        f"engram backup: {answer.directory}: {len(answer.collections)} collection(s), {points:,} points, "
        f"{answer.bytes / 1e6:,.1f} MB; writes waited {answer.barrier_seconds:.2f} s",
        file=sys.stderr,
    )
    return 0


def _restore_qdrant(
    backup: Path, info: dict[str, Any], url: str, api_key: str | None, *, force: bool
) -> int | str:
    """Upload each snapshot of a Qdrant-server backup to ``url`` (Qdrant's snapshot upload)."""
    import httpx  # noqa: PLC0415

    files: dict[str, str] = info.get("snapshots", {})
    headers = {"api-key": api_key} if api_key else {}
    base = url.rstrip("/")
    with httpx.Client(headers=headers, timeout=600.0) as http:
        present = {c["name"] for c in http.get(f"{base}/collections").json()["result"]["collections"]}
        clash = sorted(set(files) & present)
        if clash and not force:
            return (
                f"engram restore: the Qdrant server already has {', '.join(clash)}; "
                "pass --force to replace them with the backup's"
            )
        for qname, name in sorted(files.items()):
            with (backup / "qdrant" / name).open("rb") as f:
                r = http.post(
                    f"{base}/collections/{qname}/snapshots/upload",
                    params={"priority": "snapshot", "wait": "true"},
                    files={"snapshot": (name, f)},
                )
            if r.status_code != 200:
                return (
                    f"engram restore: Qdrant refused the snapshot of {qname}: {r.status_code} {r.text[:300]}"
                )
    points = info.get("points", {})
    print(
        f"engram restore: {base} now holds the backup of {info.get('taken_at')} "
        f"({len(points)} collection(s), {sum(points.values()):,} points)",
        file=sys.stderr,
    )
    return 0


def _restore(
    backup: Path,
    data_dir: str | None,
    *,
    force: bool,
    qdrant_url: str | None = None,
    qdrant_api_key: str | None = None,
) -> int | str:
    manifest = backup / BACKUP_MANIFEST
    try:
        info = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return f"engram restore: {backup} is not an Engram backup ({manifest}: {exc})"
    if isinstance(info, dict) and info.get("store") == "qdrant":
        if qdrant_url is None:
            from engram_server.config import ConfigError, load_settings  # noqa: PLC0415

            try:
                settings = load_settings()
            except ConfigError as exc:
                return f"engram restore: configuration error: {exc}"
            qdrant_url, qdrant_api_key = settings.qdrant_url, settings.qdrant_api_key
        if not qdrant_url:
            return "engram restore: a Qdrant server's backup: set ENGRAM_QDRANT_URL to the server to restore"
        return _restore_qdrant(backup, info, qdrant_url, qdrant_api_key, force=force)
    if data_dir is None:
        from engram_server.config import ConfigError, load_settings  # noqa: PLC0415

        try:
            target = load_settings().data_dir
        except ConfigError as exc:
            return f"engram restore: configuration error: {exc}"
    else:
        target = Path(data_dir)
    if not isinstance(info, dict) or info.get("engram_backup") != 1:
        return f"engram restore: {manifest}: unknown backup format {info.get('engram_backup')!r}"
    if target.resolve() == backup.resolve():
        return "engram restore: the backup and the data directory are the same directory"
    entries = [p for p in target.iterdir() if p.name != ".lock"] if target.is_dir() else []
    if entries and not force:
        return (
            f"engram restore: {target} is not empty ({len(entries)} entries); "
            "restore into an empty directory, or pass --force to replace its contents"
        )
    target.mkdir(parents=True, exist_ok=True)
    with (target / ".lock").open("a+b") as lock:
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return f"engram restore: {target} is open by a running server; stop it first"
        for entry in entries:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        for item in backup.iterdir():
            if item.name == BACKUP_MANIFEST:
                continue
            if item.is_dir():
                shutil.copytree(item, target / item.name, copy_function=_copy_sparse)
            else:
                _copy_sparse(str(item), str(target / item.name))
    points = info.get("points", {})
    print(
        f"engram restore: {target} now holds the backup of {info.get('taken_at')} "
        f"({len(points)} collection(s), {sum(points.values()):,} points)",
        file=sys.stderr,
    )
    return 0
