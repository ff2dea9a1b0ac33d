"""Worker threads the operating system can tell apart.

Python's thread names live in Python only: ``top -H``, ``ps -L`` and ``/proc/PID/task/*/comm``
show every thread of the server as its process. The server's own worker threads also carry an OS
name (Linux ``prctl(PR_SET_NAME)``, at most 15 bytes), which threads they start inherit — the
embedding model's OpenMP threads show as ``engram-model``. ``bench/load.py`` reads these names to
split the server's CPU per request into the event loop, storage and the model.
"""

from __future__ import annotations

import ctypes
import sys
from concurrent.futures import ThreadPoolExecutor

#: OS names of the server's worker threads (what ``/proc/PID/task/TID/comm`` shows).
STORAGE_THREAD = "engram-edge-io"
OPTIMIZER_THREAD = "engram-optimize"
MODEL_THREAD = "engram-model"

_PR_SET_NAME = 15


def name_os_thread(name: str) -> None:
    """Give the calling thread an OS-level name (Linux; a no-op elsewhere or if it fails)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)
    except (OSError, AttributeError):
        return


def worker(name: str, *, python_name: str | None = None) -> ThreadPoolExecutor:
    """A one-thread executor whose thread carries ``name`` in the OS (and ``python_name``, default
    ``name``, as the prefix of its Python name)."""
    return ThreadPoolExecutor(
        max_workers=1,
        thread_name_prefix=python_name or name,
        initializer=name_os_thread,
        initargs=(name,),
    )
