"""The generated reference pages match their sources (proto comments, engram_server/config.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("script", ["gen_api_docs.py", "gen_config_docs.py"])
def test_generated_reference_is_current(script: str) -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / script), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_api_reference_carries_the_proto_comments() -> None:
    """Spot check of the walk: a service method, a field and an enum value with their comments."""
    page = (REPO / "docs" / "reference" / "api.md").read_text()
    assert (
        "| `AddMemory` | [AddMemoryRequest](#addmemoryrequest) → [AddMemoryResponse](#addmemoryresponse) |"
        in page
    )
    assert (
        "### ScoreBreakdown" in page
        and "| `final` = 1 | float | The fused score results are sorted by. |" in page
    )
    assert "`ERROR_REASON_PROTECTED_MEMORY`" in page
