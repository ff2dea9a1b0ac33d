"""Generate docs/reference/config.md from engram_server/config.py.

    python scripts/gen_config_docs.py            # (re)generate in place
    python scripts/gen_config_docs.py --check    # fail if the committed page differs

The source is the one ``engram config`` prints: ``SETTINGS_DOC`` (variable, description, in that
order) and the defaults of ``Settings``; the sections are the ``# Section`` comments of the
``Settings`` class. No table is kept by hand.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engram_server import config  # noqa: E402

TARGET = ROOT / "docs" / "reference" / "config.md"
HEADER = """\
# Configuration

<!-- Generated from engram_server/config.py by scripts/gen_config_docs.py. Do not edit. -->

Every setting is an `ENGRAM_*` environment variable, read once at start-up; a bad value stops the
server with a message naming the variable. `engram config` prints every variable with its current
value (keys masked), in this order:

```bash
.venv/bin/engram config | grep -E 'ENGRAM_(HOST|PORT)='
```

`engram serve --host H --port P` overrides `ENGRAM_HOST` / `ENGRAM_PORT` for one run. The clients
(`engram-client`, `engram-mcp`) have their own variables (`ENGRAM_ADDR`, `ENGRAM_API_KEY`,
`ENGRAM_TLS*`, `ENGRAM_TIMEOUT`): see [Python client](../clients/python.md#configuration).
"""


def sections() -> dict[str, str]:
    """Field name -> the ``# Section`` comment above it in the Settings class."""
    out: dict[str, str] = {}
    current = "Other"
    for line in inspect.getsource(config.Settings).splitlines():
        comment = re.fullmatch(r"\s+# (\w[\w ()/-]*)", line)
        if comment:
            current = comment.group(1)
            continue
        field = re.match(r"\s+(\w+):", line)
        if field:
            out[field.group(1)] = current
    return out


def default_text(value: object) -> str:
    if value is None or value == "":
        return "(unset)"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`"


def linkify(text: str) -> str:
    """``docs/x/y.md`` in a description becomes a link relative to docs/reference/."""
    return re.sub(r"\bdocs/([\w/-]+\.md)\b", lambda m: f"[{Path(m.group(1)).stem}](../{m.group(1)})", text)


def cell(text: str) -> str:
    return linkify(text).replace("|", "\\|")


def render() -> str:
    defaults = config.Settings()
    section_of = sections()
    rows: dict[str, list[str]] = {}
    for name, var, description in config.SETTINGS_DOC:
        default = default_text(getattr(defaults, name))
        rows.setdefault(section_of.get(name, "Other"), []).append(
            f"| `{var}` | {default} | {cell(description)} |"
        )
    parts = [HEADER]
    for section, lines in rows.items():
        parts.append(
            f"\n## {section}\n\n| variable | default | meaning |\n|---|---|---|\n" + "\n".join(lines) + "\n"
        )
    return "".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="fail if the committed page differs")
    args = parser.parse_args()
    documented = {name for name, _, _ in config.SETTINGS_DOC}
    missing = {f.name for f in dataclasses.fields(config.Settings)} - {"extra"} - documented
    if missing:
        sys.exit(f"settings without an entry in SETTINGS_DOC: {sorted(missing)}")
    text = render()
    if args.check:
        if not TARGET.is_file() or TARGET.read_text() != text:
            sys.exit(
                f"{TARGET.relative_to(ROOT)} is out of date: run `make docs` (scripts/gen_config_docs.py)"
            )
        return
    TARGET.write_text(text)


if __name__ == "__main__":
    main()
