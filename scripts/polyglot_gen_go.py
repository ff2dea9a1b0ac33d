"""Generate the Go stubs for proto/engram/v1 into clients/go/engram/v1.

    python scripts/polyglot_gen_go.py              # (re)generate in place
    python scripts/polyglot_gen_go.py --check      # fail if the committed Go code differs
    python scripts/polyglot_gen_go.py --tools-only # just install the pinned plugins

protoc is the one bundled with grpcio-tools (pinned in pyproject.toml); protoc-gen-go and
protoc-gen-go-grpc are installed with `go install` at the versions pinned below into
.tools/go/bin (cached; reinstalled when the version differs). Needs `go` on PATH.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
GO_MODULE = "github.com/engram-memory/engram/clients/go"
GO_ROOT = ROOT / "clients" / "go"
TARGET = GO_ROOT / "engram" / "v1"
GOBIN = ROOT / ".tools" / "go" / "bin"

PLUGINS = {
    # binary: (go install path, version, expected `--version` output)
    "protoc-gen-go": (
        "google.golang.org/protobuf/cmd/protoc-gen-go",
        "v1.36.12",
        "protoc-gen-go v1.36.12",
    ),
    "protoc-gen-go-grpc": (
        "google.golang.org/grpc/cmd/protoc-gen-go-grpc",
        "v1.6.0",
        "protoc-gen-go-grpc 1.6.0",
    ),
}


def install_plugins() -> dict[str, Path]:
    """Install the pinned plugins into .tools/go/bin unless already there; return their paths."""
    go = shutil.which("go")
    if go is None:
        sys.exit("go is not on PATH: install Go (https://go.dev/dl/) to generate the Go stubs")
    paths: dict[str, Path] = {}
    for binary, (pkg, version, expected) in PLUGINS.items():
        path = GOBIN / binary
        current = ""
        if path.exists():
            current = subprocess.run(
                [path, "--version"], check=False, capture_output=True, text=True
            ).stdout.strip()
        if current != expected:
            GOBIN.mkdir(parents=True, exist_ok=True)
            env = {**os.environ, "GOBIN": str(GOBIN), "GOFLAGS": "-mod=mod"}
            subprocess.run([go, "install", f"{pkg}@{version}"], check=True, env=env)
        paths[binary] = path
    return paths


def generate(out_root: Path) -> Path:
    """Generate into out_root (laid out like clients/go); return the engram/v1 directory."""
    import grpc_tools  # type: ignore[import-untyped]  # noqa: PLC0415

    plugins = install_plugins()
    include = Path(grpc_tools.__file__).parent / "_proto"
    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in (PROTO_ROOT / "engram").rglob("*.proto"))
    out_root.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--plugin=protoc-gen-go={plugins['protoc-gen-go']}",
        f"--plugin=protoc-gen-go-grpc={plugins['protoc-gen-go-grpc']}",
        f"--go_out={out_root}",
        f"--go_opt=module={GO_MODULE}",
        f"--go-grpc_out={out_root}",
        f"--go-grpc_opt=module={GO_MODULE}",
        *protos,
    ]
    subprocess.run(cmd, check=True, cwd=PROTO_ROOT)
    return out_root / "engram" / "v1"


def differences(a: Path, b: Path) -> list[str]:
    names_a = {p.relative_to(a) for p in a.rglob("*") if p.is_file()}
    names_b = {p.relative_to(b) for p in b.rglob("*") if p.is_file()} if b.exists() else set()
    out = [f"only in one tree: {name}" for name in sorted(names_a ^ names_b)]
    out += [
        f"differs: {name}"
        for name in sorted(names_a & names_b)
        if not filecmp.cmp(a / name, b / name, shallow=False)
    ]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--check", action="store_true", help="fail if the committed Go code is stale")
    group.add_argument("--tools-only", action="store_true", help="only install the pinned plugins")
    args = parser.parse_args()
    if args.tools_only:
        for binary, path in install_plugins().items():
            print(f"{binary}: {path.relative_to(ROOT)}")
        return
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(Path(tmp))
        diffs = differences(fresh, TARGET)
        if args.check:
            if diffs:
                print(
                    "Go stubs are out of date; run `python scripts/polyglot_gen_go.py` and commit:",
                    *diffs,
                    sep="\n  ",
                )
                sys.exit(1)
            print("Go stubs are up to date")
            return
        if TARGET.exists():
            shutil.rmtree(TARGET)
        shutil.copytree(fresh, TARGET)
    print(f"generated into {TARGET.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
