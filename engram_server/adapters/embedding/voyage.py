"""Voyage AI embeddings: ``POST {base_url}/embeddings`` over httpx (not the ``voyageai``
package, which pulls ~120 MB of dependencies for one HTTP call)."""

from __future__ import annotations

from typing import Any

from engram_server.adapters.embedding._remote import InputKind, RemoteEmbedder

__all__ = ["VoyageEmbedder"]


class VoyageEmbedder(RemoteEmbedder):
    """Voyage embeddings with ``input_type`` ``"document"`` / ``"query"`` (Voyage prepends a
    retrieval prompt for each). ``output_dimension`` is sent only when ``dimension`` is
    configured (voyage-3.5 / -3.5-lite / -3-large accept 256, 512, 1024, 2048); otherwise the
    dimension is learned from the first response."""

    default_base_url = "https://api.voyageai.com/v1"
    provider = "voyage"

    def _body(self, texts: list[str], kind: InputKind) -> dict[str, Any]:
        # truncation=True (Voyage's default, stated explicitly): over-long texts are cut to the
        # model's context rather than failing the whole batch.
        body: dict[str, Any] = {"model": self._model, "input": texts, "input_type": kind, "truncation": True}
        if self._configured_dimension is not None:
            body["output_dimension"] = self._configured_dimension
        return body

    def _error_message(self, body: Any) -> str | None:
        # Voyage answers errors as {"detail": "..."}; accept an OpenAI-style body from proxies.
        if isinstance(body, dict):
            detail = body.get("detail")
            if isinstance(detail, str):
                return detail
            if detail is not None:
                return str(detail)[:300]
            error = body.get("error")
            if isinstance(error, dict) and isinstance(error.get("message"), str):
                return str(error["message"])
            if isinstance(error, str):
                return error
        return None
