"""Export, import and backup against a live server (real gRPC, embedded Qdrant, the local model)."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from engram_client.proto.engram.v1 import memory_pb2 as m
from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_server.app import EngramServer
from engram_server.domain.clock import ManualClock
from engram_server.porting_cli import _restore
from engram_server.testing import running_server
from tests.support.rpc import Stub, add, fails

pytestmark = pytest.mark.asyncio

FACTS = [
    ("The user drinks green tea every morning", m.MEMORY_TYPE_EVENT, ["tea"]),
    ("Always answer in British English", m.MEMORY_TYPE_DIRECTIVE, ["style"]),
    ("The user's sister Ana lives in Lisbon", m.MEMORY_TYPE_IDENTITY, ["family"]),
    ("The deploy pipeline runs every Friday at noon", m.MEMORY_TYPE_EVENT, ["work"]),
    ("Rust's borrow checker forbids two mutable references", m.MEMORY_TYPE_INSIGHT, ["rust"]),
]


async def export_bytes(stub: Stub, **kw: Any) -> bytes:
    chunks = [c async for c in stub.ExportMemories(s.ExportMemoriesRequest(**kw))]
    return b"".join(c.data for c in chunks)


async def import_bytes(
    stub: Stub, data: bytes, *, chunk: int = 777, **first: Any
) -> s.ImportMemoriesResponse:
    async def requests() -> AsyncIterator[s.ImportMemoriesRequest]:
        pieces = [data[i : i + chunk] for i in range(0, len(data), chunk)] or [b""]
        for i, piece in enumerate(pieces):
            yield s.ImportMemoriesRequest(data=piece, **(first if i == 0 else {}))

    answer: s.ImportMemoriesResponse = await stub.ImportMemories(requests())
    return answer


async def everything(stub: Stub, collection: str) -> dict[str, m.Memory]:
    """Every memory of a collection, history versions included, by id (collection name cleared)."""
    out: dict[str, m.Memory] = {}
    token = ""
    while True:
        page = await stub.ListMemories(
            s.ListMemoriesRequest(
                collection=collection, page_size=1000, include_history=True, page_token=token
            )
        )
        for memory in page.memories:
            copy = m.Memory()
            copy.CopyFrom(memory)
            copy.collection = ""
            out[copy.id] = copy
        token = page.next_page_token
        if not token:
            return out


async def seed(stub: Stub, clock: ManualClock, collection: str = "") -> None:
    for content, kind, tags in FACTS:
        await add(
            stub, content, type=kind, tags=tags, importance=7, collection=collection, metadata={"k": "v"}
        )
        clock.advance(60)
    listed = await stub.ListMemories(s.ListMemoriesRequest(collection=collection, page_size=100))
    first = next(x for x in listed.memories if x.content == FACTS[-1][0])  # the one edited
    await stub.UpdateMemory(
        s.UpdateMemoryRequest(collection=collection, id=first.id, content=first.content + " (edited)")
    )


async def test_round_trip_keeps_every_memory_and_is_idempotent(stub: Stub, clock: ManualClock) -> None:
    await seed(stub, clock)
    original = await everything(stub, "default")
    assert len(original) == len(FACTS) + 1  # one history version

    data = await export_bytes(stub, include_vectors=True)
    lines = data.decode().splitlines()
    header = json.loads(lines[0])
    assert header["engram_export"] == 1 and header["collection"] == "default"
    assert header["dimension"] == 384 and header["vectors"] is True and header["memories"] == len(FACTS)
    assert len(lines) == 1 + len(FACTS)
    assert sum(len(json.loads(x)["history"]) for x in lines[1:]) == 1
    assert len(base64.b64decode(json.loads(lines[1])["vector"])) == 384 * 4

    first = await import_bytes(stub, data, collection="copy")
    assert (first.created, first.replaced, first.unchanged, first.reembedded) == (len(original), 0, 0, 0)
    assert list(first.collections) == ["copy"]
    assert await everything(stub, "copy") == original

    again = await import_bytes(stub, data, collection="copy")
    assert (again.created, again.replaced, again.unchanged) == (0, 0, len(original))
    assert await everything(stub, "copy") == original

    # the copy is searchable with the imported vectors
    hits = await stub.SearchMemories(
        s.SearchMemoriesRequest(query="what does the user drink?", collections=["copy"])
    )
    assert hits.results[0].memory.content.startswith("The user drinks green tea")


async def test_without_vectors_the_import_re_embeds(stub: Stub, clock: ManualClock) -> None:
    await seed(stub, clock)
    original = await everything(stub, "default")
    data = await export_bytes(stub)
    assert "vector" not in json.loads(data.decode().splitlines()[1])
    result = await import_bytes(stub, data, collection="copy")
    assert result.reembedded == len(original) and result.created == len(original)
    assert await everything(stub, "copy") == original
    hits = await stub.SearchMemories(
        s.SearchMemoriesRequest(query="where does Ana live?", collections=["copy"])
    )
    assert "Lisbon" in hits.results[0].memory.content


async def test_filters_select_what_is_exported(stub: Stub, clock: ManualClock) -> None:
    await seed(stub, clock)
    await add(stub, "The office moved to Porto", collection="other")
    data = await export_bytes(
        stub, collections=["default"], filter=m.MemoryFilter(types=[m.MEMORY_TYPE_EVENT])
    )
    lines = [json.loads(x) for x in data.decode().splitlines()]
    assert [x["collection"] for x in lines if "engram_export" in x] == ["default"]
    assert sorted(x["type"] for x in lines[1:]) == ["event", "event"]
    data = await export_bytes(stub, filter=m.MemoryFilter(tags_any=["family"]))
    lines = [json.loads(x) for x in data.decode().splitlines()]
    headers = [x for x in lines if "engram_export" in x]
    assert [h["collection"] for h in headers] == ["default", "other"]
    assert [x["content"] for x in lines if "engram_export" not in x] == [
        "The user's sister Ana lives in Lisbon"
    ]


async def test_a_corrupt_line_is_named_and_what_came_before_stays(stub: Stub, clock: ManualClock) -> None:
    await seed(stub, clock)
    lines = (await export_bytes(stub, collections=["default"])).split(b"\n")
    bad = [*lines[:3], lines[3][: len(lines[3]) // 2], *lines[4:]]
    err = await fails(
        import_bytes(stub, b"\n".join(bad), collection="copy"),
        grpc.StatusCode.INVALID_ARGUMENT,
        "ERROR_REASON_INVALID_ARGUMENT",
    )
    assert err.metadata["line"] == "4", err
    assert "line 4" in err.message and "JSON" in err.message
    copied = await everything(stub, "copy")
    assert err.metadata["imported"] == str(len(copied))
    assert len([x for x in copied.values() if not x.superseded_by]) == 2

    # a file cut in its last line (no line end) names that line
    data = await export_bytes(stub, collections=["default"])
    err = await fails(
        import_bytes(stub, data[:-40], collection="cut"),
        grpc.StatusCode.INVALID_ARGUMENT,
        "ERROR_REASON_INVALID_ARGUMENT",
    )
    assert err.metadata["line"] == str(1 + len(FACTS))

    # a field of the wrong kind names the field
    line = json.loads(lines[1])
    line["importance"] = "high"
    body = b"\n".join([lines[0], json.dumps(line).encode()])
    err = await fails(
        import_bytes(stub, body, collection="bad"),
        grpc.StatusCode.INVALID_ARGUMENT,
        "ERROR_REASON_INVALID_ARGUMENT",
    )
    assert err.metadata["line"] == "2" and "importance: must be a integer" in err.message.replace(
        "an integer", "a integer"
    )

    # memory lines before any header
    err = await fails(
        import_bytes(stub, lines[1], collection="bad"),
        grpc.StatusCode.INVALID_ARGUMENT,
        "ERROR_REASON_INVALID_ARGUMENT",
    )
    assert err.metadata["line"] == "1" and "header" in err.message


def _other_model(data: bytes, dimension: int) -> bytes:
    """The export as if another model (of ``dimension`` dimensions) had made its vectors."""
    out = []
    for raw in data.decode().splitlines():
        line = json.loads(raw)
        if "engram_export" in line:
            line.update(embedding_model="other/model", dimension=dimension)
        else:
            line["vector"] = base64.b64encode(b"\x00\x00\x80\x3f" * dimension).decode()
            for h in line["history"]:
                h["vector"] = line["vector"]
        out.append(json.dumps(line))
    return "\n".join(out).encode()


async def test_another_dimension_is_refused_without_re_embedding(stub: Stub, clock: ManualClock) -> None:
    await seed(stub, clock)
    original = await everything(stub, "default")
    data = _other_model(await export_bytes(stub, include_vectors=True), 8)
    err = await fails(
        import_bytes(stub, data, collection="copy", reembed=s.REEMBED_NEVER),
        grpc.StatusCode.FAILED_PRECONDITION,
        "ERROR_REASON_EMBEDDING_MISMATCH",
    )
    assert err.metadata["line"] == "1" and err.metadata["file_dimension"] == "8"
    listed = await stub.ListCollections(s.ListCollectionsRequest())
    assert "copy" not in [c.name for c in listed.collections]  # refused before anything was created
    result = await import_bytes(stub, data, collection="copy")  # AUTO: embeds again
    assert result.reembedded == len(original)
    assert await everything(stub, "copy") == original


async def test_merge_goes_through_the_gate(stub: Stub, clock: ManualClock) -> None:
    await seed(stub, clock)
    data = await export_bytes(stub, include_vectors=True)
    await add(stub, "The user drinks green tea every morning", collection="live")
    await add(stub, "The user likes hiking in the Alps", collection="live")
    result = await import_bytes(stub, data, collection="live", mode=s.IMPORT_MODE_MERGE)
    assert result.duplicates == 1  # the tea memory: a near-copy is stored already
    assert result.created == len(FACTS) - 1 + 1  # the others, with the edited one's history
    again = await import_bytes(stub, data, collection="live", mode=s.IMPORT_MODE_MERGE)
    assert again.created == 0 and again.unchanged == result.created and again.duplicates == result.duplicates


async def test_restore_replaces_changed_memories(stub: Stub, clock: ManualClock) -> None:
    await seed(stub, clock)
    data = await export_bytes(stub, include_vectors=True)
    original = await everything(stub, "default")
    target = next(x for x in original.values() if not x.superseded_by and x.version == 1)
    await stub.UpdateMemory(s.UpdateMemoryRequest(id=target.id, importance=2))
    result = await import_bytes(stub, data)
    assert result.replaced == 1 and result.created == 0
    restored = await everything(stub, "default")
    assert restored[target.id] == original[target.id]


async def test_backup_while_writers_run_then_restore(tmp_path: Path) -> None:
    backups = tmp_path / "backups"
    backups.mkdir()
    acknowledged: list[tuple[float, str]] = []
    stop = asyncio.Event()
    enough = asyncio.Event()  # set once `target` writes were acknowledged
    target = 30
    async with running_server(tmp_path / "data", backup_dir=backups) as srv:
        channel = grpc.aio.insecure_channel(srv.address)
        stub = Stub(channel)

        async def writer(n: int) -> None:
            i = 0
            while not stop.is_set():
                i += 1
                # default contradictions: "writer 0 noted fact number 10" and "writer 2 noted fact
                # number 10" are two records (the counter-like label names the subject), so no
                # write supersedes a backed-up memory after the backup
                answer = await add(
                    stub,
                    f"writer {n} noted fact number {i} about topic {i * 7919 % 1000}",
                    collection=f"w{n % 2}",
                )
                acknowledged.append((asyncio.get_running_loop().time(), answer.memory.id))
                if len(acknowledged) >= target:
                    enough.set()

        writers = [asyncio.create_task(writer(n)) for n in range(3)]
        await enough.wait()
        asked_at = asyncio.get_running_loop().time()
        answer = await stub.BackupStore(s.BackupStoreRequest(directory=str(backups / "one")))
        target = len(acknowledged) + 30
        enough.clear()
        await enough.wait()  # writers went on after the backup
        stop.set()
        await asyncio.gather(*writers)
        before = {i for t, i in acknowledged if t < asked_at}
        original = {name: await everything(stub, name) for name in ("w0", "w1")}
        assert not [x.content for c in original.values() for x in c.values() if x.superseded_by]
        await fails(
            stub.BackupStore(s.BackupStoreRequest(directory=str(backups / "one"))),
            grpc.StatusCode.INVALID_ARGUMENT,
            "ERROR_REASON_INVALID_ARGUMENT",
        )
        await fails(
            stub.BackupStore(s.BackupStoreRequest(directory=str(tmp_path / "elsewhere"))),
            grpc.StatusCode.INVALID_ARGUMENT,
            "ERROR_REASON_INVALID_ARGUMENT",
        )
        await channel.close()
    assert answer.bytes > 0 and {c.name for c in answer.collections} == {"w0", "w1"}

    restored_dir = tmp_path / "restored"
    assert _restore(backups / "one", str(restored_dir), force=False) == 0
    assert "not empty" in str(_restore(backups / "one", str(restored_dir), force=False))
    assert _restore(backups / "one", str(restored_dir), force=True) == 0
    async with running_server(restored_dir) as srv, grpc.aio.insecure_channel(srv.address) as channel:
        stub = Stub(channel)
        restored = {name: await everything(stub, name) for name in ("w0", "w1")}
    in_backup = {i for memories in restored.values() for i in memories}
    assert before <= in_backup  # every write acknowledged before the backup was asked for
    assert sum(c.memory_count for c in answer.collections) == len(in_backup)
    for name, memories in restored.items():  # memory by memory, as the original holds it
        for memory_id, memory in memories.items():
            was = original[name][memory_id]
            assert memory == was, [
                (f.name, getattr(memory, f.name), getattr(was, f.name))
                for f in memory.DESCRIPTOR.fields
                if getattr(memory, f.name) != getattr(was, f.name)
            ]
    assert len(in_backup) < sum(len(x) for x in original.values())  # writes after it are not


async def test_backup_needs_a_backup_dir(stub: Stub) -> None:
    err = await fails(
        stub.BackupStore(s.BackupStoreRequest(directory="/tmp/x")),
        grpc.StatusCode.INVALID_ARGUMENT,
        "ERROR_REASON_INVALID_ARGUMENT",
    )
    assert "ENGRAM_BACKUP_DIR" in err.message


async def test_a_hostile_backup_directory_is_invalid_argument(tmp_path: Path) -> None:
    """Names the file system cannot take (a NUL, a component too long, a file as a parent) are
    refused as invalid, naming the field; nothing is written (found by fuzz/fuzz_requests.py)."""
    backups = tmp_path / "backups"
    backups.mkdir()
    (backups / "a-file").write_text("")
    async with (
        running_server(tmp_path / "data", backup_dir=backups) as srv,
        grpc.aio.insecure_channel(srv.address) as channel,
    ):
        stub = Stub(channel)
        for directory in (f"{backups}/x\0y", f"{backups}/{'a' * 300}", f"{backups}/a-file/sub"):
            err = await fails(
                stub.BackupStore(s.BackupStoreRequest(directory=directory)),
                grpc.StatusCode.INVALID_ARGUMENT,
                "ERROR_REASON_INVALID_ARGUMENT",
            )
            assert "directory" in err.message, (directory, err.message)
    assert sorted(p.name for p in backups.iterdir()) == ["a-file"]


async def test_a_malformed_import_message_is_invalid_argument(server: EngramServer) -> None:
    async with grpc.aio.insecure_channel(server.address) as channel:
        call = channel.stream_unary(
            "/engram.v1.MemoryService/ImportMemories",
            request_serializer=lambda raw: raw,
            response_deserializer=s.ImportMemoriesResponse.FromString,
        )
        err = await fails(
            call(iter([b"\xff\xff\xff"])), grpc.StatusCode.INVALID_ARGUMENT, "ERROR_REASON_INVALID_ARGUMENT"
        )
    assert "not an ImportMemoriesRequest" in err.message
