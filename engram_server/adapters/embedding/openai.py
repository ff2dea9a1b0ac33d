"""Any OpenAI-compatible ``POST {base_url}/embeddings`` endpoint (OpenAI, Azure-style proxies,
vLLM, Ollama, LM Studio, ...) over httpx; no SDK."""

from __future__ import annotations

from typing import Any

from engram_server.adapters.embedding._remote import InputKind, RemoteEmbedder

__all__ = ["OpenAIEmbedder"]


class OpenAIEmbedder(RemoteEmbedder):
    """OpenAI embeddings. ``dimensions`` is sent only when ``dimension`` is configured
    (text-embedding-3 models shorten their vectors on request); otherwise the dimension is
    learned from the first response (``warm_up()`` makes that happen up front). OpenAI has no
    query/document distinction, so both paths send the same request."""

    default_base_url = "https://api.openai.com/v1"
    provider = "openai"

    def _body(self, texts: list[str], kind: InputKind) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self._model, "input": texts, "encoding_format": "float"}
        if self._configured_dimension is not None:
            body["dimensions"] = self._configured_dimension
        return body

    def _error_message(self, body: Any) -> str | None:
        # {"error": {"message": "...", "type": "...", "param": ..., "code": "..."}}
        if isinstance(body, dict):
            error = body.get("error")
            if isinstance(error, dict):
                message = error.get("message")
                code = error.get("code") or error.get("type")
                if isinstance(message, str):
                    return f"{message} ({code})" if isinstance(code, str) and code else message
            elif isinstance(error, str):
                return error
        return None
