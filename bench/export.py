"""Export, import and backup figures at N memories (docs/performance.md).

    .venv/bin/python bench/export.py --memories 100000 --reembed 2000

Starts an in-process server (qdrant-edge in a temp dir, the local 384-dim model) and, through the
gRPC API (the same calls as `engram import` / `export` / `backup`):

1. imports N synthetic memories from a file WITH vectors (random unit vectors labelled with the
   server's model: restore as is, nothing embedded): import rate without re-embedding;
2. exports them without vectors, then with vectors: export rates and file sizes;
3. imports the with-vectors export again into the same collection: the idempotent pass (every
   memory `unchanged`);
4. backs the store up (BackupStore): time, size, and how long writes waited;
5. imports the first `--reembed` memories of the without-vectors export into a new collection:
   the re-embedding rate (the local model on this machine's CPUs; extrapolate to N linearly, the
   model's cost per text does not grow with the store).

Figures are single runs on a shared machine: report `uptime` with them.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import random
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import numpy as np

from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc
from engram_server.testing import running_server

WORDS = [
    "tea",
    "coffee",
    "deploy",
    "friday",
    "meeting",
    "sister",
    "lisbon",
    "rust",
    "borrow",
    "checker",
    "garden",
    "bicycle",
    "invoice",
    "flight",
    "hotel",
    "budget",
    "python",
    "review",
    "release",
    "alpine",
    "hiking",
    "piano",
    "lesson",
    "dentist",
    "recipe",
]


def synthetic_file(path: Path, n: int, model: str, dimension: int) -> None:
    rng = np.random.default_rng(7)
    pick = random.Random(7)
    now = time.time()
    with path.open("w") as f:
        header = {
            "engram_export": 1, "collection": "bench", "embedding_model": model, "dimension": dimension,
            "created_at": now - 86400 * 400, "lexical": None, "exported_at": now, "vectors": True,
            "memories": n,
        }  # fmt: skip
        f.write(json.dumps(header) + "\n")
        for i in range(n):
            vec = rng.standard_normal(dimension).astype(np.float32)
            vec /= np.linalg.norm(vec)
            created = now - 86400 * 365 + i * (86400 * 365 / n)
            line = {
                "id": f"{i:08x}-0000-4000-8000-{pick.getrandbits(48):012x}",
                "content": f"Note {i}: " + " ".join(pick.choice(WORDS) for _ in range(12)),
                "type": pick.choice(["event", "event", "insight", "directive", "identity"]),
                "importance": pick.randint(1, 10),
                "tags": [pick.choice(WORDS)],
                "metadata": {"n": str(i)},
                "created_at": created,
                "updated_at": created,
                "valid_until": None,
                "version": 1,
                "vector": base64.b64encode(vec.astype("<f4").tobytes()).decode(),
                "history": [],
            }
            f.write(json.dumps(line) + "\n")


async def chunks(
    path: Path, first: s.ImportMemoriesRequest, limit: int = 0
) -> AsyncIterator[s.ImportMemoriesRequest]:
    sent = 0
    with path.open("rb") as f:
        lines: list[bytes] = []
        size = 0
        for line in f:
            lines.append(line)
            size += len(line)
            sent += 1
            if size >= 1 << 20 or (limit and sent > limit):
                msg = s.ImportMemoriesRequest(data=b"".join(lines))
                if first is not None:
                    msg.MergeFrom(first)
                    first = None  # type: ignore[assignment]
                yield msg
                lines, size = [], 0
            if limit and sent > limit:  # the header and `limit` memories
                return
        msg = s.ImportMemoriesRequest(data=b"".join(lines))
        if first is not None:
            msg.MergeFrom(first)
        yield msg


async def export_to(stub: memory_service_pb2_grpc.MemoryServiceStub, path: Path, vectors: bool) -> int:
    done = 0
    with path.open("wb") as f:
        async for chunk in stub.ExportMemories(
            s.ExportMemoriesRequest(collections=["bench"], include_vectors=vectors)
        ):
            f.write(chunk.data)
            done = chunk.memories_done
    return done


def du(path: Path) -> int:
    """Bytes allocated on disk (the engine's files are sparse)."""
    return sum(p.stat().st_blocks * 512 for p in path.rglob("*") if p.is_file())


async def main(n: int, reembed: int) -> None:
    with tempfile.TemporaryDirectory(prefix="engram-bench-export-") as tmp:
        root = Path(tmp)
        (root / "backups").mkdir()
        async with running_server(
            root / "data", backup_dir=root / "backups", max_message_bytes=8 << 20
        ) as srv:
            embedder = srv.service.embedder
            source = root / "source.jsonl"
            synthetic_file(source, n, embedder.model_id, embedder.dimension)
            async with grpc.aio.insecure_channel(
                srv.address,
                options=[
                    ("grpc.max_receive_message_length", 8 << 20),
                    ("grpc.max_send_message_length", 8 << 20),
                ],
            ) as channel:
                stub = memory_service_pb2_grpc.MemoryServiceStub(channel)
                rows: list[tuple[str, str]] = []

                t = time.perf_counter()
                r = await stub.ImportMemories(chunks(source, s.ImportMemoriesRequest()))
                dt = time.perf_counter() - t
                assert r.created == n, r
                rows.append(
                    ("import, vectors in the file (restore)", f"{n / dt:,.0f} memories/s ({dt:.1f} s)")
                )

                for vectors in (False, True):
                    out = root / f"export-{vectors}.jsonl"
                    t = time.perf_counter()
                    done = await export_to(stub, out, vectors)
                    dt = time.perf_counter() - t
                    assert done == n
                    rows.append(
                        (
                            f"export, {'with' if vectors else 'without'} vectors",
                            f"{n / dt:,.0f} memories/s ({dt:.1f} s), file {out.stat().st_size / 1e6:,.0f} MB",
                        )
                    )

                t = time.perf_counter()
                r = await stub.ImportMemories(chunks(root / "export-True.jsonl", s.ImportMemoriesRequest()))
                dt = time.perf_counter() - t
                assert r.unchanged == n and r.created == 0, r
                rows.append(
                    (
                        "import of the same file again (all unchanged)",
                        f"{n / dt:,.0f} memories/s ({dt:.1f} s)",
                    )
                )

                t = time.perf_counter()
                b = await stub.BackupStore(s.BackupStoreRequest(directory=str(root / "backups" / "one")))
                dt = time.perf_counter() - t
                rows.append(
                    (
                        "backup (BackupStore)",
                        f"{dt:.1f} s, {b.bytes / 1e6:,.0f} MB (data dir {du(root / 'data') / 1e6:,.0f} MB), "
                        f"writes waited {b.barrier_seconds:.1f} s",
                    )
                )

                if reembed:
                    t = time.perf_counter()
                    r = await stub.ImportMemories(
                        chunks(
                            root / "export-False.jsonl",
                            s.ImportMemoriesRequest(collection="reembedded"),
                            reembed,
                        )
                    )
                    dt = time.perf_counter() - t
                    assert r.reembedded == reembed, r
                    rows.append(
                        (
                            f"import re-embedding ({reembed:,} memories, no vectors in the file)",
                            f"{reembed / dt:,.1f} memories/s ({dt:.1f} s); "
                            f"{n:,} would take ≈ {n / (reembed / dt) / 60:,.0f} min",
                        )
                    )
        print(f"\n{n:,} memories")
        for what, figure in rows:
            print(f"  {what:<62} {figure}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument(
        "--reembed", type=int, default=2_000, help="memories to import re-embedding (0: skip)"
    )
    args = parser.parse_args()
    asyncio.run(main(args.memories, args.reembed))
