"""Helpers for the polyglot contract tests: a fresh Engram server (a real
`python -m engram_server serve` subprocess on the embedded defaults) and subprocess runs."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.polyglot import scenario

ROOT = scenario.ROOT
GO_DIR = ROOT / "clients" / "go"
TS_DIR = ROOT / "clients" / "ts"
LISTENING = re.compile(r"engram listening on (\S+)")


@contextlib.contextmanager
def engram_server(workdir: Path, startup_timeout: float = 90.0) -> Iterator[str]:
    """Start `python -m engram_server serve` on a free port with its data under workdir;
    yield its address ("127.0.0.1:PORT"); stop it with SIGTERM."""
    workdir.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    env.update(ENGRAM_DATA_DIR=str(workdir / "data"), ENGRAM_HOST="127.0.0.1", ENGRAM_PORT="0")
    log_path = workdir / "server.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "engram_server", "serve"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + startup_timeout
            address = None
            while address is None:
                match = LISTENING.search(log_path.read_text(errors="replace"))
                if match:
                    address = match.group(1)
                elif proc.poll() is not None:
                    pytest.fail(f"engram server exited with {proc.returncode}:\n{log_path.read_text()}")
                elif time.monotonic() > deadline:
                    pytest.fail(f"engram server did not start in {startup_timeout}s:\n{log_path.read_text()}")
                else:
                    time.sleep(0.05)
            yield address
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 280) -> str:
    """Run a command; fail the test with its output if it fails. Returns the output."""
    started = time.monotonic()
    proc = subprocess.run(
        cmd,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        check=False,
    )
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        pytest.fail(
            f"`{' '.join(cmd)}` in {cwd} exited with {proc.returncode}:\n{proc.stdout}", pytrace=False
        )
    print(f"$ {' '.join(cmd)}  ({elapsed:.1f}s)\n{proc.stdout}")
    return proc.stdout
