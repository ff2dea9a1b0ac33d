"""Micro-batching in front of any :class:`~engram_server.ports.Embedder`.

Concurrent ``embed_documents`` / ``embed_queries`` calls are coalesced (documents and queries in
separate lanes, since models treat them differently) into one inner call per batch. When nothing
of its lane is running, a batch leaves at once (a lone caller never waits for company); otherwise
it is sent when it holds ``max_batch`` texts, or ``max_wait_ms`` after its first request arrived,
whichever comes first; while ``max_in_flight`` batches of a lane are running, new requests keep
accumulating, so the batch size grows with load. Identical texts within a batch are embedded
once. Query embeddings are also kept in a bounded LRU cache keyed by text.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from opentelemetry import metrics, trace

from engram_server.domain.errors import EmbedderUnavailable
from engram_server.domain.model import Vector
from engram_server.ports import Embedder

__all__ = ["BatchStats", "BatchingEmbedder"]

_meter = metrics.get_meter("engram_server.adapters.embedding")
_batch_sizes = _meter.create_histogram(
    "engram.embedding.batch.size",
    unit="{text}",
    description="Texts per inner embedding call, by lane (documents, queries).",
    explicit_bucket_boundaries_advisory=(1, 2, 4, 8, 16, 32, 64, 128, 256),
)
_latency = _meter.create_histogram(
    "engram.embedding.duration",
    unit="s",
    description="Duration of one inner embedding call (one batch), by lane and outcome.",
    explicit_bucket_boundaries_advisory=(
        0.001,
        0.0025,
        0.005,
        0.01,
        0.025,
        0.05,
        0.1,
        0.25,
        0.5,
        1,
        2.5,
        5,
        10,
    ),
)


@dataclass(slots=True)
class BatchStats:
    """Counters, for tests and metrics."""

    inner_calls: int = 0
    texts_embedded: int = 0
    duplicates_skipped: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    largest_batch: int = 0


@dataclass(slots=True)
class _Request:
    texts: list[str]
    future: asyncio.Future[Vector]
    arrived: float
    batch_size: int = 0  # texts in the batch that carried this request (for the caller's span)


@dataclass(slots=True)
class _Lane:
    """One coalescing queue (documents or queries) with its dispatcher task."""

    name: str
    call: Callable[[list[str]], Awaitable[Vector]]
    max_batch: int
    max_wait: float
    max_in_flight: int
    stats: BatchStats
    pending: deque[_Request] = field(default_factory=deque)
    pending_texts: int = 0
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    dispatcher: asyncio.Task[None] | None = None
    batches: set[asyncio.Task[None]] = field(default_factory=set)
    slots: asyncio.Semaphore | None = None
    closing: bool = False

    async def submit(self, texts: list[str]) -> Vector:
        if self.closing:
            raise EmbedderUnavailable("embedder is closed")
        loop = asyncio.get_running_loop()
        request = _Request(texts, loop.create_future(), loop.time())
        self.pending.append(request)
        self.pending_texts += len(texts)
        self.wakeup.set()
        if self.dispatcher is None or self.dispatcher.done():
            self.slots = asyncio.Semaphore(self.max_in_flight)
            self.dispatcher = asyncio.create_task(self._dispatch(), name=f"engram-embed-batcher-{self.name}")
        result = await request.future
        # The batch ran in the dispatcher's task; report its size on the caller's (embed) span.
        trace.get_current_span().set_attribute("engram.embedding.batch_size", request.batch_size)
        return result

    async def close(self) -> None:
        """Stop accepting requests, send what is queued without waiting, and wait for every
        running batch. Leaves no task behind."""
        self.closing = True
        self.wakeup.set()
        if self.dispatcher is not None:
            await asyncio.gather(self.dispatcher, return_exceptions=True)
        while self.batches:
            await asyncio.gather(*self.batches, return_exceptions=True)
        self._fail_pending(EmbedderUnavailable("embedder is closed"))

    async def _dispatch(self) -> None:
        loop = asyncio.get_running_loop()
        assert self.slots is not None
        try:
            while True:
                if not self.pending:
                    if self.closing:
                        return
                    self.wakeup.clear()
                    await self.wakeup.wait()
                    continue
                await self.slots.acquire()
                try:
                    await self._fill_window(loop)
                    batch = self._take()
                except BaseException:
                    self.slots.release()
                    raise
                if not batch:
                    self.slots.release()
                    continue
                task = asyncio.create_task(self._run(batch), name=f"engram-embed-batch-{self.name}")
                self.batches.add(task)
                task.add_done_callback(self._batch_done)
        except BaseException as exc:
            # Never strand a caller: whatever stopped the dispatcher fails what is still queued.
            failure = exc if isinstance(exc, Exception) else EmbedderUnavailable("embedding batcher stopped")
            self._fail_pending(failure)
            raise

    async def _fill_window(self, loop: asyncio.AbstractEventLoop) -> None:
        """Wait until the batch is full, the oldest request has waited ``max_wait``, or close; not at
        all while the lane is idle (requests that arrived together still leave together)."""
        if not self.batches:
            return
        while not self.closing and self.pending and self.pending_texts < self.max_batch:
            remaining = self.pending[0].arrived + self.max_wait - loop.time()
            if remaining <= 0:
                return
            self.wakeup.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await self.wakeup.wait()

    def _take(self) -> list[_Request]:
        batch: list[_Request] = []
        size = 0
        while self.pending:
            head = self.pending[0]
            if head.future.done():  # the caller gave up (cancelled) before its batch left
                self.pending.popleft()
                self.pending_texts -= len(head.texts)
                continue
            if batch and size + len(head.texts) > self.max_batch:
                break
            self.pending.popleft()
            self.pending_texts -= len(head.texts)
            batch.append(head)
            size += len(head.texts)
        return batch

    def _batch_done(self, task: asyncio.Task[None]) -> None:
        self.batches.discard(task)
        if self.slots is not None:
            self.slots.release()

    async def _run(self, batch: list[_Request]) -> None:
        index: dict[str, int] = {}
        total = 0
        for request in batch:
            total += len(request.texts)
            for text in request.texts:
                index.setdefault(text, len(index))
        unique = list(index)
        self.stats.inner_calls += 1
        self.stats.texts_embedded += len(unique)
        self.stats.duplicates_skipped += total - len(unique)
        self.stats.largest_batch = max(self.stats.largest_batch, total)
        _batch_sizes.record(len(unique), {"engram.embedding.lane": self.name})
        started = time.perf_counter()
        outcome = "error"
        try:
            matrix = await self.call(unique)
            if matrix.ndim != 2 or matrix.shape[0] != len(unique):
                raise EmbedderUnavailable(
                    f"embedder returned {matrix.shape[0] if matrix.ndim else 0} rows for {len(unique)} texts"
                )
            outcome = "ok"
            for request in batch:
                if not request.future.done():
                    request.batch_size = total
                    request.future.set_result(matrix[[index[t] for t in request.texts]])
        except asyncio.CancelledError:
            self._fail(batch, EmbedderUnavailable("embedding batch cancelled"))
            raise
        except Exception as exc:  # every caller of this batch sees the same failure
            self._fail(batch, exc)
        finally:
            _latency.record(
                time.perf_counter() - started, {"engram.embedding.lane": self.name, "engram.outcome": outcome}
            )

    @staticmethod
    def _fail(batch: list[_Request], exc: Exception) -> None:
        for request in batch:
            if not request.future.done():
                request.future.set_exception(exc)

    def _fail_pending(self, exc: Exception) -> None:
        while self.pending:
            request = self.pending.popleft()
            if not request.future.done():
                request.future.set_exception(exc)
        self.pending_texts = 0


class BatchingEmbedder:
    """Wraps an embedder; see the module docstring. ``model_id`` and ``dimension`` are the
    inner embedder's."""

    def __init__(
        self,
        inner: Embedder,
        *,
        max_batch: int = 32,
        max_wait_ms: float = 2.0,
        query_cache_size: int = 4096,
        max_in_flight: int = 2,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        if max_wait_ms < 0:
            raise ValueError(f"max_wait_ms must be >= 0, got {max_wait_ms}")
        if query_cache_size < 0:
            raise ValueError(f"query_cache_size must be >= 0, got {query_cache_size}")
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
        self._inner = inner
        self._stats = BatchStats()
        wait = max_wait_ms / 1000.0
        lane = (max_batch, wait, max_in_flight, self._stats)
        self._documents = _Lane("documents", inner.embed_documents, *lane)
        self._queries = _Lane("queries", inner.embed_queries, *lane)
        self._cache: OrderedDict[str, Vector] = OrderedDict()
        self._cache_size = query_cache_size
        self._closed = False

    @property
    def inner(self) -> Embedder:
        return self._inner

    @property
    def model_id(self) -> str:
        return self._inner.model_id

    @property
    def dimension(self) -> int:
        return self._inner.dimension

    @property
    def stats(self) -> BatchStats:
        return self._stats

    async def warm_up(self) -> None:
        """Warm the inner embedder up, if it can be (load a model / learn the dimension)."""
        warm_up: Callable[[], Awaitable[None]] | None = getattr(self._inner, "warm_up", None)
        if warm_up is not None:
            await warm_up()

    async def embed_documents(self, texts: Sequence[str]) -> Vector:
        items = list(texts)
        if not items:
            return await self._inner.embed_documents([])
        return await self._documents.submit(items)

    async def embed_queries(self, texts: Sequence[str]) -> Vector:
        items = list(texts)
        if not items:
            return await self._inner.embed_queries([])
        if self._cache_size == 0:
            return await self._queries.submit(items)
        found: dict[str, Vector] = {}
        for text in items:
            row = self._cache.get(text)
            if row is not None:
                self._cache.move_to_end(text)
                found[text] = row
        misses = [t for t in dict.fromkeys(items) if t not in found]
        if not misses:
            trace.get_current_span().set_attribute("engram.embedding.cache_hit", True)
        self._stats.cache_hits += sum(1 for t in items if t in found)
        self._stats.cache_misses += len(misses)
        if misses:
            fresh = await self._queries.submit(misses)
            for text, row in zip(misses, fresh, strict=True):
                found[text] = row
                self._remember(text, row)
        return np.stack([found[t] for t in items]).astype(np.float32, copy=False)

    async def close(self) -> None:
        """Finish queued work, then close the inner embedder. Idempotent."""
        if self._closed:
            return
        self._closed = True
        await asyncio.gather(self._documents.close(), self._queries.close())
        self._cache.clear()
        await self._inner.close()

    def _remember(self, text: str, row: Vector) -> None:
        stored = np.array(row, dtype=np.float32, copy=True)
        stored.flags.writeable = False
        self._cache[text] = stored
        self._cache.move_to_end(text)
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
