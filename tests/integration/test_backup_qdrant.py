"""BackupStore on the Qdrant server backend: Qdrant's own snapshots, against the real server binary
(../shared/bin/qdrant), restored with `engram restore` into a fresh Qdrant and compared memory by memory."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import httpx
import pytest

from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_server.adapters.storage.qdrant import QdrantStore
from engram_server.porting_cli import _restore
from engram_server.testing import running_server
from tests.integration.test_porting import FACTS, everything
from tests.support.rpc import Stub, add

#: ENGRAM_TEST_QDRANT_BIN, else ../shared/bin/qdrant beside the repository (or a worktree's parent).
QDRANT = Path(
    os.environ.get("ENGRAM_TEST_QDRANT_BIN")
    or next(
        (str(p / "shared" / "bin" / "qdrant") for p in Path(__file__).resolve().parents[2:5]
         if (p / "shared" / "bin" / "qdrant").exists()),
        "/nonexistent",
    )
)  # fmt: skip
pytestmark = pytest.mark.skipif(not QDRANT.exists(), reason=f"no Qdrant server binary at {QDRANT}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def qdrant(root: Path) -> Iterator[str]:
    """A Qdrant server on ephemeral ports; yields its REST URL."""
    http, grpc_port = free_port(), free_port()
    env = {
        **os.environ,
        "QDRANT__SERVICE__HOST": "127.0.0.1",
        "QDRANT__SERVICE__HTTP_PORT": str(http),
        "QDRANT__SERVICE__GRPC_PORT": str(grpc_port),
        "QDRANT__STORAGE__STORAGE_PATH": str(root / "storage"),
        "QDRANT__STORAGE__SNAPSHOTS_PATH": str(root / "snapshots"),
        "QDRANT__TELEMETRY_DISABLED": "true",
    }
    root.mkdir(parents=True)
    with (root / "log.txt").open("wb") as log:
        process = subprocess.Popen([str(QDRANT)], cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{http}"
            for _ in range(600):
                try:
                    if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if process.poll() is not None:
                    raise RuntimeError((root / "log.txt").read_text()[-2000:])
                import time  # noqa: PLC0415

                time.sleep(0.1)
            else:
                raise RuntimeError("Qdrant did not become ready")
            yield url
        finally:
            process.terminate()
            process.wait(30)


@contextlib.asynccontextmanager
async def engram_on(url: str, data: Path, **kw: object) -> AsyncIterator[Stub]:
    # REST only: the client's gRPC port would be Qdrant's default 6334, not this server's
    store = QdrantStore(url, prefer_grpc=False)
    async with (
        running_server(data, store=store, **kw) as srv,  # type: ignore[arg-type]
        grpc.aio.insecure_channel(srv.address) as channel,
    ):
        yield Stub(channel)


async def test_backup_through_qdrant_snapshots_and_restore(tmp_path: Path) -> None:
    backups = tmp_path / "backups"
    backups.mkdir()
    with qdrant(tmp_path / "q1") as url:
        async with engram_on(url, tmp_path / "e1", backup_dir=backups) as stub:
            for content, kind, tags in FACTS:
                await add(stub, content, type=kind, tags=tags, collection="notes")
            await add(stub, "The office moved to Porto", collection="work")
            original = {name: await everything(stub, name) for name in ("notes", "work")}
            answer = await stub.BackupStore(s.BackupStoreRequest(directory=str(backups / "one")))
            assert {c.name: c.memory_count for c in answer.collections} == {"notes": len(FACTS), "work": 1}
            assert answer.bytes > 0
        assert sorted(p.name for p in (backups / "one" / "qdrant").iterdir())  # the snapshot files
    with qdrant(tmp_path / "q2") as url:
        assert _restore(backups / "one", None, force=False, qdrant_url=url) == 0
        assert "already has" in str(_restore(backups / "one", None, force=False, qdrant_url=url))
        async with engram_on(url, tmp_path / "e2") as stub:
            restored = {name: await everything(stub, name) for name in ("notes", "work")}
            hits = await stub.SearchMemories(
                s.SearchMemoriesRequest(query="where is the office?", collections=["work"])
            )
    assert restored == original
    assert hits.results[0].memory.content == "The office moved to Porto"
    await asyncio.sleep(0)
