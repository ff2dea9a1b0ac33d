"""Generate the Python code for proto/engram/v1 into the engram-client package.

    python scripts/gen_protos.py            # (re)generate in place
    python scripts/gen_protos.py --check    # fail if the committed code differs

The output is committed. grpcio-tools and mypy-protobuf are pinned in pyproject.toml so the
output is reproducible; the check runs in `make lint` and `make test`.
"""

from __future__ import annotations

import argparse
import filecmp
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
PACKAGE_ROOT = ROOT / "engram_client" / "src" / "engram_client"
TARGET = PACKAGE_ROOT / "proto"
PY_PREFIX = "engram_client.proto"

INIT_DOC = '"""Generated from proto/ by scripts/gen_protos.py. Do not edit."""\n'


def _generate(out: Path) -> None:
    import grpc_tools  # noqa: PLC0415

    # proto/google/api holds vendored googleapis files (HTTP annotations, for buf): their Python
    # code ships in googleapis-common-protos, so only engram/ is generated.
    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in (PROTO_ROOT / "engram").rglob("*.proto"))
    include = Path(grpc_tools.__file__).parent / "_proto"
    plugin = shutil.which("protoc-gen-mypy", path=str(Path(sys.executable).parent))
    plugin_grpc = shutil.which("protoc-gen-mypy_grpc", path=str(Path(sys.executable).parent))
    if plugin is None or plugin_grpc is None:
        sys.exit("mypy-protobuf is not installed in this environment (pip install -e '.[dev]')")
    out.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--plugin=protoc-gen-mypy={plugin}",
        f"--plugin=protoc-gen-mypy_grpc={plugin_grpc}",
        f"--python_out={out}",
        f"--mypy_out={out}",
        f"--grpc_python_out={out}",
        f"--mypy_grpc_out={out}",
        *protos,
    ]
    subprocess.run(cmd, check=True, cwd=PROTO_ROOT)
    # Generated code imports "engram.v1"; make the imports point into our package.
    for path in out.rglob("*.py*"):
        text = path.read_text()
        fixed = re.sub(r"^from engram\.v1 import", f"from {PY_PREFIX}.engram.v1 import", text, flags=re.M)
        fixed = re.sub(r"^import engram\.v1\.", f"import {PY_PREFIX}.engram.v1.", fixed, flags=re.M)
        fixed = fixed.replace(" engram.v1.", f" {PY_PREFIX}.engram.v1.") if path.suffix == ".pyi" else fixed
        if fixed != text:
            path.write_text(fixed)
    for pkg in (out, out / "engram", out / "engram" / "v1"):
        (pkg / "__init__.py").write_text(INIT_DOC)


def _same_tree(a: Path, b: Path) -> list[str]:
    diffs: list[str] = []
    names_a = {p.relative_to(a) for p in a.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    names_b = {p.relative_to(b) for p in b.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    for name in sorted(names_a ^ names_b):
        diffs.append(f"only in one tree: {name}")
    for name in sorted(names_a & names_b):
        if not filecmp.cmp(a / name, b / name, shallow=False):
            diffs.append(f"differs: {name}")
    return diffs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if the committed code is stale")
    args = parser.parse_args()
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            fresh = Path(tmp) / "proto"
            _generate(fresh)
            diffs = _same_tree(fresh, TARGET)
        if diffs:
            print("generated code is out of date; run `make proto` and commit:", *diffs, sep="\n  ")
            sys.exit(1)
        print("generated code is up to date")
        return
    if TARGET.exists():
        shutil.rmtree(TARGET)
    _generate(TARGET)
    print(f"generated into {TARGET.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
