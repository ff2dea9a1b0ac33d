"""Hostile-client figures of issue 27 (auth cost, bad-key floods), for one or more checkouts side by
side in one run:

    git archive BASE | tar -x -C /tmp/engram-base             # the baseline source tree
    .venv/bin/python bench/hostile.py --source /tmp/engram-base --source . [--seconds 5]

Each ``--source`` is served by ``python -m engram_server serve`` from that tree (PYTHONPATH), on
loopback with an auth file, in its own process; the clients run here. Per source:

* ``calls/s, sha256 only``: ListCollections from a sha256-key principal, 8 concurrent callers,
  with only sha256 principals configured;
* ``calls/s, + scrypt principal``: the same with one scrypt principal added to the file (the cost
  of a call must not depend on the other principals);
* ``health p50 / max ms under 32 bad-key senders``: Health/Check latency while 32 callers send
  ListCollections with a fresh random key each (keys nobody holds), scrypt principal present;
* ``bad-key guesses/s``: one caller sending fresh random keys as fast as it can (sha256 file); of
  those, how many were checked against the keys (UNAUTHENTICATED without RetryInfo) and how many
  refused by the per-peer failure limit (with RetryInfo).

* ``slow readers: server RSS MiB before / held / after``: 10 raw HTTP/2 connections × 20 streams
  that never read (zero flow-control window), each asking ListMemories for a ~3.7 MB page (28
  memories with 64 metadata values of 2 KB), then closed; the server's resident memory before,
  while they hold, and 5 s after they left.

Figures, not assertions: this machine is shared, so compare the sources within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engram_client.proto.engram.v1 import memory_service_pb2 as s  # noqa: E402
from engram_client.proto.engram.v1.memory_service_pb2_grpc import MemoryServiceStub  # noqa: E402
from engram_server.domain.auth import hash_key  # noqa: E402

GOOD = "bench-good-key"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _auth_file(path: Path, scrypt: bool) -> Path:
    principals = [
        {"name": f"p{i}", "keys": [hash_key(f"other-{i}")], "grants": {"*": "read"}} for i in range(8)
    ]
    principals.append({"name": "good", "keys": [hash_key(GOOD)], "grants": {"*": "admin"}})
    if scrypt:
        principals.append(
            {"name": "human", "keys": [hash_key("correct horse", scheme="scrypt")], "grants": {"*": "read"}}
        )
    path.write_text(json.dumps({"principals": principals}))
    return path


class Server:
    def __init__(self, source: Path, auth: Path, data: Path) -> None:
        self.port = _free_port()
        env = {
            **os.environ,
            "PYTHONPATH": str(source),
            "ENGRAM_HOST": "127.0.0.1",
            "ENGRAM_PORT": str(self.port),
            "ENGRAM_DATA_DIR": str(data),
            "ENGRAM_AUTH_FILE": str(auth),
            "ENGRAM_RATE_LIMIT_RPS": "0",
            "ENGRAM_LOG_LEVEL": "ERROR",
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "engram_server", "serve"], env=env, cwd=source, stderr=subprocess.DEVNULL
        )
        self.address = f"127.0.0.1:{self.port}"

    async def ready(self) -> None:
        async with grpc.aio.insecure_channel(self.address) as ch:
            health = health_pb2_grpc.HealthStub(ch)
            for _ in range(600):
                try:
                    await health.Check(health_pb2.HealthCheckRequest(), timeout=1)
                    return
                except grpc.aio.AioRpcError:
                    await asyncio.sleep(0.2)
        raise RuntimeError("server did not start")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


async def _throughput(address: str, seconds: float, callers: int = 8) -> float:
    done = 0
    async with grpc.aio.insecure_channel(address) as ch:
        stub = MemoryServiceStub(ch)
        md = (("authorization", f"Bearer {GOOD}"),)
        await stub.ListCollections(s.ListCollectionsRequest(), metadata=md)
        end = time.perf_counter() + seconds

        async def loop() -> None:
            nonlocal done
            while time.perf_counter() < end:
                await stub.ListCollections(s.ListCollectionsRequest(), metadata=md)
                done += 1

        start = time.perf_counter()
        await asyncio.gather(*(loop() for _ in range(callers)))
        return done / (time.perf_counter() - start)


async def _bad_sender(stub: MemoryServiceStub, end: float, tally: dict[str, int]) -> None:
    while time.perf_counter() < end:
        md = (("authorization", f"Bearer guess-{secrets.token_hex(16)}"),)
        try:
            await stub.ListCollections(s.ListCollectionsRequest(), metadata=md, timeout=30)
        except grpc.aio.AioRpcError as exc:
            limited = any(
                k == "grpc-status-details-bin" and b"RetryInfo" in v for k, v in exc.trailing_metadata() or ()
            )
            tally["limited" if limited else "checked"] += 1


async def _health_under_flood(address: str, seconds: float, senders: int = 32) -> tuple[float, float]:
    async with grpc.aio.insecure_channel(address) as bad_ch, grpc.aio.insecure_channel(address) as ok_ch:
        stub = MemoryServiceStub(bad_ch)
        health = health_pb2_grpc.HealthStub(ok_ch)
        await health.Check(health_pb2.HealthCheckRequest())
        end = time.perf_counter() + seconds
        tally = {"checked": 0, "limited": 0}
        flood = asyncio.gather(*(_bad_sender(stub, end, tally) for _ in range(senders)))
        await asyncio.sleep(0.5)
        latencies = []
        while time.perf_counter() < end:
            start = time.perf_counter()
            await health.Check(health_pb2.HealthCheckRequest(), timeout=60)
            latencies.append((time.perf_counter() - start) * 1000)
            await asyncio.sleep(0.05)
        await flood
        return statistics.median(latencies), max(latencies)


async def _guesses(address: str, seconds: float) -> tuple[float, int, int]:
    async with grpc.aio.insecure_channel(address) as ch:
        stub = MemoryServiceStub(ch)
        tally = {"checked": 0, "limited": 0}
        start = time.perf_counter()
        await _bad_sender(stub, start + seconds, tally)
        elapsed = time.perf_counter() - start
        return (tally["checked"] + tally["limited"]) / elapsed, tally["checked"], tally["limited"]


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def _slow_readers(server: Server, connections: int = 10, streams: int = 20) -> str:
    from tests.chaos.h2wire import RawH2  # noqa: PLC0415

    md = (("authorization", f"Bearer {GOOD}"),)
    async with grpc.aio.insecure_channel(server.address) as ch:
        stub = MemoryServiceStub(ch)
        memories = [
            s.NewMemory(
                content=f"note {i} on topic {i * 7}", metadata={f"k{j}": "v" * 2000 for j in range(64)}
            )
            for i in range(28)
        ]
        await stub.AddMemories(s.AddMemoriesRequest(memories=memories), metadata=md)
        await stub.ListMemories(s.ListMemoriesRequest(page_size=1000), metadata=md)
    await asyncio.sleep(1)
    before = _rss_mib(server.proc.pid)
    readers = [RawH2(server.address, window=0) for _ in range(connections)]
    body = s.ListMemoriesRequest(page_size=1000).SerializeToString()
    for reader in readers:
        for _ in range(streams):
            reader.call("/engram.v1.MemoryService/ListMemories", body, md)
    await asyncio.sleep(10)
    for reader in readers:
        reader.pump()
    held = _rss_mib(server.proc.pid)
    for reader in readers:
        reader.close()
    await asyncio.sleep(5)
    after = _rss_mib(server.proc.pid)
    return f"{before:.0f} / {held:.0f} / {after:.0f}"


async def measure(source: Path, seconds: float) -> dict[str, str]:
    out: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        for scrypt in (False, True):
            server = Server(source, _auth_file(t / f"auth{scrypt}.json", scrypt), t / f"data{scrypt}")
            try:
                await server.ready()
                label = "+ scrypt principal" if scrypt else "sha256 only"
                out[f"calls/s, {label}"] = f"{await _throughput(server.address, seconds):.0f}"
                if scrypt:
                    p50, worst = await _health_under_flood(server.address, seconds)
                    out["health p50 / max ms, 32 bad-key senders"] = f"{p50:.1f} / {worst:.0f}"
                    out["slow readers: server RSS MiB before / held / after"] = await _slow_readers(server)
                else:
                    rate, checked, limited = await _guesses(server.address, seconds)
                    out["bad-key guesses answered/s"] = f"{rate:.0f}"
                    out["  of which checked / refused by the limit"] = f"{checked} / {limited}"
            finally:
                server.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--source", action="append", type=Path, required=True)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    results = {str(src): asyncio.run(measure(src.resolve(), args.seconds)) for src in args.source}
    rows = list(next(iter(results.values())))
    width = max(len(r) for r in rows)
    print(f"{'':{width}}  " + "  ".join(f"{src:>24}" for src in results))
    for row in rows:
        print(f"{row:{width}}  " + "  ".join(f"{results[src].get(row, '-'):>24}" for src in results))


if __name__ == "__main__":
    main()
