"""Schema evolution: a store written by the release before the trash (storage format 1, the
committed fixture made by scripts/make_storage_fixture.py) is refused with the command that
migrates it, migrated by `engram migrate` or at start-up, and then read and used as before."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import grpc
import pytest

from engram_client.proto.engram.v1 import memory_pb2 as m
from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc
from engram_server import cli
from engram_server.app import EngramServer, migrate
from engram_server.config import Settings
from engram_server.domain.errors import StorageUnavailable
from engram_server.domain.model import STORAGE_FORMAT
from engram_server.testing import running_server

FIXTURE = Path(__file__).parent.parent / "fixtures" / "store-format1.tar.gz"
CHUNK = 1 << 20


def unpack(dest: Path) -> Path:
    """The fixture's data directory under ``dest``; runs of zeros are left as holes (the engine's
    preallocated files are mostly zeros: ~460 MB apparent, a few MB on disk)."""
    with tarfile.open(FIXTURE, "r:gz") as tar:
        for member in tar:
            target = dest / member.name
            assert target.resolve().is_relative_to(dest.resolve())
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
            elif member.isfile():
                target.parent.mkdir(parents=True, exist_ok=True)
                src = tar.extractfile(member)
                assert src is not None
                with target.open("wb") as out:
                    while chunk := src.read(CHUNK):
                        if chunk.count(0) == len(chunk):
                            out.seek(len(chunk), 1)
                        else:
                            out.write(chunk)
                    out.truncate()
    return dest / "data"


def spec_formats(data: Path) -> dict[str, int]:
    return {
        p.parent.name: json.loads(p.read_text())["format"] for p in (data / "collections").glob("*/spec.json")
    }


def test_the_fixture_is_the_previous_format(tmp_path: Path) -> None:
    data = unpack(tmp_path)
    assert spec_formats(data) == {"default": 1, "notes": 1}
    assert STORAGE_FORMAT == 3


async def test_an_older_store_is_refused_without_auto_migrate_naming_the_command(tmp_path: Path) -> None:
    data = unpack(tmp_path)
    server = EngramServer.create(
        Settings(host="127.0.0.1", port=0, data_dir=data, sweep_interval_seconds=0.0, auto_migrate=False)
    )
    with pytest.raises(StorageUnavailable, match="engram migrate") as err:
        await server.start()
    assert "default (format 1)" in err.value.message and "notes (format 1)" in err.value.message
    assert spec_formats(data) == {"default": 1, "notes": 1}  # nothing written
    # the refusal released the data directory: the migration can run now
    planned = await migrate(Settings(data_dir=data), dry_run=True)
    assert [(x.collection, x.from_format, x.to_format) for x in planned] == [
        ("default", 1, 3),
        ("notes", 1, 3),
    ]
    assert spec_formats(data) == {"default": 1, "notes": 1}


def test_engram_migrate_migrates_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = unpack(tmp_path)
    monkeypatch.setenv("ENGRAM_DATA_DIR", str(data))
    cli.main(["migrate", "--dry-run"])
    assert capsys.readouterr().out.splitlines() == [
        "default: would migrate storage format 1 -> 3",
        "notes: would migrate storage format 1 -> 3",
    ]
    assert spec_formats(data) == {"default": 1, "notes": 1}
    cli.main(["migrate"])
    assert "notes: migrated storage format 1 -> 3" in capsys.readouterr().out
    assert spec_formats(data) == {"default": 3, "notes": 3}
    cli.main(["migrate"])
    assert capsys.readouterr().out.strip() == "engram: migrate: every collection is at storage format 3"


async def test_a_server_migrates_an_older_store_at_start_up_and_reads_everything(tmp_path: Path) -> None:
    data = unpack(tmp_path)
    async with running_server(data) as srv, grpc.aio.insecure_channel(srv.address) as channel:
        assert spec_formats(data) == {"default": 3, "notes": 3}
        stub = memory_service_pb2_grpc.MemoryServiceStub(channel)
        cols = await stub.ListCollections(s.ListCollectionsRequest())
        assert {(c.name, c.memory_count) for c in cols.collections} == {("default", 3), ("notes", 1)}
        listed = await stub.ListMemories(s.ListMemoriesRequest(include_history=True))
        contents = sorted(x.content for x in listed.memories)
        assert contents == [
            "Deploys happen on Tuesdays.",
            "The user's favourite colour is dark green.",
            "The user's favourite colour is green.",
            "The user's name is Ada Lovelace.",
        ]
        hits = await stub.SearchMemories(s.SearchMemoriesRequest(query="what colour does the user like?"))
        top = hits.results[0].memory
        assert top.content == "The user's favourite colour is dark green." and top.version == 2
        got = await stub.GetMemory(s.GetMemoryRequest(id=top.id, include_history=True))
        assert [h.content for h in got.history] == ["The user's favourite colour is green."]
        # the old memories use the trash like new ones
        await stub.DeleteMemory(s.DeleteMemoryRequest(id=top.id))
        trash = await stub.ListTrash(s.ListTrashRequest())
        assert [x.id for x in trash.memories] == [top.id]
        await stub.RestoreMemory(s.RestoreMemoryRequest(id=top.id))
        ident = next(x for x in listed.memories if x.type == m.MEMORY_TYPE_IDENTITY)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.DeleteMemory(s.DeleteMemoryRequest(id=ident.id))
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        # the gate still sees the old memories
        dup = await stub.AddMemory(s.AddMemoryRequest(content="Deploys happen on Tuesdays."))
        assert dup.outcome == s.ADD_OUTCOME_DUPLICATE
        notes = await stub.ListMemories(s.ListMemoriesRequest(collection="notes"))
        assert [x.content for x in notes.memories] == ["Buy oat milk on Friday."]


async def test_a_store_of_a_newer_format_is_refused(tmp_path: Path) -> None:
    data = unpack(tmp_path)
    spec_path = data / "collections" / "notes" / "spec.json"
    spec = json.loads(spec_path.read_text())
    spec_path.write_text(json.dumps({**spec, "format": STORAGE_FORMAT + 1}))
    server = EngramServer.create(
        Settings(host="127.0.0.1", port=0, data_dir=data, sweep_interval_seconds=0.0)
    )
    with pytest.raises(StorageUnavailable, match="newer Engram release") as err:
        await server.start()
    assert f"storage format {STORAGE_FORMAT + 1}" in err.value.message
