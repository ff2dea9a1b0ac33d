"""Every code example in README.md and docs/ runs against a real server.

Each Markdown file's ```python and ```bash blocks run in order, as a reader would paste them,
against one fresh in-process server (embedded Qdrant, the real local model) whose gRPC address is in
``ENGRAM_ADDR`` and whose HTTP/JSON base URL is in ``ENGRAM_HTTP``. A block that cannot run here (it
starts a server, installs packages, needs Docker or an LLM) says so in a ``<!-- not run: why -->``
comment right above it; every other block must exit 0. A block that needs a command-line tool which
is not installed (grpcurl, ghz, go) is skipped, like the Go and TypeScript contract tests without their
toolchains.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from engram_server.testing import running_server

REPO = Path(__file__).resolve().parents[2]
DOC_FILES = sorted([REPO / "README.md", *(REPO / "docs").rglob("*.md")])
RUNNABLE = {"python", "bash"}
NOT_RUN = re.compile(r"<!--\s*not run:\s*(.*?)\s*-->")
FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```(?P<lang>[\w+-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.S | re.M
)
OPTIONAL_TOOLS = ("grpcurl", "ghz", "go")
TOOLS_PATH = os.pathsep.join([os.environ.get("PATH", ""), str(Path.home() / "go" / "bin")])
BLOCK_TIMEOUT_S = 300.0  # a hang guard, not a speed check


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    lang: str
    code: str
    not_run: str | None  # the reason, when the page says the block is not run

    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    text = path.read_text()
    found = []
    for m in FENCE.finditer(text):
        lang = m.group("lang").lower()
        before = text[: m.start()].rstrip().splitlines()
        marker = NOT_RUN.fullmatch(before[-1].strip()) if before else None
        indent = m.group("indent")
        code = "\n".join(line.removeprefix(indent) for line in m.group("body").splitlines())
        line = text.count("\n", 0, m.start()) + 1
        found.append(Block(path, line, lang, code, marker.group(1) if marker else None))
    return found


ALL_BLOCKS = [b for path in DOC_FILES for b in blocks(path)]
PAGES = sorted({b.path for b in ALL_BLOCKS if b.lang in RUNNABLE and b.not_run is None})


def test_the_examples_are_found() -> None:
    """The runner sees the README's and the docs' examples (a parser that finds nothing passes nothing)."""
    runnable = [b for b in ALL_BLOCKS if b.lang in RUNNABLE and b.not_run is None]
    assert REPO / "README.md" in PAGES
    assert len(runnable) >= 8, [b.where() for b in runnable]
    assert any(b.lang == "python" for b in runnable) and any(b.lang == "bash" for b in runnable)


def test_every_skipped_example_says_why() -> None:
    """``<!-- not run -->`` needs a reason, and only marks blocks this runner would run."""
    for b in ALL_BLOCKS:
        if b.not_run is not None:
            assert b.not_run, f"{b.where()}: a not-run marker needs a reason"
            assert b.lang in RUNNABLE, f"{b.where()}: marks a {b.lang or 'plain'} block, which never runs"


def test_examples_read_the_address_from_the_environment() -> None:
    """No runnable example hard-codes the server's address: ENGRAM_ADDR redirects every one."""
    address = re.compile(r"(localhost|127\.0\.0\.1):\d+")
    offenders = [
        f"{b.where()}: {line.strip()}"
        for b in ALL_BLOCKS
        if b.lang in RUNNABLE and b.not_run is None
        for line in b.code.splitlines()
        if address.search(line)
        and "ENGRAM_ADDR" not in line
        and "ENGRAM_HTTP" not in line  # a default beside them is fine
    ]
    assert not offenders, offenders


async def run_block(block: Block, address: str, workdir: Path, http: str = "") -> tuple[int, str]:
    env = {
        **os.environ,
        "ENGRAM_ADDR": address,
        "ENGRAM_HTTP": http,
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), TOOLS_PATH]),
    }
    if block.lang == "python":
        argv = [sys.executable, "-c", block.code]
    else:
        argv = ["bash", "-euo", "pipefail", "-c", block.code]
    process = await asyncio.create_subprocess_exec(
        *argv, cwd=REPO, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    try:
        out, _ = await asyncio.wait_for(process.communicate(), BLOCK_TIMEOUT_S)
    except TimeoutError:
        process.kill()
        await process.wait()
        return -1, f"did not finish within {BLOCK_TIMEOUT_S:.0f} s"
    assert process.returncode is not None
    return process.returncode, out.decode(errors="replace")


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
async def test_page_examples_run(page: Path, tmp_path: Path) -> None:
    """The page's examples, in order, against one fresh server: each exits 0."""
    runnable = [b for b in blocks(page) if b.lang in RUNNABLE and b.not_run is None]
    skipped: list[str] = []
    async with running_server(tmp_path / "data", http_port=0) as server:
        for block in runnable:
            missing = [
                t
                for t in OPTIONAL_TOOLS
                if re.search(rf"(^|[;&|]\s*){t}\s", block.code, re.M) and not shutil.which(t, path=TOOLS_PATH)
            ]
            if missing:
                skipped.append(f"{block.where()} needs {', '.join(missing)}")
                continue
            code, output = await run_block(
                block, server.address, tmp_path, http=f"http://127.0.0.1:{server.http_port}"
            )
            assert code == 0, (
                f"{block.where()} ({block.lang}) exited {code}:\n{block.code}\n--- output ---\n{output}"
            )
    if skipped and len(skipped) == len(runnable):
        pytest.skip("; ".join(skipped))


def test_readme_links_resolve() -> None:
    """The front page's relative links point at files that exist (mkdocs --strict checks docs/ only)."""
    readme = (REPO / "README.md").read_text()
    targets = re.findall(r"\]\((?!https?://|#)([^)#\s]+)", readme)
    assert targets, "no relative links found"
    missing = [t for t in targets if not (REPO / t).exists()]
    assert not missing, missing
