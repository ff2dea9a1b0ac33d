"""Shared machinery of the HTTP embedding providers (OpenAI-compatible, Voyage): one
``httpx.AsyncClient``, request chunking, retries with exponential backoff that honour
``Retry-After``, strict response parsing, order restoration by ``index``, normalisation and
dimension learning. Subclasses only say how a request body looks and what the provider's error
body says."""

from __future__ import annotations

import asyncio
import email.utils
import json
import math
import random
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

import httpx
import numpy as np

from engram_server.adapters.embedding._vectors import l2_normalise, zero_rows
from engram_server.domain.errors import EmbedderUnavailable, InvalidArgument
from engram_server.domain.model import Vector

__all__ = ["InputKind", "RemoteEmbedder"]

InputKind = Literal["document", "query"]

#: Statuses worth another attempt: request timeout, conflict (OpenAI uses it for lock
#: contention), rate limited, and every server-side failure.
_RETRYABLE_STATUS: Final = frozenset({408, 409, 429})
_USER_AGENT: Final = "engram/0.1 (+embedding adapter)"
_PROBE_TEXT: Final = "dimension probe"


class RemoteEmbedder(ABC):
    """Base of the HTTP embedders. Not used directly; see ``OpenAIEmbedder`` / ``VoyageEmbedder``."""

    #: Shown in errors and model ids, e.g. ``openai``.
    provider: str = ""
    #: The provider's endpoint when ``base_url`` is not given.
    default_base_url: str = ""

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None,
        base_url: str | None = None,
        dimension: int | None = None,
        timeout: float = 30.0,
        max_retries: int = 3,
        max_inputs_per_request: int = 128,
        backoff_base: float = 0.5,
        backoff_max: float = 20.0,
    ) -> None:
        base_url = base_url or self.default_base_url
        if not model:
            raise ValueError(f"{self.provider}: model must not be empty")
        if dimension is not None and dimension < 1:
            raise ValueError(f"{self.provider}: dimension must be >= 1, got {dimension}")
        if timeout <= 0:
            raise ValueError(f"{self.provider}: timeout must be > 0, got {timeout}")
        if max_retries < 0:
            raise ValueError(f"{self.provider}: max_retries must be >= 0, got {max_retries}")
        if max_inputs_per_request < 1:
            raise ValueError(f"{self.provider}: max_inputs_per_request must be >= 1")
        self._model = model
        self._api_key = api_key or None
        self._url = base_url.rstrip("/") + "/embeddings"
        self._configured_dimension = dimension
        self._dimension = dimension
        self._timeout = timeout
        self._max_retries = max_retries
        self._max_inputs = max_inputs_per_request
        self._backoff_base = backoff_base
        self._backoff_max = backoff_max
        self._client: httpx.AsyncClient | None = None
        self._closed = False

    # -- the Embedder protocol ----------------------------------------------------------------

    @property
    def model_id(self) -> str:
        return f"{self.provider}/{self._model}"

    @property
    def dimension(self) -> int:
        if self._dimension is None:
            raise RuntimeError(
                f"{self.model_id}: dimension not configured and not learned yet; await warm_up() first"
            )
        return self._dimension

    async def warm_up(self) -> None:
        """Open the connection pool; when the dimension is not configured, learn it by
        embedding a probe text (raises :class:`EmbedderUnavailable` if the provider fails)."""
        self._http()
        if self._dimension is None:
            await self.embed_queries([_PROBE_TEXT])

    async def embed_documents(self, texts: Sequence[str]) -> Vector:
        return await self._embed(texts, "document")

    async def embed_queries(self, texts: Sequence[str]) -> Vector:
        return await self._embed(texts, "query")

    async def close(self) -> None:
        self._closed = True
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    # -- what subclasses provide --------------------------------------------------------------

    @abstractmethod
    def _body(self, texts: list[str], kind: InputKind) -> dict[str, Any]:
        """The JSON request body for one chunk."""

    @abstractmethod
    def _error_message(self, body: Any) -> str | None:
        """The human-readable message in a provider's error body, if any."""

    # -- internals ----------------------------------------------------------------------------

    def _http(self) -> httpx.AsyncClient:
        if self._closed:
            raise EmbedderUnavailable(f"{self.model_id}: embedder is closed")
        if self._client is None:
            headers = {"Content-Type": "application/json", "User-Agent": _USER_AGENT}
            if self._api_key:
                headers["Authorization"] = f"Bearer {self._api_key}"
            self._client = httpx.AsyncClient(
                headers=headers, timeout=httpx.Timeout(self._timeout), follow_redirects=False
            )
        return self._client

    async def _embed(self, texts: Sequence[str], kind: InputKind) -> Vector:
        items = list(texts)
        for i, text in enumerate(items):
            if not text.strip():
                raise InvalidArgument.of(f"texts[{i}]", f"{self.provider} cannot embed an empty text")
        if not items:
            return np.empty((0, self._dimension or 0), dtype=np.float32)
        parts = [
            await self._embed_chunk(items[start : start + self._max_inputs], kind)
            for start in range(0, len(items), self._max_inputs)
        ]
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)

    async def _embed_chunk(self, texts: list[str], kind: InputKind) -> Vector:
        payload = self._body(texts, kind)
        body = await self._post(payload)
        matrix = self._parse(body, len(texts))
        return l2_normalise(matrix)

    async def _post(self, payload: Mapping[str, Any]) -> Any:
        client = self._http()
        attempts = self._max_retries + 1
        last_problem = "no attempt made"
        for attempt in range(attempts):
            retry_after: float | None = None
            try:
                response = await client.post(self._url, json=payload)
            except httpx.TimeoutException as exc:
                last_problem = f"timed out after {self._timeout:g}s ({type(exc).__name__})"
            except httpx.TransportError as exc:
                last_problem = f"connection failed ({type(exc).__name__}: {self._redact(str(exc))})"
            else:
                status = response.status_code
                if status == 200:
                    try:
                        return response.json()
                    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                        raise EmbedderUnavailable(
                            f"{self.model_id}: the provider returned a body that is not JSON "
                            f"(HTTP 200, {len(response.content)} bytes)"
                        ) from exc
                last_problem = f"HTTP {status}{self._describe_error(response)}"
                if status not in _RETRYABLE_STATUS and status < 500:
                    # Bad key, unknown model, invalid request: repeating it cannot help.
                    raise EmbedderUnavailable(f"{self.model_id}: request rejected: {last_problem}")
                retry_after = _retry_after_seconds(response.headers)
            if attempt + 1 < attempts:
                await asyncio.sleep(self._backoff(attempt, retry_after))
        raise EmbedderUnavailable(
            f"{self.model_id}: provider unavailable after {attempts} attempt(s): {last_problem}"
        )

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(max(retry_after, 0.0), self._backoff_max)
        exp = self._backoff_base * (2**attempt)
        # "Equal jitter": half fixed, half random, so retries from many callers spread out.
        return float(min(exp / 2 + random.uniform(0, exp / 2), self._backoff_max))

    def _describe_error(self, response: httpx.Response) -> str:
        message: str | None
        try:
            message = self._error_message(response.json())
        except (json.JSONDecodeError, UnicodeDecodeError):
            message = response.text[:200].strip() or None
        return f": {self._redact(message)}" if message else ""

    def _redact(self, text: str) -> str:
        if self._api_key:
            text = text.replace(self._api_key, "***")
        return text[:500]

    def _parse(self, body: Any, expected: int) -> Vector:
        """Validate the ``{"data": [{"index": i, "embedding": [...]}, ...]}`` shape shared by
        OpenAI and Voyage and return the rows in input order."""

        def bad(why: str) -> EmbedderUnavailable:
            return EmbedderUnavailable(f"{self.model_id}: unexpected response from the provider: {why}")

        if not isinstance(body, dict):
            raise bad(f"expected a JSON object, got {type(body).__name__}")
        data = body.get("data")
        if not isinstance(data, list):
            raise bad("missing 'data' list")
        if len(data) != expected:
            raise bad(f"{len(data)} embeddings for {expected} inputs")
        rows: list[list[float] | None] = [None] * expected
        for pos, item in enumerate(data):
            if not isinstance(item, dict):
                raise bad(f"data[{pos}] is not an object")
            index = item.get("index", pos)
            if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < expected:
                raise bad(f"data[{pos}] has an invalid index {index!r}")
            if rows[index] is not None:
                raise bad(f"index {index} appears twice")
            embedding = item.get("embedding")
            if not isinstance(embedding, list) or not embedding:
                raise bad(f"data[{pos}].embedding is not a non-empty list of numbers")
            rows[index] = embedding
        try:
            matrix = np.array(rows, dtype=np.float32)
        except (ValueError, TypeError) as exc:
            raise bad("embeddings are not equal-length lists of numbers") from exc
        if matrix.ndim != 2:
            raise bad("embeddings are not equal-length lists of numbers")
        if not np.isfinite(matrix).all():
            raise bad("embeddings contain non-finite values")
        if zero_rows(matrix):
            raise bad("an embedding is all zeros")
        dim = int(matrix.shape[1])
        if self._dimension is None:
            self._dimension = dim
        elif dim != self._dimension:
            source = "configured" if self._configured_dimension is not None else "learned"
            raise bad(f"dimension {dim}, but the {source} dimension is {self._dimension}")
        return matrix


def _retry_after_seconds(headers: httpx.Headers) -> float | None:
    """Seconds to wait from ``retry-after-ms`` (OpenAI) or ``Retry-After`` (seconds or an
    HTTP date); None when absent or unparsable."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            value = float(millis) / 1000.0
        except ValueError:
            value = math.nan
        if math.isfinite(value) and value >= 0:
            return value
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(raw)
        except (TypeError, ValueError, IndexError):
            return None
        return max(when.timestamp() - time.time(), 0.0)
    return value if math.isfinite(value) and value >= 0 else None
