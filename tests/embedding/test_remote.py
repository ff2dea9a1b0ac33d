"""OpenAI and Voyage adapters, tested against a local HTTP server (see ``conftest.WireServer``)
that speaks their real wire protocol: the tests check the request JSON and headers each adapter
sends, how it reads the providers' answers, and how it behaves when the provider rate-limits,
fails, stalls or answers garbage. No real provider is contacted."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import numpy as np
import pytest

from engram_server.adapters.embedding._remote import RemoteEmbedder
from engram_server.adapters.embedding.openai import OpenAIEmbedder
from engram_server.adapters.embedding.voyage import VoyageEmbedder
from engram_server.domain.errors import EmbedderUnavailable, InvalidArgument
from tests.support.wire import Recorded, Reply, WireServer, embeddings_reply, fake_vector, unit

API_KEY = "sk-test-SECRET-0123456789"

Factory = Callable[..., RemoteEmbedder]


def _openai(server: WireServer, **kw: Any) -> RemoteEmbedder:
    kw.setdefault("api_key", API_KEY)
    kw.setdefault("backoff_base", 0.01)
    return OpenAIEmbedder(kw.pop("model", "text-embedding-3-small"), base_url=server.base_url, **kw)


def _voyage(server: WireServer, **kw: Any) -> RemoteEmbedder:
    kw.setdefault("api_key", API_KEY)
    kw.setdefault("backoff_base", 0.01)
    return VoyageEmbedder(kw.pop("model", "voyage-3.5-lite"), base_url=server.base_url, **kw)


@pytest.fixture(params=["openai", "voyage"])
def provider(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def make(provider: str, wire_server: WireServer) -> AsyncIterator[Factory]:
    """Builds embedders of the parametrised provider pointed at the wire server; closes them."""
    created: list[RemoteEmbedder] = []

    def build(**kw: Any) -> RemoteEmbedder:
        embedder = (_openai if provider == "openai" else _voyage)(wire_server, **kw)
        created.append(embedder)
        return embedder

    yield build
    for embedder in created:
        await embedder.close()


# -- request shape --------------------------------------------------------------------------------


async def test_openai_request_shape_order_and_dimension_learning(wire_server: WireServer) -> None:
    embedder = _openai(wire_server)
    try:
        texts = ["alpha", "beta", "gamma"]
        out = await embedder.embed_documents(texts)
        [req] = wire_server.requests
        assert req.method == "POST"
        assert req.path == "/v1/embeddings"
        assert req.headers["authorization"] == f"Bearer {API_KEY}"
        assert req.headers["content-type"] == "application/json"
        assert req.json == {"model": "text-embedding-3-small", "input": texts, "encoding_format": "float"}
        # The server listed the items in reverse; the adapter restores input order by index.
        assert out.dtype == np.float32
        assert out.shape == (3, 8)
        np.testing.assert_allclose(out, unit([fake_vector(t, 8) for t in texts]), rtol=1e-6)
        np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-6)
        assert embedder.dimension == 8
        assert embedder.model_id == "openai/text-embedding-3-small"
        # Queries send the same body (OpenAI has no query/document distinction).
        await embedder.embed_queries(["q"])
        assert wire_server.requests[1].json == {
            "model": "text-embedding-3-small",
            "input": ["q"],
            "encoding_format": "float",
        }
    finally:
        await embedder.close()


async def test_openai_sends_dimensions_only_when_configured(wire_server: WireServer) -> None:
    embedder = _openai(wire_server, model="text-embedding-3-large", dimension=4)
    try:
        assert embedder.dimension == 4  # known before any request
        out = await embedder.embed_documents(["x"])
        assert out.shape == (1, 4)
        assert wire_server.requests[0].json["dimensions"] == 4
        assert wire_server.requests[0].json["model"] == "text-embedding-3-large"
    finally:
        await embedder.close()


async def test_voyage_request_shape_input_types_and_output_dimension(wire_server: WireServer) -> None:
    embedder = _voyage(wire_server)
    sized = _voyage(wire_server, model="voyage-3.5", dimension=6)
    try:
        docs = await embedder.embed_documents(["d1", "d2"])
        queries = await embedder.embed_queries(["q1"])
        assert docs.shape == (2, 8)
        assert queries.shape == (1, 8)
        first, second = wire_server.requests
        assert first.path == "/v1/embeddings"
        assert first.headers["authorization"] == f"Bearer {API_KEY}"
        assert first.json == {
            "model": "voyage-3.5-lite",
            "input": ["d1", "d2"],
            "input_type": "document",
            "truncation": True,
        }
        assert second.json["input_type"] == "query"
        assert "output_dimension" not in second.json
        np.testing.assert_allclose(docs, unit([fake_vector("d1", 8), fake_vector("d2", 8)]), rtol=1e-6)
        assert embedder.model_id == "voyage/voyage-3.5-lite"

        out = await sized.embed_queries(["q2"])
        assert out.shape == (1, 6)
        assert wire_server.requests[2].json["output_dimension"] == 6
    finally:
        await embedder.close()
        await sized.close()


async def test_no_authorization_header_without_key(make: Factory, wire_server: WireServer) -> None:
    embedder = make(api_key=None)
    await embedder.embed_documents(["x"])
    assert "authorization" not in wire_server.requests[0].headers


async def test_dimension_unknown_until_warm_up(make: Factory, wire_server: WireServer) -> None:
    wire_server.dim = 12
    embedder = make()
    with pytest.raises(RuntimeError, match="warm_up"):
        _ = embedder.dimension
    await embedder.warm_up()
    assert embedder.dimension == 12
    assert len(wire_server.requests) == 1
    # Configured dimension: warm_up needs no probe request.
    configured = make(dimension=12)
    await configured.warm_up()
    assert len(wire_server.requests) == 1


async def test_learned_dimension_is_enforced(make: Factory, wire_server: WireServer) -> None:
    embedder = make()
    await embedder.embed_documents(["a"])
    wire_server.dim = 9
    with pytest.raises(EmbedderUnavailable, match="dimension 9"):
        await embedder.embed_documents(["b"])


async def test_configured_dimension_mismatch_is_rejected(make: Factory, wire_server: WireServer) -> None:
    wire_server.handler = lambda req: embeddings_reply(req.json["input"], 5, model="m")
    embedder = make(dimension=4)
    with pytest.raises(EmbedderUnavailable, match="configured dimension is 4"):
        await embedder.embed_documents(["a"])


async def test_large_inputs_are_chunked_in_order(make: Factory, wire_server: WireServer) -> None:
    embedder = make(max_inputs_per_request=3)
    texts = [f"t{i}" for i in range(8)]
    out = await embedder.embed_documents(texts)
    assert [len(r.json["input"]) for r in wire_server.requests] == [3, 3, 2]
    np.testing.assert_allclose(out, unit([fake_vector(t, 8) for t in texts]), rtol=1e-6)


async def test_empty_list_and_empty_text(make: Factory, wire_server: WireServer) -> None:
    embedder = make(dimension=8)
    assert (await embedder.embed_documents([])).shape == (0, 8)
    with pytest.raises(InvalidArgument):
        await embedder.embed_queries(["ok", "   "])
    assert wire_server.requests == []


# -- retries --------------------------------------------------------------------------------------


async def test_retries_429_and_500_then_succeeds(make: Factory, wire_server: WireServer) -> None:
    script = [
        Reply.of_json(429, {"error": {"message": "Rate limit reached", "code": "rate_limit_exceeded"}}),
        Reply.of_json(500, {"error": {"message": "server error"}}),
        Reply(502, b"<html>bad gateway</html>"),
    ]

    def handler(req: Recorded) -> Reply:
        return script.pop(0) if script else embeddings_reply(req.json["input"], 8, model="m")

    wire_server.handler = handler
    embedder = make(max_retries=3)
    out = await embedder.embed_documents(["a", "b"])
    assert out.shape == (2, 8)
    assert len(wire_server.requests) == 4
    assert all(r.json["input"] == ["a", "b"] for r in wire_server.requests)


async def test_retry_after_is_respected_and_capped(make: Factory, wire_server: WireServer) -> None:
    script = [
        Reply.of_json(429, {"detail": "slow down"}, {"Retry-After": "0.3"}),
        Reply.of_json(429, {"detail": "slow down"}, {"Retry-After": "3600"}),
    ]

    def handler(req: Recorded) -> Reply:
        return script.pop(0) if script else embeddings_reply(req.json["input"], 8, model="m")

    wire_server.handler = handler
    embedder = make(max_retries=2, backoff_max=0.5)
    started = time.perf_counter()
    await embedder.embed_documents(["a"])
    elapsed = time.perf_counter() - started
    # 0.3 s as asked, then 3600 s capped to 0.5 s (the upper bound leaves room for a loaded machine).
    assert 0.75 <= elapsed < 60
    assert len(wire_server.requests) == 3


async def test_persistent_failure_raises_without_leaking_the_key(
    make: Factory, wire_server: WireServer
) -> None:
    wire_server.handler = lambda req: Reply.of_json(
        503, {"error": {"message": f"overloaded (key {API_KEY})"}, "detail": f"overloaded (key {API_KEY})"}
    )
    embedder = make(max_retries=2)
    with pytest.raises(EmbedderUnavailable) as info:
        await embedder.embed_documents(["a"])
    assert len(wire_server.requests) == 3
    message = str(info.value)
    assert "after 3 attempt(s)" in message
    assert "HTTP 503" in message
    assert "overloaded" in message
    assert API_KEY not in message
    assert API_KEY not in repr(info.value.__cause__)


async def test_client_errors_are_not_retried(make: Factory, wire_server: WireServer, provider: str) -> None:
    body = (
        {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}}
        if provider == "openai"
        else {"detail": "Provided API key is invalid."}
    )
    wire_server.handler = lambda req: Reply.of_json(401, body)
    embedder = make(max_retries=3)
    with pytest.raises(EmbedderUnavailable, match=r"HTTP 401: (Incorrect|Provided) API key"):
        await embedder.embed_documents(["a"])
    assert len(wire_server.requests) == 1


async def test_timeout_is_retried_then_reported(make: Factory, wire_server: WireServer) -> None:
    async def stall(req: Recorded) -> Reply:
        await asyncio.sleep(600)
        return Reply(200, b"{}")

    wire_server.handler = stall
    embedder = make(timeout=0.2, max_retries=1)
    started = time.perf_counter()
    with pytest.raises(EmbedderUnavailable, match=r"timed out after 0\.2s"):
        await embedder.embed_queries(["a"])
    assert time.perf_counter() - started < 60  # (two timeouts of 0.2 s, not the stall's 600)
    assert len(wire_server.requests) == 2


async def test_timeout_then_success(make: Factory, wire_server: WireServer) -> None:
    calls = 0

    async def slow_once(req: Recorded) -> Reply:
        nonlocal calls
        calls += 1
        if calls == 1:
            await asyncio.sleep(5)
        return embeddings_reply(req.json["input"], 8, model="m")

    wire_server.handler = slow_once
    embedder = make(timeout=0.2, max_retries=2)
    out = await embedder.embed_documents(["a"])
    assert out.shape == (1, 8)
    assert calls == 2


async def test_connection_refused(provider: str) -> None:
    # A port that was just free: nothing listens there.
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    cls = OpenAIEmbedder if provider == "openai" else VoyageEmbedder
    embedder = cls(
        "m", api_key=API_KEY, base_url=f"http://127.0.0.1:{port}/v1", max_retries=1, backoff_base=0.01
    )
    try:
        with pytest.raises(EmbedderUnavailable, match=r"after 2 attempt\(s\): connection failed"):
            await embedder.embed_documents(["a"])
    finally:
        await embedder.close()


# -- malformed answers ----------------------------------------------------------------------------


def _item(index: Any, embedding: Any) -> dict[str, Any]:
    return {"object": "embedding", "index": index, "embedding": embedding}


MALFORMED: list[tuple[str, Reply]] = [
    ("not json", Reply(200, b"{not json")),
    ("json list", Reply.of_json(200, [1, 2])),
    ("no data", Reply.of_json(200, {"object": "list"})),
    ("too few", Reply.of_json(200, {"data": [_item(0, [1.0, 2.0])]})),
    ("duplicate index", Reply.of_json(200, {"data": [_item(0, [1.0, 2.0]), _item(0, [2.0, 1.0])]})),
    ("index out of range", Reply.of_json(200, {"data": [_item(0, [1.0, 2.0]), _item(5, [2.0, 1.0])]})),
    ("ragged", Reply.of_json(200, {"data": [_item(0, [1.0, 2.0]), _item(1, [2.0])]})),
    ("strings", Reply.of_json(200, {"data": [_item(0, ["a", "b"]), _item(1, [2.0, 1.0])]})),
    ("zero vector", Reply.of_json(200, {"data": [_item(0, [0.0, 0.0]), _item(1, [2.0, 1.0])]})),
    ("base64 string", Reply.of_json(200, {"data": [_item(0, "AAAA"), _item(1, "AAAA")]})),
]


@pytest.mark.parametrize(("case", "reply"), MALFORMED, ids=[c for c, _ in MALFORMED])
async def test_malformed_responses(make: Factory, wire_server: WireServer, case: str, reply: Reply) -> None:
    wire_server.handler = lambda req: reply
    embedder = make(max_retries=3)
    with pytest.raises(EmbedderUnavailable, match=r"not JSON|unexpected response"):
        await embedder.embed_documents(["a", "b"])
    assert len(wire_server.requests) == 1  # a malformed success is not retried
    with pytest.raises(RuntimeError):
        _ = embedder.dimension  # nothing learned from garbage


async def test_closed_embedder_refuses(make: Factory) -> None:
    embedder = make()
    await embedder.embed_documents(["a"])
    await embedder.close()
    await embedder.close()
    with pytest.raises(EmbedderUnavailable, match="closed"):
        await embedder.embed_documents(["a"])
