"""An OpenAPI 3.1 document generated from the service descriptor and its ``google.api.http``
annotations: one operation per binding, one schema per message and enum, in the proto3 JSON
mapping the gateway speaks (lowerCamelCase names, 64-bit integers as strings, enums by name,
Timestamps as RFC 3339 strings). Errors are ``google.rpc.Status``. Descriptions are the proto's own
comments, kept as data in ``descriptions.json`` by ``scripts/gen_api_docs.py``.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor, ServiceDescriptor

from engram_server.api.http.routes import Binding, bindings_of

_SCALARS: dict[int, dict[str, Any]] = {
    FieldDescriptor.TYPE_DOUBLE: {"type": "number"},
    FieldDescriptor.TYPE_FLOAT: {"type": "number"},
    FieldDescriptor.TYPE_INT64: {"type": "string", "format": "int64"},
    FieldDescriptor.TYPE_UINT64: {"type": "string", "format": "uint64"},
    FieldDescriptor.TYPE_SINT64: {"type": "string", "format": "int64"},
    FieldDescriptor.TYPE_FIXED64: {"type": "string", "format": "uint64"},
    FieldDescriptor.TYPE_SFIXED64: {"type": "string", "format": "int64"},
    FieldDescriptor.TYPE_INT32: {"type": "integer", "format": "int32"},
    FieldDescriptor.TYPE_SINT32: {"type": "integer", "format": "int32"},
    FieldDescriptor.TYPE_SFIXED32: {"type": "integer", "format": "int32"},
    FieldDescriptor.TYPE_UINT32: {"type": "integer", "format": "uint32", "minimum": 0},
    FieldDescriptor.TYPE_FIXED32: {"type": "integer", "format": "uint32", "minimum": 0},
    FieldDescriptor.TYPE_BOOL: {"type": "boolean"},
    FieldDescriptor.TYPE_STRING: {"type": "string"},
    FieldDescriptor.TYPE_BYTES: {"type": "string", "format": "byte"},
}
_WELL_KNOWN: dict[str, dict[str, Any]] = {
    "google.protobuf.Timestamp": {"type": "string", "format": "date-time"},
    "google.protobuf.Duration": {"type": "string", "pattern": r"^-?\d+(\.\d+)?s$"},
    "google.protobuf.Any": {
        "type": "object",
        "properties": {"@type": {"type": "string"}},
        "required": ["@type"],
        "additionalProperties": True,
    },
}
_STATUS = "google.rpc.Status"


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


@cache
def descriptions() -> dict[str, str]:
    """The proto comments by full name (``engram.v1.Memory.id``); generated, so never stale."""
    text = resources.files(__package__).joinpath("descriptions.json").read_text(encoding="utf-8")
    loaded: dict[str, str] = json.loads(text)
    return loaded


def _described(schema: dict[str, Any], name: str) -> dict[str, Any]:
    doc = descriptions().get(name)
    if doc:
        schema = {**schema, "description": doc}
    return schema


def _summary(doc: str) -> str:
    first = doc.split("\n\n", maxsplit=1)[0]
    end = first.find(". ")
    return first if end < 0 else first[: end + 1]


class _Schemas:
    def __init__(self) -> None:
        self.schemas: dict[str, Any] = {}

    def enum(self, enum: EnumDescriptor) -> dict[str, Any]:
        if enum.full_name not in self.schemas:
            doc = descriptions().get(enum.full_name, enum.full_name)
            values = [
                f"- `{v.name}`: {descriptions()[f'{enum.full_name}.{v.name}']}"
                for v in enum.values
                if f"{enum.full_name}.{v.name}" in descriptions()
            ]
            self.schemas[enum.full_name] = {
                "type": "string",
                "enum": [v.name for v in enum.values],
                "description": "\n\n".join(
                    [doc, "By value name (numbers are accepted on input).", "\n".join(values)]
                ).rstrip(),
            }
        return _ref(enum.full_name)

    def field(self, field: FieldDescriptor) -> dict[str, Any]:
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value = field.message_type.fields_by_name["value"]
            return {"type": "object", "additionalProperties": self._single(value)}
        single = self._single(field)
        if field.is_repeated:
            return {"type": "array", "items": single}
        return single

    def _single(self, field: FieldDescriptor) -> dict[str, Any]:
        if field.enum_type is not None:
            return self.enum(field.enum_type)
        if field.message_type is not None:
            return self.message(field.message_type)
        return dict(_SCALARS[field.type])

    def message(self, message: Descriptor) -> dict[str, Any]:
        if message.full_name in _WELL_KNOWN:
            return dict(_WELL_KNOWN[message.full_name])
        if message.full_name not in self.schemas:
            self.schemas[message.full_name] = {}  # placeholder: recursion ends here
            properties = {f.json_name: _described(self.field(f), f.full_name) for f in message.fields}
            schema: dict[str, Any] = {
                "type": "object",
                "title": message.name,
                "properties": properties,
                "additionalProperties": False,
            }
            notes = [descriptions().get(message.full_name, "")]
            oneofs = [o for o in message.oneofs if not o.name.startswith("_")]
            if oneofs:
                notes.append(
                    "; ".join(
                        f"At most one of {', '.join(f.json_name for f in o.fields)} (oneof {o.name})"
                        for o in oneofs
                    )
                    + "."
                )
            if any(notes):
                schema["description"] = "\n\n".join(n for n in notes if n)
            self.schemas[message.full_name] = schema
        return _ref(message.full_name)


def _parameters(binding: Binding, schemas: _Schemas) -> list[dict[str, Any]]:
    params: list[dict[str, Any]] = []
    request = binding.method.input_type
    for path in binding.variables:
        field = request.fields_by_name[path.split(".")[0]]
        params.append(
            _described(
                {"name": path, "in": "path", "required": True, "schema": schemas.field(field)},
                field.full_name,
            )
        )
    if binding.body == "*":
        return params
    for field in request.fields:
        if field.name in binding.variables or field.name == binding.body:
            continue
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            continue
        if field.message_type is not None and field.message_type.full_name not in _WELL_KNOWN:
            # a nested message: its scalar fields as dotted parameters (filter.minImportance)
            for sub in field.message_type.fields:
                if sub.message_type is not None and sub.message_type.full_name not in _WELL_KNOWN:
                    continue
                params.append(
                    _described(
                        {
                            "name": f"{field.json_name}.{sub.json_name}",
                            "in": "query",
                            "required": False,
                            "schema": schemas.field(sub),
                            "explode": True,
                        },
                        sub.full_name,
                    )
                )
            continue
        params.append(
            _described(
                {"name": field.json_name, "in": "query", "required": False, "schema": schemas.field(field)},
                field.full_name,
            )
        )
    return params


def openapi_document(service: ServiceDescriptor, *, version: str, title: str = "Engram") -> dict[str, Any]:
    from google.rpc import status_pb2  # noqa: PLC0415

    schemas = _Schemas()
    schemas.message(status_pb2.Status.DESCRIPTOR)
    paths: dict[str, dict[str, Any]] = {}
    bindings = bindings_of(service)
    seen: dict[str, int] = {}
    for binding in bindings:
        name = binding.method.name
        seen[name] = seen.get(name, 0) + 1
        doc = descriptions().get(binding.method.full_name, "")
        operation: dict[str, Any] = {
            "operationId": name if seen[name] == 1 else f"{name}{seen[name]}",
            "summary": _summary(doc) if doc else f"{service.full_name}.{name}",
            "description": f"{doc}\n\ngRPC: `{binding.method.full_name}`".strip(),
            "tags": [service.name],
            "parameters": _parameters(binding, schemas),
            "responses": {
                "200": {
                    "description": "OK",
                    "content": {"application/json": {"schema": schemas.message(binding.method.output_type)}},
                },
                "default": {
                    "description": "An error: google.rpc.Status with ErrorInfo (reason: an ErrorReason)",
                    "content": {"application/json": {"schema": _ref(_STATUS)}},
                },
            },
            "security": [{"bearer": []}, {"apiKey": []}, {}],
        }
        if binding.body:
            request = binding.method.input_type
            if binding.body == "*":
                body_schema = schemas.message(request)
            else:
                body_schema = schemas.field(request.fields_by_name[binding.body])
            operation["requestBody"] = {
                "required": False,
                "content": {"application/json": {"schema": body_schema}},
            }
        paths.setdefault(binding.template, {})[binding.verb.lower()] = operation
    return {
        "openapi": "3.1.0",
        "info": {
            "title": title,
            "version": version,
            "description": (
                f"HTTP/JSON transcoding of gRPC service {service.full_name}, generated from its "
                "google.api.http annotations. Bodies and answers use the proto3 JSON mapping."
            ),
        },
        "paths": paths,
        "components": {
            "schemas": schemas.schemas,
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "apiKey": {"type": "apiKey", "in": "header", "name": "x-api-key"},
            },
        },
    }
