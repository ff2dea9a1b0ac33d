"""The server's worker threads carry OS names (what ``top -H`` and ``bench/load.py`` see)."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from engram_server.adapters.storage.edge import EdgeStore
from engram_server.threads import STORAGE_THREAD, worker

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="OS thread names: Linux")


def os_name(tid: int) -> str:
    return Path(f"/proc/self/task/{tid}/comm").read_text().strip()


def test_worker_thread_has_its_os_name_and_python_name() -> None:
    ex = worker("engram-test-abcdefgh", python_name="py-name")
    try:  # read in the thread itself: once the executor shuts down, its /proc entry is gone
        who = ex.submit(lambda: (os_name(threading.get_native_id()), threading.current_thread().name))
        name, py_name = who.result()
    finally:
        ex.shutdown()
    assert name == "engram-test-abc"  # the kernel keeps 15 bytes
    assert py_name.startswith("py-name")
    assert os_name(threading.get_native_id()) != "engram-test-abc"  # the caller's is unchanged


async def test_embedded_store_runs_storage_on_a_named_thread(tmp_path: Path) -> None:
    store = EdgeStore(tmp_path / "data")
    await store.open()
    try:
        name = await store._run(lambda: os_name(threading.get_native_id()))
    finally:
        await store.close()
    assert name == STORAGE_THREAD
