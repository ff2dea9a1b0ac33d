"""Item 4 of the hardening issue, slow readers: clients that open streams and never read their
answers pin at most ``ENGRAM_MAX_PENDING_RESPONSE_BYTES`` of answers; past it calls get
RESOURCE_EXHAUSTED with RetryInfo; the bytes come back when the readers go. Also the per-connection
stream cap and the per-principal in-flight cap.

The slow readers are raw HTTP/2 connections (tests/chaos/h2wire.py) advertising a zero flow-control
window, against the real server (own event loop thread) on loopback. Resident memory before and
after is logged, not asserted; the assertions are on the bound being applied."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1.memory_service_pb2_grpc import MemoryServiceStub
from engram_server.testing import running_server
from tests.chaos.h2wire import RawH2
from tests.security.support import bearer, details, threaded_server, write_auth_file

log = logging.getLogger(__name__)

LIST = "/engram.v1.MemoryService/ListMemories"
BUDGET = 2_000_000
STREAMS = 4
CONNECTIONS = 5


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def _until(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Wait for ``condition`` (an event, not a duration: the timeout only stops a hung test)."""
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


def test_slow_readers_pin_at_most_the_budget(tmp_path: Path) -> None:
    with threaded_server(
        tmp_path / "data", max_pending_response_bytes=BUDGET, max_streams_per_connection=STREAMS
    ) as server:
        guard = server.guard
        assert guard is not None
        with grpc.insecure_channel(server.address) as channel:
            stub = MemoryServiceStub(channel)
            stub.AddMemories(
                s.AddMemoriesRequest(
                    memories=[
                        s.NewMemory(
                            content=f"note {i} on topic {i * 7}",
                            metadata={f"k{j}": "v" * 2000 for j in range(20)},
                        )
                        for i in range(40)
                    ]
                )
            )
            page_bytes = stub.ListMemories(s.ListMemoriesRequest(page_size=1000)).ByteSize()
            assert BUDGET / 2 < page_bytes < BUDGET  # one full page fits the budget, two do not
            _until(lambda: guard.budget.pending == 0, "the answers above to be released")
            before = _rss_mib()
            taken, refused = guard.budget.taken, guard.budget.refused
            readers = [RawH2(server.address, window=0) for _ in range(CONNECTIONS)]
            try:
                for reader in readers:
                    reader.pump()
                    assert reader.server_max_streams == STREAMS  # the cap is advertised
                    for _ in range(STREAMS):
                        reader.call(LIST, s.ListMemoriesRequest(page_size=1000).SerializeToString())
                calls = CONNECTIONS * STREAMS
                _until(
                    lambda: guard.budget.taken + guard.budget.refused - taken - refused == calls,
                    "every slow reader's call to be answered or refused",
                )
                held = _rss_mib()
                assert guard.budget.pending <= BUDGET
                assert guard.budget.taken - taken == 1  # one full page waits for its reader…
                assert guard.budget.refused - refused == calls - 1  # …the rest were never produced
                # a well-behaved caller: a full page is refused, retryably, a small one is served
                with pytest.raises(grpc.RpcError) as caught:
                    stub.ListMemories(s.ListMemoriesRequest(page_size=1000))
                assert caught.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED  # type: ignore[attr-defined]
                info = details(caught.value)
                assert info["reason"] == "ERROR_REASON_RATE_LIMITED"
                assert info["metadata"]["limit"] == "pending_response_bytes"
                assert info["retry_after"] is not None
                assert len(stub.ListMemories(s.ListMemoriesRequest(page_size=2)).memories) == 2
            finally:
                for reader in readers:
                    reader.close()
            _until(lambda: guard.budget.pending == 0, "the slow readers' answers to be released")
            after = _rss_mib()
            assert len(stub.ListMemories(s.ListMemoriesRequest(page_size=1000)).memories) == 40
            log.info(
                "slow readers: %d connections × %d streams of %d-byte pages; RSS %.0f → %.0f (held) → "
                "%.0f MiB (after they left); pending answers capped at %d bytes",
                CONNECTIONS,
                STREAMS,
                page_bytes,
                before,
                held,
                after,
                BUDGET,
            )


async def test_in_flight_calls_per_principal_are_capped(tmp_path: Path) -> None:
    auth_file = write_auth_file(
        tmp_path / "auth.json",
        {
            "busy": {"key": "busy-key", "grants": {"*": "write"}},
            "calm": {"key": "calm-key", "grants": {"*": "write"}},
        },
    )
    async with (
        running_server(
            tmp_path / "data", auth_file=auth_file, rate_limit_rps=0.0, max_in_flight_per_principal=2
        ) as server,
        grpc.aio.insecure_channel(server.address) as channel,
    ):
        stub = MemoryServiceStub(channel)
        await stub.AddMemory(s.AddMemoryRequest(content="the calm one is here"), metadata=bearer("calm-key"))

        async def search(i: int) -> grpc.StatusCode:
            try:
                await stub.SearchMemories(
                    s.SearchMemoriesRequest(query=f"question number {i} about things"),
                    metadata=bearer("busy-key"),
                )
                return grpc.StatusCode.OK
            except grpc.aio.AioRpcError as exc:
                info = details(exc)
                assert info["metadata"].get("limit") == "in_flight", exc
                assert info["retry_after"] is not None
                return exc.code()

        calm = stub.SearchMemories(s.SearchMemoriesRequest(query="calm"), metadata=bearer("calm-key"))
        codes = await asyncio.gather(*(search(i) for i in range(30)))
        assert grpc.StatusCode.OK in codes
        assert grpc.StatusCode.RESOURCE_EXHAUSTED in codes
        assert set(codes) <= {grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED}
        assert len((await calm).results) == 1  # another principal is not affected
        assert server.auth is not None and server.auth.in_flight == {}  # every slot given back
