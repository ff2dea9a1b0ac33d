"""The published artefact: ``python -m build`` makes a wheel and an sdist; the wheel, installed into
a clean virtualenv, pulls only grpcio, protobuf and googleapis-common-protos / grpcio-status, and
works against a live server from outside the source tree. The README's other way,
``pip install ./engram_client`` from the checkout, is checked the same way in a second clean
virtualenv."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

CLIENT_DIR = Path(__file__).resolve().parents[2] / "engram_client"
ALLOWED = {"grpcio", "protobuf", "googleapis-common-protos", "grpcio-status"}
VENV_TOOLING = {"pip", "setuptools", "wheel"}

# Prints {distribution: [names it requires, extras left out]} for the interpreter that runs it.
DEPENDENCIES = textwrap.dedent(
    r"""
    import json, re
    from importlib.metadata import distributions

    def norm(name):
        return re.sub(r"[-_.]+", "-", name).lower()

    graph = {}
    for dist in distributions():
        requires = [
            norm(re.split(r"[ ;<>=!~\[(]", line, maxsplit=1)[0])
            for line in dist.requires or []
            if "extra ==" not in line
        ]
        graph[norm(dist.metadata["Name"])] = requires
    print(json.dumps(graph))
    """
)


ROUND_TRIP = textwrap.dedent(
    """
    import sys
    import engram_client
    from engram_client import EngramClient, ProtectedMemoryError

    assert "site-packages" in engram_client.__file__, engram_client.__file__
    with EngramClient(sys.argv[1], timeout=120) as engram:  # the first call loads the model
        added = engram.add("The wheel smoke test remembers this sentence.", type="identity", importance=6)
        hits = engram.search("wheel smoke test sentence", limit=1)
        assert hits[0].memory.id == added.memory.id, hits
        updated = engram.update(added.memory.id, importance=7)
        assert updated.changed and updated.memory.importance == 7
        try:
            engram.delete(added.memory.id)
        except ProtectedMemoryError:
            pass
        else:
            raise AssertionError("identity memories are protected")
        assert len(engram.delete(added.memory.id, force=True).deleted) == 1
    print("round trip ok")
    """
)


def _run(*args: str | Path, cwd: Path) -> str:
    done = subprocess.run(
        [str(a) for a in args], check=False, cwd=cwd, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"{args}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    return done.stdout


def _build_and_install(tmp: Path) -> Path:
    dist = tmp / "dist"
    _run(sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", dist, CLIENT_DIR, cwd=tmp)
    wheels = list(dist.glob("engram_client-0.1.0a1-*.whl"))
    assert len(wheels) == 1 and list(dist.glob("engram_client-0.1.0a1.tar.gz"))
    with zipfile.ZipFile(wheels[0]) as wheel:
        names = set(wheel.namelist())
    for required in (
        "engram_client/py.typed",
        "engram_client/client.py",
        "engram_client/proto/engram/v1/memory_service_pb2_grpc.py",
        "engram_client/proto/engram/v1/memory_service_pb2.pyi",
        "engram_client/proto/engram/v1/memory_pb2.pyi",
    ):
        assert required in names, required
    return _clean_venv_with(tmp / "venv-wheel", str(wheels[0]), cwd=tmp)


def _clean_venv_with(venv: Path, requirement: str, *, cwd: Path) -> Path:
    _run(sys.executable, "-m", "venv", venv, cwd=cwd)
    python = venv / "bin" / "python"
    _run(python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", requirement, cwd=cwd)
    return python


def _check_only_allowed_dependencies(graph: dict[str, list[str]]) -> None:
    direct = set(graph["engram-client"])
    assert direct <= ALLOWED, f"engram-client requires more than allowed: {sorted(direct - ALLOWED)}"
    assert {"grpcio", "protobuf"} <= direct
    # Everything installed is engram-client, venv tooling, or pulled in (transitively) by an
    # allowed dependency (grpcio itself requires typing-extensions, for example).
    reachable: set[str] = set()
    todo = list(direct)
    while todo:
        name = todo.pop()
        if name not in reachable:
            reachable.add(name)
            todo.extend(graph.get(name, []))
    installed = set(graph) - VENV_TOOLING - {"engram-client"}
    assert installed <= reachable, (
        f"installed but not required by an allowed dependency: {installed - reachable}"
    )


async def test_wheel_and_source_directory_in_clean_virtualenvs(engram_server: str, tmp_path: Path) -> None:
    if not CLIENT_DIR.joinpath("pyproject.toml").exists():
        pytest.fail("engram_client/pyproject.toml is missing")
    (tmp_path / "from-dir").mkdir()
    wheel_python, dir_python = await asyncio.gather(
        asyncio.to_thread(_build_and_install, tmp_path),
        # exactly the README's `pip install ./engram_client`, run from the checkout
        asyncio.to_thread(_clean_venv_with, tmp_path / "venv-dir", "./engram_client", cwd=CLIENT_DIR.parent),
    )
    script = tmp_path / "round_trip.py"
    script.write_text(ROUND_TRIP)
    for python in (wheel_python, dir_python):
        graph: dict[str, list[str]] = json.loads(
            await asyncio.to_thread(_run, python, "-c", DEPENDENCIES, cwd=tmp_path)
        )
        _check_only_allowed_dependencies(graph)
        out = await asyncio.to_thread(_run, python, script, engram_server, cwd=tmp_path)
        assert "round trip ok" in out
