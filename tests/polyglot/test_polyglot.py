"""One shared scenario file, three languages: the contract behaves the same from Python, Go
and TypeScript, each against its own fresh server, and the three transcripts are identical.

`.venv/bin/pytest tests/polyglot` runs everything: the Python runner in the pytest process, `go test`
(clients/go/contract) and `node --test` (clients/ts/test) as subprocesses given the server
address in ENGRAM_CONTRACT_ADDR. Go and TypeScript are skipped only when `go` / `node` is
not installed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from tests.polyglot import scenario
from tests.polyglot.support import GO_DIR, ROOT, engram_server, run

SCENARIOS = sorted(p.stem for p in scenario.SCENARIO_DIR.glob("*.json"))


def assert_same_transcript(language: str, got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    for index, (g, w) in enumerate(zip(got, want, strict=False)):
        if g != w:
            raise AssertionError(
                f"{language} differs from Python at step {index} ({w['step']!r}):\n"
                f"  python: {json.dumps(w['observed'], sort_keys=True)}\n"
                f"  {language}: {json.dumps(g['observed'], sort_keys=True)}"
            )
    assert len(got) == len(want), f"{language} ran {len(got)} steps, Python {len(want)}"


def contract_env(address: str, transcript: Path) -> dict[str, str]:
    return {
        **os.environ,
        "ENGRAM_CONTRACT_ADDR": address,
        "ENGRAM_CONTRACT_SCENARIO": str(scenario.SCENARIO_DIR / "contract_v1.json"),
        "ENGRAM_CONTRACT_TRANSCRIPT": str(transcript),
    }


def test_scenario_file_is_well_formed() -> None:
    assert SCENARIOS == ["contract_v1"]
    data = scenario.load("contract_v1")
    names: set[str] = set()
    captured: set[str] = set()

    def refs(value: Any) -> set[str]:
        if isinstance(value, str) and value.startswith("$"):
            return {value[1:]}
        if isinstance(value, list):
            return set().union(*(refs(v) for v in value)) if value else set()
        if isinstance(value, dict):
            return set().union(*(refs(v) for v in value.values())) if value else set()
        return set()

    for step in data["steps"]:
        assert set(step) <= {"name", "call", "capture", "request", "expect"}, step
        assert step["name"] not in names, f"duplicate step name {step['name']!r}"
        names.add(step["name"])
        assert step["call"] in scenario.REQUEST_TYPES, step["call"]
        assert refs(step["request"]) <= captured, f"{step['name']!r} uses a name captured later"
        assert isinstance(step["expect"], dict) and step["expect"], step["name"]
        if "capture" in step:
            captured.add(step["capture"])
    reasons = {s["expect"]["error"]["reason"] for s in data["steps"] if "error" in s["expect"]}
    assert {"ERROR_REASON_PROTECTED_MEMORY", "ERROR_REASON_INVALID_ARGUMENT"} <= reasons


def test_python_contract(python_transcript: list[dict[str, Any]]) -> None:
    """The Python runner (generated stubs + grpcio) passes every step."""
    assert len(python_transcript) == len(scenario.load("contract_v1")["steps"])


def test_go_stubs_match_proto(go: str) -> None:
    """The committed clients/go/engram/v1 is what the pinned plugins generate from proto/."""
    run([sys.executable, "scripts/polyglot_gen_go.py", "--check"], ROOT)


def test_go_vet_and_gofmt(go: str) -> None:
    unformatted = run([str(Path(go).parent / "gofmt"), "-l", "."], GO_DIR).strip()
    assert not unformatted, f"gofmt would change: {unformatted}"
    run([go, "vet", "./..."], GO_DIR)


def test_go_contract(go: str, python_transcript: list[dict[str, Any]], tmp_path: Path) -> None:
    """`go test` runs the scenario with the generated Go stubs and reads the errors'
    ErrorInfo / BadRequest from the status details; its transcript equals Python's."""
    transcript = tmp_path / "go.json"
    with engram_server(tmp_path / "server") as address:
        run([go, "test", "-count=1", "-v", "./contract"], GO_DIR, env=contract_env(address, transcript))
    assert_same_transcript("go", json.loads(transcript.read_text()), python_transcript)


def test_ts_contract(
    ts_built: Path, node: str, python_transcript: list[dict[str, Any]], tmp_path: Path
) -> None:
    """`node --test` runs the scenario with the @grpc/grpc-js client and decodes the
    google.rpc.Status trailer with protobufjs; its transcript equals Python's."""
    transcript = tmp_path / "ts.json"
    with engram_server(tmp_path / "server") as address:
        run([node, "--test", "dist/test/contract.test.js"], ts_built, env=contract_env(address, transcript))
    assert_same_transcript("typescript", json.loads(transcript.read_text()), python_transcript)


def test_buf_breaking_against_main(node: str) -> None:
    """`buf breaking` (FILE rules) of proto/ against main, as `make lint` runs it; buf is the
    Makefile's pinned npm package in .tools (installed here if `make lint` has not run)."""
    buf = ROOT / ".tools" / "node_modules" / ".bin" / "buf"
    if not buf.exists():
        match = re.search(r"^BUF_VERSION := (\S+)$", (ROOT / "Makefile").read_text(), flags=re.M)
        assert match, "BUF_VERSION not found in the Makefile"
        npm = shutil.which("npm")
        assert npm, "node is installed but npm is not on PATH"
        run(
            [
                npm,
                "install",
                "--silent",
                "--no-audit",
                "--no-fund",
                "--prefix",
                ".tools",
                f"@bufbuild/buf@{match[1]}",
            ],
            ROOT,
        )
    run(["bash", "scripts/polyglot_buf_breaking.sh", str(buf)], ROOT)
