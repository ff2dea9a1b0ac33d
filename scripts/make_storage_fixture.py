"""Write a small embedded store for the schema-evolution test (tests/storage/test_migration.py).

The committed fixture ``tests/fixtures/store-format1.tar.gz`` was written by this script run on
the release before the trash (storage format 1, commit 2e2ad8f)::

    git worktree add /tmp/engram-format1 2e2ad8f
    PYTHONPATH=/tmp/engram-format1 .venv/bin/python scripts/make_storage_fixture.py \
        tests/fixtures/store-format1.tar.gz

It holds two collections: ``default`` (three memories, one updated once, so one history version,
and one identity memory) and ``notes`` (one memory). Run on a later release, it writes that
release's format instead (the script only uses the public server API).
"""

from __future__ import annotations

import asyncio
import sys
import tarfile
import tempfile
from pathlib import Path

import grpc

from engram_client.proto.engram.v1 import memory_pb2, memory_service_pb2, memory_service_pb2_grpc
from engram_server.testing import running_server


async def write(data_dir: Path) -> None:
    async with running_server(data_dir) as srv, grpc.aio.insecure_channel(srv.address) as channel:
        stub = memory_service_pb2_grpc.MemoryServiceStub(channel)
        first = await stub.AddMemory(
            memory_service_pb2.AddMemoryRequest(content="The user's favourite colour is green.", importance=6)
        )
        await stub.AddMemory(
            memory_service_pb2.AddMemoryRequest(
                content="The user's name is Ada Lovelace.", type=memory_pb2.MEMORY_TYPE_IDENTITY
            )
        )
        await stub.AddMemory(
            memory_service_pb2.AddMemoryRequest(content="Deploys happen on Tuesdays.", tags=["ops"])
        )
        await stub.UpdateMemory(
            memory_service_pb2.UpdateMemoryRequest(
                id=first.memory.id, content="The user's favourite colour is dark green."
            )
        )
        await stub.AddMemory(
            memory_service_pb2.AddMemoryRequest(collection="notes", content="Buy oat milk on Friday.")
        )


def main() -> None:
    out = Path(sys.argv[1])
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        asyncio.run(write(data))
        with tarfile.open(out, "w:gz") as tar:
            tar.add(data, arcname="data", filter=lambda t: None if t.name.endswith(".lock") else t)
    print(f"wrote {out} ({out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
