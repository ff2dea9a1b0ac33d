"""Item 8 of the hardening issue: a port already in use ends ``engram serve`` with one line naming
the address and the setting to change, exit code 1, no traceback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from engram_server.app import BindError, check_bindable


@pytest.fixture
def taken_port() -> tuple[socket.socket, int]:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    yield holder, holder.getsockname()[1]  # type: ignore[misc]
    holder.close()


def test_a_port_in_use_is_one_line_and_exit_code_1(
    tmp_path: Path, taken_port: tuple[socket.socket, int]
) -> None:
    _, port = taken_port
    env = {
        **os.environ,
        "ENGRAM_HOST": "127.0.0.1",
        "ENGRAM_PORT": str(port),
        "ENGRAM_DATA_DIR": str(tmp_path / "data"),
        "ENGRAM_AUTH": "off",
    }
    done = subprocess.run(
        [sys.executable, "-m", "engram_server", "serve"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert f"127.0.0.1:{port}" in lines[0] and "ENGRAM_PORT" in lines[0], lines[0]
    assert "Traceback" not in done.stderr and not done.stdout.strip()
    assert not (tmp_path / "data").exists()  # refused before the store was opened


def test_the_probe_names_the_address(taken_port: tuple[socket.socket, int]) -> None:
    _, port = taken_port
    with pytest.raises(BindError, match=f"127.0.0.1:{port}.*ENGRAM_PORT"):
        check_bindable("127.0.0.1", port)
    with pytest.raises(BindError, match="cannot resolve"):
        check_bindable("no-such-host.invalid", port)
    with pytest.raises(BindError, match=r"192\.0\.2\.1.*ENGRAM_HOST"):  # TEST-NET: not this machine's
        check_bindable("192.0.2.1", port)
    check_bindable("127.0.0.1", 0)  # any free port: nothing to check
