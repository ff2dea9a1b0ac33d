"""Any OpenAI-compatible chat-completions endpoint (OpenAI, OpenRouter, Ollama, vLLM, llama.cpp,
LiteLLM, …) through the official ``openai`` client, with structured JSON output."""

from __future__ import annotations

import json
from typing import Any

import openai

from engram_server.domain.errors import LlmInvalidOutput, LlmUnavailable
from engram_server.ports import LlmResult
from engram_server.telemetry import llm_span


class OpenAICompatibleLlm:
    """``response_format`` = JSON schema (strict) where the server supports it; the answer is
    parsed here and must be a JSON object. The ``openai`` client retries connection errors,
    408/409/429 and 5xx with backoff (``max_retries``) and enforces ``timeout`` per attempt."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        temperature: float = 0.2,
    ) -> None:
        self._model = model
        self._temperature = temperature
        self._client = openai.AsyncOpenAI(
            base_url=base_url,
            # Local servers (Ollama, llama.cpp) need no key, but the client insists on one.
            api_key=api_key or "not-needed",
            timeout=timeout,
            max_retries=max_retries,
        )

    @property
    def model(self) -> str:
        return self._model

    async def complete_json(
        self, *, system: str, user: str, schema: dict[str, Any], schema_name: str
    ) -> LlmResult:
        with llm_span(self._model, provider="openai") as call:
            completion = await self._create(system, user, schema, schema_name)
            if completion.usage:
                call.set_tokens(completion.usage.prompt_tokens, completion.usage.completion_tokens)
        return self._parse(completion)

    async def _create(self, system: str, user: str, schema: dict[str, Any], schema_name: str) -> Any:
        try:
            return await self._client.chat.completions.create(
                model=self._model,
                messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
                response_format={
                    "type": "json_schema",
                    "json_schema": {"name": schema_name, "schema": schema, "strict": True},
                },
                temperature=self._temperature,
            )
        except openai.APITimeoutError as exc:
            raise LlmUnavailable(f"LLM {self._model} timed out") from exc
        except openai.APIConnectionError as exc:
            raise LlmUnavailable(f"cannot reach the LLM endpoint: {exc.__class__.__name__}") from exc
        except openai.APIStatusError as exc:
            raise LlmUnavailable(
                f"LLM endpoint answered HTTP {exc.status_code}: {_short(exc.message)}",
                metadata={"http_status": str(exc.status_code)},
            ) from exc
        except openai.APIError as exc:  # e.g. a response the client cannot decode
            raise LlmInvalidOutput(f"LLM endpoint answered unreadably: {_short(str(exc))}") from exc

    def _parse(self, completion: Any) -> LlmResult:
        if not completion.choices:
            raise LlmInvalidOutput("LLM answered with no choices")
        content = completion.choices[0].message.content
        if content is None or not content.strip():
            raise LlmInvalidOutput("LLM answered with empty content")
        try:
            data = json.loads(_strip_fences(content))
        except ValueError as exc:
            raise LlmInvalidOutput(f"LLM answer is not JSON: {_short(content)}") from exc
        if not isinstance(data, dict):
            raise LlmInvalidOutput(f"LLM answer is not a JSON object: {_short(content)}")
        usage = completion.usage
        return LlmResult(
            data=data,
            model=completion.model or self._model,
            prompt_tokens=usage.prompt_tokens if usage else None,
            completion_tokens=usage.completion_tokens if usage else None,
        )

    async def close(self) -> None:
        await self._client.close()


def _strip_fences(text: str) -> str:
    """Some local models wrap JSON in a ```json fence despite response_format."""
    stripped = text.strip()
    if stripped.startswith("```"):
        stripped = stripped.split("\n", 1)[1] if "\n" in stripped else ""
        if stripped.rstrip().endswith("```"):
            stripped = stripped.rstrip()[:-3]
    return stripped


def _short(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "…"
