"""Fixtures for the polyglot contract tests: the Python reference transcript and the Go and
Node toolchains, prepared by the project's own files and cached in the repository."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.polyglot import scenario
from tests.polyglot.support import TS_DIR, engram_server, run


@pytest.fixture(scope="session")
def python_transcript(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """The scenario run from Python, against a fresh server: the reference transcript."""
    with engram_server(tmp_path_factory.mktemp("engram-python")) as address:
        return scenario.run(scenario.load("contract_v1"), address)


@pytest.fixture(scope="session")
def go() -> str:
    """The `go` binary; skips the Go tests (with the reason) when Go is not installed."""
    path = shutil.which("go")
    if path is None:
        pytest.skip("go is not on PATH: skipping the Go stubs check and contract test (install Go >= 1.26)")
    return path


@pytest.fixture(scope="session")
def node() -> str:
    """The `node` binary; skips the TypeScript tests (with the reason) when Node is not installed."""
    path = shutil.which("node")
    if path is None:
        pytest.skip("node is not on PATH: skipping the TypeScript test and buf breaking (install Node >= 20)")
    return path


@pytest.fixture(scope="session")
def ts_built(node: str) -> Path:
    """clients/ts with its pinned dependencies installed (`npm ci`, cached in node_modules
    until package-lock.json changes) and built (types from proto/, then tsc)."""
    npm = shutil.which("npm", path=str(Path(node).parent)) or shutil.which("npm")
    if npm is None:
        pytest.fail("node is installed but npm is not on PATH")
    lock_hash = hashlib.sha256((TS_DIR / "package-lock.json").read_bytes()).hexdigest()
    marker = TS_DIR / "node_modules" / ".engram-lock-sha256"
    if not marker.exists() or marker.read_text() != lock_hash:
        run([npm, "ci", "--no-audit", "--no-fund"], TS_DIR)
        marker.write_text(lock_hash)
    run([npm, "run", "build", "--silent"], TS_DIR)
    return TS_DIR
