"""Crash safety as a user would meet it: `kill -9` the server while concurrent adds are in flight,
restart it on the same data directory, and find every acknowledged write intact. Repeated several
times on one data directory. Also: a torn data directory is a clear start-up error."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc

from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc

ROOT = Path(__file__).resolve().parents[2]
WORDS = [
    "falcon", "harbour", "violin", "glacier", "pepper", "lantern", "orchard", "compass",
    "saffron", "tundra", "quartz", "meadow", "ember", "lagoon", "walnut", "canyon",
    "velvet", "beacon", "thistle", "marble", "prairie", "cobalt", "juniper", "summit",
]  # fmt: skip
CYCLES = 3
WRITERS = 8


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def server(data_dir: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    port = _free_port()
    env = {**os.environ, "ENGRAM_DATA_DIR": str(data_dir), "ENGRAM_PORT": str(port)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "engram_server", "serve"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    address = f"127.0.0.1:{port}"
    try:
        with grpc.insecure_channel(address) as ch:
            grpc.channel_ready_future(ch).result(timeout=90)
        yield proc, address
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def sentence(rng: random.Random, n: int) -> str:
    a, b, c, d, e, f = rng.sample(WORDS, 6)
    return f"Entry {n}: the {a} near the {b} smelled of {c}, {d} and {e} ({f} {rng.randint(0, 10**6)})."


def test_kill_9_loses_no_acknowledged_write(tmp_path: Path) -> None:
    acked: dict[str, str] = {}  # id -> content, for every CREATED answer received
    lock = threading.Lock()
    attempted = 0
    for cycle in range(CYCLES):
        with server(tmp_path) as (proc, address):
            stop = threading.Event()

            def writer(seed: int, address: str = address, stop: threading.Event = stop) -> None:
                nonlocal attempted
                rng = random.Random(seed)
                with grpc.insecure_channel(address) as ch:
                    stub = memory_service_pb2_grpc.MemoryServiceStub(ch)
                    n = 0
                    while not stop.is_set():
                        text = sentence(rng, seed * 100_000 + n)
                        n += 1
                        with lock:
                            attempted += 1
                        try:
                            r = stub.AddMemory(s.AddMemoryRequest(content=text, importance=5), timeout=30)
                        except grpc.RpcError:
                            return  # the server died under us: this write was never acknowledged
                        if r.outcome == s.ADD_OUTCOME_CREATED:
                            with lock:
                                acked[r.memory.id] = text

            threads = [threading.Thread(target=writer, args=(cycle * 1000 + i,)) for i in range(WRITERS)]
            for t in threads:
                t.start()
            target = len(acked) + 25
            deadline = time.monotonic() + 120
            while len(acked) < target and time.monotonic() < deadline:
                time.sleep(0.05)
            proc.send_signal(signal.SIGKILL)  # mid-flight: writers are still sending
            proc.wait(timeout=30)
            stop.set()
            for t in threads:
                t.join(timeout=60)
        assert len(acked) >= target, f"cycle {cycle}: only {len(acked)} writes acknowledged"

        # restart on the same directory: every acknowledged write is there, intact
        with server(tmp_path) as (_, address), grpc.insecure_channel(address) as ch:
            stub = memory_service_pb2_grpc.MemoryServiceStub(ch)
            missing = []
            for memory_id, text in acked.items():
                try:
                    got = stub.GetMemory(s.GetMemoryRequest(id=memory_id), timeout=30)
                except grpc.RpcError as exc:
                    missing.append((memory_id, exc.code()))
                    continue
                assert got.memory.content == text
            assert not missing, f"cycle {cycle}: {len(missing)} of {len(acked)} acknowledged writes lost"
            listed = stub.ListMemories(s.ListMemoriesRequest(page_size=1000), timeout=30)
            assert len(listed.memories) >= len(acked)
    print(f"\ncrash test: {CYCLES} kill -9 cycles, {attempted} adds sent, {len(acked)} acknowledged, 0 lost")


def test_torn_data_directory_is_a_clear_startup_error(tmp_path: Path) -> None:
    with server(tmp_path) as (proc, address), grpc.insecure_channel(address) as ch:
        memory_service_pb2_grpc.MemoryServiceStub(ch).AddMemory(
            s.AddMemoryRequest(content="x y z"), timeout=30
        )
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    (tmp_path / "collections" / "default" / "spec.json").write_text('{"name": "default", "embedd')
    env = {**os.environ, "ENGRAM_DATA_DIR": str(tmp_path), "ENGRAM_PORT": str(_free_port())}
    out = subprocess.run(
        [sys.executable, "-m", "engram_server", "serve"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode != 0
    assert "spec.json" in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_kill_9_keeps_written_access_counters(tmp_path: Path) -> None:
    """Search hits are counted in a log beside the engine (embedded storage): once written (at most
    a second after the searches), they survive a kill -9 like the memories themselves."""
    with server(tmp_path) as (proc, address), grpc.insecure_channel(address) as ch:
        stub = memory_service_pb2_grpc.MemoryServiceStub(ch)
        texts = ["The spare key is under the blue flower pot.", "Maya's birthday is on 14 March."]
        ids = [stub.AddMemory(s.AddMemoryRequest(content=t), timeout=30).memory.id for t in texts]
        for query in ("where is the spare key", "when is Maya's birthday", "spare key"):
            stub.SearchMemories(s.SearchMemoriesRequest(query=query, limit=10), timeout=30)

        def counts() -> dict[str, int]:
            return {i: stub.GetMemory(s.GetMemoryRequest(id=i), timeout=30).memory.access_count for i in ids}

        deadline = time.monotonic() + 30
        while sum(counts().values()) < 3 * len(ids) and time.monotonic() < deadline:
            time.sleep(0.2)
        before = counts()
        assert before == dict.fromkeys(ids, 3)  # every search returned both memories
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    with server(tmp_path) as (_, address), grpc.insecure_channel(address) as ch:
        stub = memory_service_pb2_grpc.MemoryServiceStub(ch)
        assert counts() == before
