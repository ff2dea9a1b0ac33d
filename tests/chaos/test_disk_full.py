"""A full data volume (issue 27, item 1), end to end: a real server process on a real small
filesystem (a tmpfs mounted for the test), and an in-process server with the free-space reading
injected.

Before the guard, the embedded engine's memory-mapped files raised SIGBUS when the volume filled:
the process died with exit code 135, nothing logged, and a restart on the still-full volume died
the same way. Now writes are refused with RESOURCE_EXHAUSTED / ERROR_REASON_STORAGE_FULL before
they touch the disk, reads keep working, the process stays up, a restart on the full volume
serves reads, and every acknowledged write is there afterwards.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import string
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc
from engram_server.adapters.storage.diskguard import MIB, DiskGuard
from engram_server.adapters.storage.edge import EdgeStore
from engram_server.testing import rich, running_server

ROOT = Path(__file__).resolve().parents[2]
#: Two server processes and a few hundred writes on a loaded machine: a wider bound.
pytestmark = pytest.mark.timeout(900)
STORAGE_FULL = "ERROR_REASON_STORAGE_FULL"
WORDS = [
    "falcon", "harbour", "violin", "glacier", "pepper", "lantern", "orchard", "compass",
    "saffron", "tundra", "quartz", "meadow", "ember", "lagoon", "walnut", "canyon",
    "velvet", "beacon", "thistle", "marble", "prairie", "cobalt", "juniper", "summit",
]  # fmt: skip

#: The test volume, the headroom the server keeps on it, and how close to the headroom the
#: "other tenant" fills it before the server's own writes cross it.
VOLUME_MB = 400
HEADROOM_MB = 128
WRITERS_FILL_MB = 24
WRITERS = 3


def reason_of(exc: grpc.RpcError) -> str:
    for key, value in exc.trailing_metadata() or ():  # type: ignore[attr-defined]
        if key == "grpc-status-details-bin":
            for detail in status_pb2.Status.FromString(value).details:
                if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                    info = error_details_pb2.ErrorInfo()
                    detail.Unpack(info)
                    return str(info.reason)
    return ""


def sentence(rng: random.Random, n: int) -> str:
    a, b, c, d, e = rng.sample(WORDS, 5)
    return f"Entry {n}: the {a} near the {b} smelled of {c}, {d} and {e} ({rng.randint(0, 10**9)})."


def bulky_metadata(rng: random.Random) -> dict[str, str]:
    """64 kB of metadata (32 values of 2,048 characters): the server's own writes fill the volume."""
    return {f"field{i}": "".join(rng.choices(string.ascii_letters, k=2048)) for i in range(32)}


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fill_to(volume: Path, filler: Path, leave: int) -> None:
    """Another tenant of the volume: grow ``filler`` until at most ``leave`` bytes are free (all
    of it: ``leave=0`` writes until ENOSPC)."""
    chunk = b"\0" * MIB
    with filler.open("ab") as f:
        while free_bytes(volume) > leave:
            try:
                f.write(chunk[: max(4096, min(MIB, free_bytes(volume) - leave))])
                f.flush()
            except OSError:
                break  # ENOSPC: full
        os.fsync(f.fileno())


