"""HTTP routes derived from the ``google.api.http`` annotations of a gRPC service descriptor, and
the transcoding of an HTTP request (path variables, query parameters, JSON body) into the RPC's
request message with the standard proto3 JSON mapping (``google.protobuf.json_format``).

Nothing here is written per RPC: add an RPC with an annotation and it has a route.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from google.api import annotations_pb2, http_pb2
from google.protobuf import json_format, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor, ServiceDescriptor
from google.protobuf.message import Message

_VARIABLE = re.compile(r"\{([a-zA-Z_][\w.]*)(?:=([^}]*))?\}")


class TranscodeError(ValueError):
    """The HTTP request does not map onto the RPC's request message."""

    def __init__(self, field: str, description: str) -> None:
        super().__init__(f"{field}: {description}")
        self.field = field
        self.description = description


@dataclass(frozen=True)
class Binding:
    """One HTTP verb + path template bound to one RPC."""

    method: MethodDescriptor
    verb: str
    template: str
    body: str  # "" (no body), "*" (the whole request) or a top-level field name
    pattern: re.Pattern[str]
    variables: tuple[str, ...]  # field paths, in the order of the pattern's groups

    @property
    def full_method(self) -> str:
        return f"/{self.method.containing_service.full_name}/{self.method.name}"

    def match(self, path: str) -> dict[str, str] | None:
        m = self.pattern.fullmatch(path)
        if m is None:
            return None
        return {name: unquote(value) for name, value in zip(self.variables, m.groups(), strict=True)}


def compile_template(template: str) -> tuple[re.Pattern[str], tuple[str, ...]]:
    """``/v1/collections/{collection}/memories/{id}`` → a regex with one group per variable.

    ``{x}`` and ``{x=*}`` match one path segment; ``{x=**}`` matches the rest of the path. A trailing
    ``:verb`` is literal.
    """
    regex, names, last = [], [], 0
    for m in _VARIABLE.finditer(template):
        regex.append(re.escape(template[last : m.start()]))
        sub = m.group(2) or "*"
        if sub == "*":
            regex.append("([^/]+)")
        elif sub == "**":
            regex.append("(.+)")
        else:
            raise ValueError(f"unsupported path template segment {m.group(0)!r} in {template!r}")
        names.append(m.group(1))
        last = m.end()
    regex.append(re.escape(template[last:]))
    return re.compile("".join(regex)), tuple(names)


def bindings_of(service: ServiceDescriptor) -> list[Binding]:
    """Every (verb, template) of every annotated method, additional bindings included."""
    out: list[Binding] = []
    for method in service.methods:
        options = method.GetOptions()
        if not options.HasExtension(annotations_pb2.http):
            continue
        rule: http_pb2.HttpRule = options.Extensions[annotations_pb2.http]
        for r in [rule, *rule.additional_bindings]:
            kind = r.WhichOneof("pattern")
            if kind is None:
                continue
            if kind == "custom":
                verb, template = r.custom.kind.upper(), r.custom.path
            else:
                verb, template = kind.upper(), getattr(r, kind)
            pattern, variables = compile_template(template)
            out.append(Binding(method, verb, template, r.body, pattern, variables))
    return out


def message_class(descriptor: Descriptor) -> type[Message]:
    return message_factory.GetMessageClass(descriptor)


def _field(descriptor: Descriptor, name: str) -> FieldDescriptor | None:
    field = descriptor.fields_by_name.get(name)
    if field is None:
        field = next((f for f in descriptor.fields if f.json_name == name), None)
    return field


def _scalar(field: FieldDescriptor, raw: str, path: str) -> Any:
    """A query/path string as the field's JSON value (json_format then checks and converts it)."""
    if field.type == FieldDescriptor.TYPE_BOOL:
        if raw.lower() in {"true", "1"}:
            return True
        if raw.lower() in {"false", "0", ""}:
            return False
        raise TranscodeError(path, f"not a boolean: {raw!r}")
    if field.type == FieldDescriptor.TYPE_ENUM:
        return int(raw) if raw.lstrip("-").isdigit() else raw
    if field.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        try:
            return float(raw)
        except ValueError:
            raise TranscodeError(path, f"not a number: {raw!r}") from None
    if field.cpp_type in (
        FieldDescriptor.CPPTYPE_INT32,
        FieldDescriptor.CPPTYPE_UINT32,
        FieldDescriptor.CPPTYPE_INT64,
        FieldDescriptor.CPPTYPE_UINT64,
    ):
        try:
            return int(raw)
        except ValueError:
            raise TranscodeError(path, f"not an integer: {raw!r}") from None
    return raw  # strings, bytes (base64), and well-known types given as their JSON string


