"""Item 2 of the hardening issue: the cost of a call does not depend on the number or kind of
the other principals. Slow (scrypt) hashing runs off the event loop, at most once per distinct
presented key; failed authentication is limited per peer (UNAUTHENTICATED with RetryInfo) and
logged at WARNING, itself rate limited.

Counted, not timed: scrypt computations are counted (and the thread each ran on recorded)
through a wrapper around ``hashlib.scrypt``. Real server, real channel on loopback."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import secrets
import threading
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1.memory_service_pb2_grpc import MemoryServiceStub
from engram_server.api.auth import AuthInterceptor
from engram_server.app import EngramServer
from engram_server.domain.auth import hash_key
from engram_server.testing import running_server
from tests.security.support import bearer, details

FAST_KEYS = {f"agent-{i}": f"fast-key-{i}" for i in range(6)}
HUMAN_KEY = "correct horse battery staple"


def _auth_file(path: Path) -> Path:
    principals: list[dict[str, Any]] = [
        {"name": name, "keys": [hash_key(key)], "grants": {name: "write"}} for name, key in FAST_KEYS.items()
    ]
    principals.append(
        {"name": "human", "keys": [hash_key(HUMAN_KEY, scheme="scrypt")], "grants": {"*": "read"}}
    )
    path.write_text(json.dumps({"principals": principals}))
    return path


@pytest.fixture
def scrypt_threads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Thread id of every scrypt computation from here on."""
    seen: list[int] = []
    real = hashlib.scrypt

    def counting(*args: Any, **kwargs: Any) -> bytes:
        seen.append(threading.get_ident())
        return real(*args, **kwargs)

    monkeypatch.setattr(hashlib, "scrypt", counting)
    return seen


def _auth(server: EngramServer) -> AuthInterceptor:
    assert server.auth is not None
    return server.auth


async def test_other_principals_calls_never_run_scrypt(tmp_path: Path, scrypt_threads: list[int]) -> None:
    auth_file = _auth_file(tmp_path / "auth.json")
    scrypt_threads.clear()  # writing the file hashed the scrypt key once
    async with (
        running_server(tmp_path / "data", auth_file=auth_file, rate_limit_rps=0.0) as server,
        grpc.aio.insecure_channel(server.address) as ch,
    ):
        stub = MemoryServiceStub(ch)
        for _ in range(3):
            for key in FAST_KEYS.values():
                # no collection named: the principal's readable ones (none exist yet: an empty answer)
                await stub.SearchMemories(s.SearchMemoriesRequest(query="x"), metadata=bearer(key))
        assert scrypt_threads == []  # 18 calls of SHA-256 principals: no scrypt at all
        # the scrypt principal: many calls at once with its key, one scrypt
        await asyncio.gather(
            *(stub.ListCollections(s.ListCollectionsRequest(), metadata=bearer(HUMAN_KEY)) for _ in range(10))
        )
        await stub.ListCollections(s.ListCollectionsRequest(), metadata=bearer(HUMAN_KEY))
        assert len(scrypt_threads) == 1
        # a wrong key presented again and again: checked once, then known to be wrong
        for _ in range(5):
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.ListCollections(s.ListCollectionsRequest(), metadata=bearer("wrong"))
            assert caught.value.code() is grpc.StatusCode.UNAUTHENTICATED
        assert len(scrypt_threads) == 2
        # and never on the event loop (this test's thread)
        assert threading.get_ident() not in scrypt_threads
        assert _auth(server).authenticator.slow_hashes == 2


async def test_repeated_bad_keys_from_one_peer_get_retry_info(
    tmp_path: Path, scrypt_threads: list[int], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="engram_server.api.auth")
    auth_file = _auth_file(tmp_path / "auth.json")
    scrypt_threads.clear()  # writing the file hashed the scrypt key once
    burst = 4
    async with (
        running_server(
            tmp_path / "data", auth_file=auth_file, auth_failure_rps=0.01, auth_failure_burst=burst
        ) as server,
        grpc.aio.insecure_channel(server.address) as ch,
    ):
        stub = MemoryServiceStub(ch)
        good = bearer(FAST_KEYS["agent-0"])
        await stub.ListCollections(s.ListCollectionsRequest(), metadata=good)  # known before the flood
        outcomes = []
        for i in range(40):
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.ListCollections(s.ListCollectionsRequest(), metadata=bearer(f"guess-{i}"))
            assert caught.value.code() is grpc.StatusCode.UNAUTHENTICATED
            info = details(caught.value)
            assert info["reason"] == "ERROR_REASON_UNAUTHENTICATED"
            outcomes.append(info["retry_after"])
        assert all(r is None for r in outcomes[:burst])  # checked
        assert all(r is not None and r > 0 for r in outcomes[burst:])  # refused unchecked
        assert len(scrypt_threads) == burst  # the refused guesses cost no hashing
        # a principal whose key is known keeps working from the same address
        await stub.ListCollections(s.ListCollectionsRequest(), metadata=good)
        # a missing key counts too
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.ListCollections(s.ListCollectionsRequest())
        assert details(caught.value)["retry_after"] is not None
        auth = _auth(server)
        assert (auth.failed, auth.refused_by_limit) == (41, 41 - burst)
    warnings = [r for r in caplog.records if "authentication failed" in r.getMessage()]
    assert 1 <= len(warnings) <= 2, [r.getMessage() for r in warnings]  # 41 failures, one line
    assert all("guess" not in r.getMessage() for r in warnings)  # keys are never logged


async def test_health_and_good_keys_answer_while_32_bad_key_senders_run(
    tmp_path: Path, scrypt_threads: list[int]
) -> None:
    """No failure limit here, so every bad key meets the scrypt hash: it must run off the loop."""
    auth_file = _auth_file(tmp_path / "auth.json")
    scrypt_threads.clear()  # writing the file hashed the scrypt key once
    async with (
        running_server(
            tmp_path / "data", auth_file=auth_file, auth_failure_rps=0.0, rate_limit_rps=0.0
        ) as server,
        grpc.aio.insecure_channel(server.address) as bad_ch,
        grpc.aio.insecure_channel(server.address) as ok_ch,
    ):
        bad = MemoryServiceStub(bad_ch)
        stop = asyncio.Event()
        flooding = asyncio.Event()
        refused = 0

        async def sender() -> None:
            nonlocal refused
            while not stop.is_set():
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await bad.ListCollections(
                        s.ListCollectionsRequest(), metadata=bearer(secrets.token_hex(16)), timeout=60
                    )
                assert caught.value.code() is grpc.StatusCode.UNAUTHENTICATED
                refused += 1
                if refused >= 64:
                    flooding.set()

        senders = [asyncio.create_task(sender()) for _ in range(32)]
        health = health_pb2_grpc.HealthStub(ok_ch)
        good = MemoryServiceStub(ok_ch)
        try:
            await asyncio.wait_for(flooding.wait(), timeout=120)
            for _ in range(20):
                reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=30)
                assert reply.status == health_pb2.HealthCheckResponse.SERVING
                await good.ListCollections(
                    s.ListCollectionsRequest(), metadata=bearer(FAST_KEYS["agent-1"]), timeout=30
                )
        finally:
            stop.set()
            await asyncio.gather(*senders)
        assert len(scrypt_threads) >= 64
        assert threading.get_ident() not in scrypt_threads  # the loop never ran scrypt
