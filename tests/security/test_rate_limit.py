"""Per-principal rate limits on a live server: RESOURCE_EXHAUSTED with QuotaFailure and RetryInfo,
and one principal at 10× its quota does not hurt another's success rate."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1.memory_service_pb2_grpc import MemoryServiceStub
from tests.security.support import add_figure, bearer, details, threaded_server, write_auth_file


def test_one_principal_hammering_does_not_hurt_another(tmp_path: Path) -> None:
    auth_file = write_auth_file(
        tmp_path / "auth.json",
        {
            "hog": {"key": "hog-key", "grants": {"hog": "write"}, "rate_limit": {"rps": 5, "burst": 5}},
            "calm": {"key": "calm-key", "grants": {"calm": "write"}, "rate_limit": {"rps": 50, "burst": 20}},
        },
    )
    with (
        threaded_server(tmp_path / "data", auth_file=auth_file) as server,
        grpc.insecure_channel(server.address) as channel,
    ):
        stub = MemoryServiceStub(channel)
        # 50 calls at once against a quota of 5 per second (burst 5): 10× its quota.
        hog_calls = [
            # a search naming no collection: only the caller's readable ones (none exist yet: empty)
            stub.SearchMemories.future(
                s.SearchMemoriesRequest(query="x"), metadata=bearer("hog-key"), timeout=60
            )
            for _ in range(50)
        ]
        calm_calls = [
            stub.SearchMemories.future(
                s.SearchMemoriesRequest(query="x"), metadata=bearer("calm-key"), timeout=60
            )
            for _ in range(15)
        ]
        calm_ok = 0
        for call in calm_calls:
            call.result()  # raises if any of calm's calls failed
            calm_ok += 1
        limited = []
        hog_ok = 0
        for call in hog_calls:
            try:
                call.result()
                hog_ok += 1
            except grpc.RpcError as exc:
                assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # type: ignore[attr-defined]
                limited.append(details(exc))
        add_figure("rate limit: hog calls refused", len(limited))
        assert calm_ok == 15
        assert 5 <= hog_ok < 20 and len(limited) == 50 - hog_ok
        first = limited[0]
        assert first["reason"] == "ERROR_REASON_RATE_LIMITED"
        assert first["quota"] == ["principal:hog"]
        assert first["retry_after"] is not None and 0 < first["retry_after"] <= 0.2 + 1e-9
        assert first["metadata"]["principal"] == "hog"


@pytest.mark.parametrize("rps", [0.0])
async def test_unlimited_when_rps_is_zero(tmp_path: Path, rps: float) -> None:
    from engram_server.testing import running_server  # noqa: PLC0415

    async with (
        running_server(tmp_path / "data", api_key="k", rate_limit_rps=rps, rate_limit_burst=1) as server,
        grpc.aio.insecure_channel(server.address) as channel,
    ):
        stub = MemoryServiceStub(channel)
        for _ in range(20):
            await stub.ListCollections(s.ListCollectionsRequest(), metadata=bearer("k"))


async def test_default_limit_applies_to_the_single_key(tmp_path: Path) -> None:
    from engram_server.testing import running_server  # noqa: PLC0415

    async with (
        running_server(tmp_path / "data", api_key="k", rate_limit_rps=0.5, rate_limit_burst=2) as server,
        grpc.aio.insecure_channel(server.address) as channel,
    ):
        stub = MemoryServiceStub(channel)
        for _ in range(2):
            await stub.ListCollections(s.ListCollectionsRequest(), metadata=bearer("k"))
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.ListCollections(s.ListCollectionsRequest(), metadata=bearer("k"))
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        info = details(err.value)
        assert info["reason"] == "ERROR_REASON_RATE_LIMITED"
        assert 1.0 < info["retry_after"] <= 2.0


async def test_a_batch_costs_one_token_per_memory(tmp_path: Path) -> None:
    from engram_server.testing import running_server  # noqa: PLC0415

    # A refill this slow adds no token while the test runs: only the burst counts.
    async with (
        running_server(tmp_path / "data", api_key="k", rate_limit_rps=0.001, rate_limit_burst=4) as server,
        grpc.aio.insecure_channel(server.address) as channel,
    ):
        stub = MemoryServiceStub(channel)
        batch = s.AddMemoriesRequest(
            memories=[
                s.NewMemory(content=text) for text in ("Tea at five.", "Rain all week.", "Exam on Monday.")
            ]
        )
        await stub.AddMemories(batch, metadata=bearer("k"))  # 3 of the 4 tokens
        await stub.ListCollections(s.ListCollectionsRequest(), metadata=bearer("k"))  # the 4th
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.ListCollections(s.ListCollectionsRequest(), metadata=bearer("k"))
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert details(err.value)["reason"] == "ERROR_REASON_RATE_LIMITED"