def _assign(target: dict[str, Any], descriptor: Descriptor, path: str, raw: str, *, source: str) -> None:
    """Set ``path`` (dotted, proto or JSON names) in the JSON object ``target`` of ``descriptor``."""
    parts = path.split(".")
    node, desc = target, descriptor
    for i, part in enumerate(parts):
        field = _field(desc, part)
        if field is None:
            raise TranscodeError(path, f"unknown {source} parameter {path!r} for {descriptor.name}")
        last = i == len(parts) - 1
        is_wkt = field.message_type is not None and field.message_type.full_name.startswith(
            "google.protobuf."
        )
        if not last:
            if field.message_type is None or field.is_repeated or is_wkt:
                raise TranscodeError(path, f"{part!r} is not a message field")
            node = node.setdefault(field.name, {})
            desc = field.message_type
            continue
        if field.message_type is not None and not is_wkt:
            raise TranscodeError(path, f"{source} parameter {path!r} names a message; use a JSON body")
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            raise TranscodeError(path, f"{source} parameter {path!r} is a map; use a JSON body")
        value = raw if is_wkt else _scalar(field, raw, path)
        if field.is_repeated:
            node.setdefault(field.name, []).append(value)
        else:
            if field.name in node and node[field.name] != value:
                raise TranscodeError(path, f"given twice with different values ({source})")
            node[field.name] = value


def build_request(
    binding: Binding, variables: dict[str, str], query: list[tuple[str, str]], body: bytes
) -> Message:
    """The RPC's request message from the path variables, query parameters and JSON body."""
    descriptor = binding.method.input_type
    document: dict[str, Any] = {}
    if binding.body:
        text = body.decode("utf-8", errors="strict") if body else ""
        parsed: Any = json.loads(text) if text.strip() else {}
        if binding.body == "*":
            if not isinstance(parsed, dict):
                raise TranscodeError("body", "must be a JSON object")
            document = parsed
        else:
            field = _field(descriptor, binding.body)
            assert field is not None, binding.body
            document = {field.name: parsed}
    elif body.strip():
        raise TranscodeError("body", f"{binding.verb} {binding.template} takes no body")
    # Path variables win nowhere silently: a body naming the same field differently is refused.
    flat = _flatten_names(document, descriptor)
    for path, value in variables.items():
        if not value:
            raise TranscodeError(path, "must not be empty")
        existing = flat.get(_canonical(descriptor, path))
        if existing is not None and existing != value:
            raise TranscodeError(path, f"path says {value!r} but the body says {existing!r}")
        _assign(document, descriptor, _canonical(descriptor, path), value, source="path")
    if query and binding.body == "*":
        raise TranscodeError(query[0][0], "query parameters are not accepted beside a JSON body")
    for name, value in query:
        if name in variables:
            raise TranscodeError(name, "already given in the path")
        _assign(document, descriptor, name, value, source="query")
    request = message_class(descriptor)()
    try:
        json_format.ParseDict(document, request, ignore_unknown_fields=False)
    except json_format.ParseError as exc:
        raise TranscodeError("body", str(exc)) from None
    return request


def _canonical(descriptor: Descriptor, path: str) -> str:
    parts, out = path.split("."), []
    desc: Descriptor | None = descriptor
    for part in parts:
        field = _field(desc, part) if desc is not None else None
        out.append(field.name if field is not None else part)
        desc = field.message_type if field is not None else None
    return ".".join(out)


def _flatten_names(document: dict[str, Any], descriptor: Descriptor) -> dict[str, Any]:
    """Top-level and nested scalar values of a JSON object, keyed by proto field path."""
    out: dict[str, Any] = {}

    def walk(node: dict[str, Any], desc: Descriptor, prefix: str) -> None:
        for key, value in node.items():
            field = _field(desc, key)
            if field is None:
                continue
            path = prefix + field.name
            if isinstance(value, dict) and field.message_type is not None:
                walk(value, field.message_type, path + ".")
            else:
                out[path] = value

    walk(document, descriptor, "")
    return out
