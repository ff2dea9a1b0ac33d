"""Generate docs/reference/api.md from the comments in proto/engram/v1/*.proto.

    python scripts/gen_api_docs.py            # (re)generate in place
    python scripts/gen_api_docs.py --check    # fail if the committed page differs

protoc (grpcio-tools, pinned) compiles the protos with --include_source_info into a
FileDescriptorSet; the page lists every service, method, message, field, enum and value with
the comment written above it in the proto. No description is kept by hand.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

from google.protobuf import descriptor_pb2

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
TARGET = ROOT / "docs" / "reference" / "api.md"
# The same comments as data, for the OpenAPI document the HTTP gateway serves (descriptions).
DESCRIPTIONS = ROOT / "engram_server" / "api" / "http" / "descriptions.json"
PACKAGE = "engram.v1"

# Field numbers of the descriptor messages, as used in SourceCodeInfo.Location.path.
FILE_MESSAGE, FILE_ENUM, FILE_SERVICE = 4, 5, 6
MESSAGE_FIELD, MESSAGE_NESTED, MESSAGE_ENUM = 2, 3, 4
ENUM_VALUE = 2
SERVICE_METHOD = 2

SCALARS = {
    descriptor_pb2.FieldDescriptorProto.TYPE_DOUBLE: "double",
    descriptor_pb2.FieldDescriptorProto.TYPE_FLOAT: "float",
    descriptor_pb2.FieldDescriptorProto.TYPE_INT64: "int64",
    descriptor_pb2.FieldDescriptorProto.TYPE_UINT64: "uint64",
    descriptor_pb2.FieldDescriptorProto.TYPE_INT32: "int32",
    descriptor_pb2.FieldDescriptorProto.TYPE_FIXED64: "fixed64",
    descriptor_pb2.FieldDescriptorProto.TYPE_FIXED32: "fixed32",
    descriptor_pb2.FieldDescriptorProto.TYPE_BOOL: "bool",
    descriptor_pb2.FieldDescriptorProto.TYPE_STRING: "string",
    descriptor_pb2.FieldDescriptorProto.TYPE_BYTES: "bytes",
    descriptor_pb2.FieldDescriptorProto.TYPE_UINT32: "uint32",
    descriptor_pb2.FieldDescriptorProto.TYPE_SFIXED32: "sfixed32",
    descriptor_pb2.FieldDescriptorProto.TYPE_SFIXED64: "sfixed64",
    descriptor_pb2.FieldDescriptorProto.TYPE_SINT32: "sint32",
    descriptor_pb2.FieldDescriptorProto.TYPE_SINT64: "sint64",
}
WELL_KNOWN = {
    ".google.protobuf.Timestamp": "[google.protobuf.Timestamp](https://protobuf.dev/reference/protobuf/google.protobuf/#timestamp)",
}

HEADER = """\
# API reference