@contextmanager
def tmpfs(path: Path, size_mb: int) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    if not shutil.which("mount") or (hasattr(os, "geteuid") and os.geteuid() != 0):
        pytest.skip("mounting a tmpfs needs root and mount(8): the real full-volume test cannot run here")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(
            f"cannot mount a tmpfs here ({done.stderr.strip() or done.returncode}): the real "
            "full-volume test needs mount permission (root, or a container with CAP_SYS_ADMIN)"
        )
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def server(data_dir: Path, log: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    port = _free_port()
    env = {
        **os.environ,
        "ENGRAM_DATA_DIR": str(data_dir),
        "ENGRAM_PORT": str(port),
        "ENGRAM_DISK_HEADROOM_MB": str(HEADROOM_MB),
    }
    with log.open("ab") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "engram_server", "serve"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    address = f"127.0.0.1:{port}"
    try:
        with grpc.insecure_channel(address) as ch:
            grpc.channel_ready_future(ch).result(timeout=120)
        yield proc, address
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def all_ids(stub: memory_service_pb2_grpc.MemoryServiceStub) -> set[str]:
    out: set[str] = set()
    token = ""
    while True:
        page = stub.ListMemories(s.ListMemoriesRequest(page_size=1000, page_token=token), timeout=60)
        out.update(m.id for m in page.memories)
        token = page.next_page_token
        if not token:
            return out


def refused_add(stub: memory_service_pb2_grpc.MemoryServiceStub, text: str) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        stub.AddMemory(s.AddMemoryRequest(content=text), timeout=60)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # type: ignore[attr-defined]
    assert reason_of(caught.value) == STORAGE_FULL


def test_real_volume_fills_while_writers_run(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    with tmpfs(tmp_path / "vol", VOLUME_MB) as vol:
        data = vol / "data"
        filler = vol / "other-tenant"
        acked: dict[str, str] = {}
        refusals: dict[int, int] = {}
        others: list[str] = []
        lock = threading.Lock()

        with server(data, log) as (proc, address):
            stop = threading.Event()

            def writer(seed: int) -> None:
                rng = random.Random(seed)
                with grpc.insecure_channel(address) as ch:
                    stub = memory_service_pb2_grpc.MemoryServiceStub(ch)
                    n = 0
                    while not stop.is_set():
                        text = sentence(rng, seed * 1_000_000 + n)
                        n += 1
                        try:
                            r = stub.AddMemory(
                                s.AddMemoryRequest(content=text, metadata=bulky_metadata(rng)), timeout=60
                            )
                        except grpc.RpcError as exc:
                            with lock:
                                if reason_of(exc) == STORAGE_FULL:
                                    refusals[seed] = refusals.get(seed, 0) + 1
                                else:
                                    others.append(f"{exc.code()}: {exc.details()}")  # type: ignore[attr-defined]
                            stop.wait(0.05)
                            continue
                        with lock:
                            acked[r.memory.id] = text

            threads = [threading.Thread(target=writer, args=(i,)) for i in range(WRITERS)]
            for t in threads:
                t.start()
            try:
                # Another tenant takes the volume down to a little above the headroom; the
                # server's own writes then cross it.
                while not acked and proc.poll() is None:  # the collection exists
                    time.sleep(0.05)
                fill_to(vol, filler, (HEADROOM_MB + WRITERS_FILL_MB) * MIB)
                deadline = time.monotonic() + 300  # a bound on waiting, not an assertion on speed
                while len(refusals) < WRITERS and proc.poll() is None and time.monotonic() < deadline:
                    time.sleep(0.1)
            finally:
                stop.set()
                for t in threads:
                    t.join(timeout=120)
            assert proc.poll() is None, f"the server died (exit {proc.returncode}): {log.read_text()[-2000:]}"
            assert len(refusals) == WRITERS, f"writers refused: {refusals}; others: {others[:3]}"
            assert not others, others[:5]
            assert free_bytes(vol) < HEADROOM_MB * MIB
            assert len(acked) > 0

            with grpc.insecure_channel(address) as ch:
                stub = memory_service_pb2_grpc.MemoryServiceStub(ch)
                health = health_pb2_grpc.HealthStub(ch)
                assert health.Check(health_pb2.HealthCheckRequest(), timeout=30).status == (
                    health_pb2.HealthCheckResponse.SERVING
                )
                assert all_ids(stub) == set(acked)
                some_id, some_text = next(iter(acked.items()))
                assert stub.GetMemory(s.GetMemoryRequest(id=some_id), timeout=30).memory.content == some_text
                found = stub.SearchMemories(s.SearchMemoriesRequest(query=some_text, limit=5), timeout=60)
                assert found.results[0].memory.id == some_id
                refused_add(stub, "A write while the volume is below the headroom.")

                # The other tenant takes every last byte: reads still work, the server stays up.
                fill_to(vol, filler, 0)
                assert free_bytes(vol) == 0
                assert all_ids(stub) == set(acked)
                refused_add(stub, "A write on a volume with no byte free.")
            assert proc.poll() is None

            proc.send_signal(signal.SIGKILL)  # a crash while the volume is full
            proc.wait(timeout=30)

        # Start-up on the full volume serves reads; nothing acknowledged is lost.
        with server(data, log) as (proc, address), grpc.insecure_channel(address) as ch:
            stub = memory_service_pb2_grpc.MemoryServiceStub(ch)
            assert all_ids(stub) == set(acked)
            for memory_id, text in list(acked.items())[:20]:
                assert stub.GetMemory(s.GetMemoryRequest(id=memory_id), timeout=30).memory.content == text
            refused_add(stub, "A write after a restart on a full volume.")

            # Space freed: writes are accepted again.
            filler.unlink()
            r = stub.AddMemory(s.AddMemoryRequest(content="Space was freed; this write lands."), timeout=60)
            assert r.outcome == s.ADD_OUTCOME_CREATED
            assert proc.poll() is None

    text = log.read_text()
    assert "Fatal Python error" not in text and "Bus error" not in text
    assert "STORAGE_FULL" in text  # the crossing was logged
    assert "released the" in text  # the restart on the full volume used the reserve


class Volume:
    def __init__(self, free: int) -> None:
        self.free = free

    def __call__(self, path: Path) -> int:
        return self.free


async def test_storage_full_through_grpc_with_an_injected_reading(tmp_path: Path) -> None:
    volume = Volume(1 << 40)
    data = tmp_path / "data"
    store = EdgeStore(data, disk_guard=DiskGuard(data, HEADROOM_MB * MIB, free_bytes=volume))
    async with running_server(data, store=store) as srv, grpc.aio.insecure_channel(srv.address) as ch:
        stub = memory_service_pb2_grpc.MemoryServiceStub(ch)
        kept = await stub.AddMemory(s.AddMemoryRequest(content="My sister lives in Lisbon.", tags=["family"]))
        await stub.AddMemory(s.AddMemoryRequest(collection="work", content="The release is on Friday."))

        volume.free = HEADROOM_MB * MIB - 1
        refused = [
            stub.AddMemory(s.AddMemoryRequest(content="I started learning the cello.")),
            stub.AddMemories(s.AddMemoriesRequest(memories=[s.NewMemory(content="Berlin is rainy today.")])),
            stub.AddMemory(s.AddMemoryRequest(collection="brand-new", content="A new collection.")),
            stub.UpdateMemory(s.UpdateMemoryRequest(id=kept.memory.id, content="My sister lives in Porto.")),
            stub.DeleteMemory(s.DeleteMemoryRequest(id=kept.memory.id)),
        ]
        for call in refused:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await call
            err = rich(caught.value)
            assert err.code == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert err.reason == STORAGE_FULL
            assert err.metadata["headroom_bytes"] == str(HEADROOM_MB * MIB)
            assert "ENGRAM_DISK_HEADROOM_MB" in err.message

        # Reads keep working, and nothing refused was written.
        got = await stub.GetMemory(s.GetMemoryRequest(id=kept.memory.id))
        assert got.memory.content == "My sister lives in Lisbon." and got.memory.version == 1
        page = await stub.ListMemories(s.ListMemoriesRequest())
        assert [m.content for m in page.memories] == ["My sister lives in Lisbon."]
        found = await stub.SearchMemories(s.SearchMemoriesRequest(query="where does my sister live", limit=3))
        assert found.results[0].memory.id == kept.memory.id
        names = [c.name for c in (await stub.ListCollections(s.ListCollectionsRequest())).collections]
        assert "brand-new" not in names
        await srv.service.drain()  # the search's access counters: skipped, not an error
        # Dropping a collection frees its space: allowed below the headroom.
        dropped = await stub.DeleteCollection(s.DeleteCollectionRequest(name="work"))
        assert dropped.deleted_count == 1

        # Space freed: the same writes succeed.
        volume.free = 1 << 40
        added = await stub.AddMemory(s.AddMemoryRequest(content="I started learning the cello."))
        assert added.outcome == s.ADD_OUTCOME_CREATED
        updated = await stub.UpdateMemory(
            s.UpdateMemoryRequest(id=kept.memory.id, content="My sister lives in Porto.")
        )
        assert updated.memory.content == "My sister lives in Porto."
