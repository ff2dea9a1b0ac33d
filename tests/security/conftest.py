"""Prints the security figures (auth matrix cells, inputs tried, cross-tenant leaks) at the end."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tests.security.support import FIGURES


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not FIGURES:
        return
    terminalreporter.write_sep("-", "engram security figures")
    for name, value in sorted(FIGURES.items()):
        terminalreporter.write_line(f"{name}: {value}")
    target = os.environ.get("ENGRAM_SECURITY_FIGURES")
    if target:
        Path(target).write_text(json.dumps(FIGURES, indent=2, sort_keys=True))
