"""Runs the atheris fuzz target (fuzz/fuzz_requests.py) for a bounded number of inputs, from a
seed corpus of valid requests of every RPC. A crash (an INTERNAL/UNKNOWN answer or an unexpected
exception for some input) fails the test with libFuzzer's report."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TARGET = ROOT / "fuzz" / "fuzz_requests.py"
RUNS = int(os.environ.get("ENGRAM_FUZZ_RUNS", "20000"))


@pytest.mark.skipif(importlib.util.find_spec("atheris") is None, reason="atheris is not installed")
def test_fuzz_requests_bounded(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    seeder = (
        "import sys; sys.argv=['x']; import runpy; "
        f"g = runpy.run_path({str(TARGET)!r}, run_name='seeds'); "
        "from pathlib import Path; "
        f"[Path({str(corpus)!r}, f'seed{{i}}').write_bytes(b) for i, b in enumerate(g['seeds']())]"
    )
    subprocess.run([sys.executable, "-c", seeder], cwd=ROOT, check=True, timeout=120)
    assert len(list(corpus.iterdir())) >= 30  # (every RPC)
    out = subprocess.run(
        [
            sys.executable,
            str(TARGET),
            f"-runs={RUNS}",
            "-max_total_time=120",
            # The instrumented imports (the whole servicer and its libraries) take ~4 GB of RSS
            # before the first input; a single input may still allocate at most 512 MB.
            "-rss_limit_mb=8192",
            "-malloc_limit_mb=512",
            f"-artifact_prefix={tmp_path}/",
            str(corpus),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    report = out.stdout + out.stderr
    assert out.returncode == 0, report[-4000:]
    done = re.search(r"Done (\d+) runs", report)
    assert done, report[-2000:]
    cov = re.findall(r"cov: (\d+)", report)
    print(f"\nfuzz: {done.group(1)} inputs, coverage {cov[-1] if cov else '?'} edges, 0 crashes")