<!-- Generated from proto/engram/v1/*.proto by scripts/gen_api_docs.py. Do not edit. -->

The contract is `proto/engram/v1/` (package `engram.v1`). This page is generated from the comments
in those files, so it says what the proto says. The server also serves `grpc.health.v1.Health`
and server reflection (`grpcurl -plaintext HOST:PORT list`). Errors, their status codes and
reasons: [Errors](errors.md).
"""


def descriptor_set() -> descriptor_pb2.FileDescriptorSet:
    import grpc_tools  # noqa: PLC0415

    include = Path(grpc_tools.__file__).parent / "_proto"
    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in PROTO_ROOT.rglob("*.proto"))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "set.pb"
        cmd = [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{PROTO_ROOT}",
            f"-I{include}",
            "--include_source_info",
            f"--descriptor_set_out={out}",
            *protos,
        ]
        subprocess.run(cmd, check=True, cwd=PROTO_ROOT)
        return descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())


class Comments:
    def __init__(self, file: descriptor_pb2.FileDescriptorProto) -> None:
        self._by_path = {tuple(loc.path): loc for loc in file.source_code_info.location}

    def get(self, *path: int) -> str:
        loc = self._by_path.get(path)
        if loc is None:
            return ""
        text = loc.leading_comments or loc.trailing_comments
        lines = [line.strip() for line in text.strip().splitlines()]
        return "\n".join(lines)


def anchor(full_name: str) -> str:
    return full_name.removeprefix(".").removeprefix(PACKAGE + ".").lower().replace(".", "")


def type_link(field: descriptor_pb2.FieldDescriptorProto) -> str:
    if field.type in SCALARS:
        return SCALARS[field.type]
    if field.type_name in WELL_KNOWN:
        return WELL_KNOWN[field.type_name]
    short = field.type_name.removeprefix("." + PACKAGE + ".")
    return f"[{short}](#{anchor(field.type_name)})"


def escape(text: str) -> str:
    """Comment text is prose, not HTML: ``<collection>`` must show as written."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):  # outside code spans only
        parts[i] = parts[i].replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts)


def one_line(text: str) -> str:
    """A comment inside a table cell: paragraphs joined, pipes escaped."""
    return escape(" ".join(part for part in text.split("\n") if part)).replace("|", "\\|")


def paragraph(text: str) -> str:
    """A comment as Markdown paragraphs (blank comment lines separate them)."""
    out: list[str] = []
    for block in text.split("\n\n"):
        out.append(" ".join(line for line in block.split("\n") if line))
    return escape("\n\n".join(p for p in out if p))


def render_enum(
    enum: descriptor_pb2.EnumDescriptorProto, full: str, comments: Comments, path: tuple[int, ...]
) -> list[str]:
    lines = [f"### {full.removeprefix(PACKAGE + '.')}", ""]
    doc = paragraph(comments.get(*path))
    if doc:
        lines += [doc, ""]
    lines += ["| value | number | description |", "|---|---|---|"]
    for i, value in enumerate(enum.value):
        lines.append(f"| `{value.name}` | {value.number} | {one_line(comments.get(*path, ENUM_VALUE, i))} |")
    return [*lines, ""]


def render_message(
    message: descriptor_pb2.DescriptorProto, full: str, comments: Comments, path: tuple[int, ...]
) -> Iterable[str]:
    if message.options.map_entry:
        return []
    lines = [f"### {full.removeprefix(PACKAGE + '.')}", ""]
    doc = paragraph(comments.get(*path))
    if doc:
        lines += [doc, ""]
    if message.field:
        lines += ["| field | type | description |", "|---|---|---|"]
        for i, field in enumerate(message.field):
            kind = type_link(field)
            if field.label == descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED:
                kind = f"repeated {kind}"
            elif field.proto3_optional:
                kind = f"optional {kind}"
            elif field.HasField("oneof_index"):
                kind = f"{kind} (oneof `{message.oneof_decl[field.oneof_index].name}`)"
            doc = one_line(comments.get(*path, MESSAGE_FIELD, i))
            lines.append(f"| `{field.name}` = {field.number} | {kind} | {doc} |")
        lines.append("")
    for i, nested in enumerate(message.nested_type):
        lines += render_message(nested, f"{full}.{nested.name}", comments, (*path, MESSAGE_NESTED, i))
    for i, enum in enumerate(message.enum_type):
        lines += render_enum(enum, f"{full}.{enum.name}", comments, (*path, MESSAGE_ENUM, i))
    return lines


def describe(files: list[descriptor_pb2.FileDescriptorProto]) -> dict[str, str]:
    """Every element's comment by its full name (``engram.v1.Memory.id``), as plain paragraphs."""
    out: dict[str, str] = {}

    def put(name: str, text: str) -> None:
        blocks = (" ".join(line for line in b.split("\n") if line) for b in text.split("\n\n"))
        text = "\n\n".join(b for b in blocks if b)
        if text:
            out[name] = text

    def enum(e: descriptor_pb2.EnumDescriptorProto, full: str, c: Comments, path: tuple[int, ...]) -> None:
        put(full, c.get(*path))
        for i, value in enumerate(e.value):
            put(f"{full}.{value.name}", c.get(*path, ENUM_VALUE, i))

    def message(m: descriptor_pb2.DescriptorProto, full: str, c: Comments, path: tuple[int, ...]) -> None:
        put(full, c.get(*path))
        for i, field in enumerate(m.field):
            put(f"{full}.{field.name}", c.get(*path, MESSAGE_FIELD, i))
        for i, nested in enumerate(m.nested_type):
            message(nested, f"{full}.{nested.name}", c, (*path, MESSAGE_NESTED, i))
        for i, e in enumerate(m.enum_type):
            enum(e, f"{full}.{e.name}", c, (*path, MESSAGE_ENUM, i))

    for file in files:
        comments = Comments(file)
        for si, service in enumerate(file.service):
            put(f"{PACKAGE}.{service.name}", comments.get(FILE_SERVICE, si))
            for mi, method in enumerate(service.method):
                put(
                    f"{PACKAGE}.{service.name}.{method.name}",
                    comments.get(FILE_SERVICE, si, SERVICE_METHOD, mi),
                )
        for i, m in enumerate(file.message_type):
            message(m, f"{PACKAGE}.{m.name}", comments, (FILE_MESSAGE, i))
        for i, e in enumerate(file.enum_type):
            enum(e, f"{PACKAGE}.{e.name}", comments, (FILE_ENUM, i))
    return dict(sorted(out.items()))


def render(files: list[descriptor_pb2.FileDescriptorProto]) -> str:
    services: list[str] = []
    messages: list[str] = []
    enums: list[str] = []
    for file in files:
        comments = Comments(file)
        for si, service in enumerate(file.service):
            services += [f"### {service.name}", "", paragraph(comments.get(FILE_SERVICE, si)), ""]
            services += ["| method | request → response | description |", "|---|---|---|"]
            for mi, method in enumerate(service.method):
                request = f"[{method.input_type.split('.')[-1]}](#{anchor(method.input_type)})"
                response = f"[{method.output_type.split('.')[-1]}](#{anchor(method.output_type)})"
                if method.client_streaming:
                    request = f"stream {request}"
                if method.server_streaming:
                    response = f"stream {response}"
                doc = one_line(comments.get(FILE_SERVICE, si, SERVICE_METHOD, mi))
                services.append(f"| `{method.name}` | {request} → {response} | {doc} |")
            services.append("")
        for i, message in enumerate(file.message_type):
            messages += render_message(message, f"{PACKAGE}.{message.name}", comments, (FILE_MESSAGE, i))
        for i, enum in enumerate(file.enum_type):
            enums += render_enum(enum, f"{PACKAGE}.{enum.name}", comments, (FILE_ENUM, i))
    parts = [HEADER, "## Services", "", *services, "## Messages", "", *messages, "## Enums", "", *enums]
    return "\n".join(parts).rstrip() + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="fail if the committed page differs")
    args = parser.parse_args()
    files = [f for f in descriptor_set().file if f.package == PACKAGE]
    outputs = {
        TARGET: render(files),
        DESCRIPTIONS: json.dumps(describe(files), indent=1, ensure_ascii=False) + "\n",
    }
    for target, text in outputs.items():
        if args.check:
            if not target.is_file() or target.read_text() != text:
                sys.exit(
                    f"{target.relative_to(ROOT)} is out of date: run `make docs` (scripts/gen_api_docs.py)"
                )
        else:
            target.write_text(text)


if __name__ == "__main__":
    main()
