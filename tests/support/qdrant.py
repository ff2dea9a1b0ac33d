"""A real Qdrant server (the ``qdrant`` binary) for tests: one node or a cluster on loopback.

The binary is ``$QDRANT_BIN``, else ``shared/bin/qdrant`` beside the repository (the path is resolved
from the repository root's parent, so a clone elsewhere without it simply has none). Tests that need
it skip with the reason :func:`qdrant_binary` gives when it is missing.

Each node runs in its own process group, in its own temporary directory (storage, snapshots, log),
on ports picked free on 127.0.0.1. Stopping a node kills its process group (SIGKILL for the
crash tests, SIGTERM otherwise): never a process found by name.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[2]


def _checkouts() -> list[Path]:
    """This checkout's root and, for a git worktree, the main checkout's root."""
    roots = [REPO]
    dotgit = REPO / ".git"
    if dotgit.is_file():  # a worktree: "gitdir: <main>/.git/worktrees/<name>"
        text = dotgit.read_text().strip()
        if text.startswith("gitdir:"):
            gitdir = Path(text.removeprefix("gitdir:").strip())
            if gitdir.parent.name == "worktrees":
                roots.append(gitdir.parent.parent.parent)
    return roots


def qdrant_binary() -> tuple[Path | None, str]:
    """The server binary, or None and why there is none."""
    env = os.environ.get("QDRANT_BIN")
    if env:
        path = Path(env)
        if path.is_file() and os.access(path, os.X_OK):
            return path, ""
        return None, f"QDRANT_BIN={env} is not an executable file"
    candidates = [root.parent / "shared" / "bin" / "qdrant" for root in _checkouts()]
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path, ""
    where = " or ".join(str(p) for p in candidates)
    return None, f"no Qdrant server binary: set QDRANT_BIN or put one at {where}"


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports free on 127.0.0.1 now (all held open until every one is picked)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class QdrantNode:
    """One ``qdrant`` process: its ports, its directory and (while it runs) its process."""

    binary: Path
    workdir: Path
    http_port: int
    grpc_port: int
    p2p_port: int | None = None  # set in a cluster
    bootstrap: str | None = None  # the p2p URI of the node to join (None: this node starts the cluster)
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def p2p_uri(self) -> str:
        return f"http://127.0.0.1:{self.p2p_port}"

    @property
    def log(self) -> Path:
        return self.workdir / "qdrant.log"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("QDRANT__")}
        env.update(
            QDRANT__SERVICE__HOST="127.0.0.1",
            QDRANT__SERVICE__HTTP_PORT=str(self.http_port),
            QDRANT__SERVICE__GRPC_PORT=str(self.grpc_port),
            QDRANT__STORAGE__STORAGE_PATH=str(self.workdir / "storage"),
            QDRANT__STORAGE__SNAPSHOTS_PATH=str(self.workdir / "snapshots"),
            QDRANT__TELEMETRY_DISABLED="true",
            QDRANT__LOG_LEVEL="WARN",
            # Two cores are shared by every test: keep the engine's own thread pools small.
            QDRANT__STORAGE__PERFORMANCE__MAX_SEARCH_THREADS="2",
            QDRANT__STORAGE__OPTIMIZERS__MAX_OPTIMIZATION_THREADS="1",
        )
        if self.p2p_port is not None:
            env.update(QDRANT__CLUSTER__ENABLED="true", QDRANT__CLUSTER__P2P__PORT=str(self.p2p_port))
        return env

    def start(self) -> None:
        """Start the process (not waiting for it: see :meth:`wait_ready`)."""
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError("already running")
        self.workdir.mkdir(parents=True, exist_ok=True)
        args = [str(self.binary)]
        if self.p2p_port is not None:
            args += ["--uri", self.p2p_uri]
            if self.bootstrap is not None:
                args += ["--bootstrap", self.bootstrap]
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                args,
                cwd=self.workdir,
                env=self.env(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, killed as one
            )

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Until the node answers ``/readyz`` (in a cluster: it has joined and caught up)."""
        deadline = time.monotonic() + timeout
        while True:
            if not self.running():
                raise RuntimeError(f"qdrant exited ({self.proc and self.proc.returncode}): {self.tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "/readyz", timeout=2).status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"qdrant not ready after {timeout}s: {self.tail()}")
            time.sleep(0.1)

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout: float = 30.0) -> None:
        """Signal the node's process group and reap it (SIGKILL if it outlives ``timeout``)."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def tail(self, n: int = 2000) -> str:
        try:
            return self.log.read_text(errors="replace")[-n:]
        except OSError:
            return "(no log)"

    def get(self, path: str) -> Any:
        """A REST GET on this node: its ``result``."""
        r = httpx.get(self.url + path, timeout=10)
        r.raise_for_status()
        return r.json()["result"]


def single_node(binary: Path, workdir: Path) -> QdrantNode:
    http, grpc = free_ports(2)
    return QdrantNode(binary, workdir, http, grpc)


@contextlib.contextmanager
def running_node(binary: Path, workdir: Path) -> Iterator[QdrantNode]:
    node = single_node(binary, workdir)
    node.start()
    try:
        node.wait_ready()
        yield node
    finally:
        node.stop()


def cluster_nodes(binary: Path, workdir: Path, n: int = 3) -> list[QdrantNode]:
    ports = free_ports(3 * n)
    nodes: list[QdrantNode] = []
    for i in range(n):
        http, grpc, p2p = ports[3 * i : 3 * i + 3]
        nodes.append(
            QdrantNode(
                binary,
                workdir / f"node{i + 1}",
                http,
                grpc,
                p2p_port=p2p,
                bootstrap=None if i == 0 else f"http://127.0.0.1:{ports[2]}",
            )
        )
    return nodes


@contextlib.contextmanager
def running_cluster(
    binary: Path, workdir: Path, n: int = 3, timeout: float = 60.0
) -> Iterator[list[QdrantNode]]:
    """``n`` nodes on loopback: the first starts the cluster, the others join it; yields once
    every node is ready and the first one sees ``n`` peers."""
    nodes = cluster_nodes(binary, workdir, n)
    try:
        nodes[0].start()
        nodes[0].wait_ready(timeout)
        for node in nodes[1:]:
            node.start()
            node.wait_ready(timeout)
        deadline = time.monotonic() + timeout
        while len(nodes[0].get("/cluster")["peers"]) < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"cluster did not form: {nodes[0].get('/cluster')}")
            time.sleep(0.2)
        yield nodes
    finally:
        for node in nodes:
            node.stop()
