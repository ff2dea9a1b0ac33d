"""The search's reads on a Qdrant server, sent as Qdrant's own gRPC messages and decoded straight
into Engram's values.

``AsyncQdrantClient`` with ``prefer_grpc`` already talks gRPC to the server, but for every call
it builds pydantic request models, converts them to protobuf messages (``RestToGrpc``), and
converts each response back into pydantic models (``GrpcToRest``: a ``ScoredPoint`` or
``Record`` per point, its payload as a dict): most of a search's own CPU on the server path.
:class:`RawPoints` sends the protobuf messages that qdrant-client ships (``qdrant_client.grpc``)
(``QueryBatch`` and ``Get`` on a channel opened as the client opens its own: the same address,
TLS, options, compression and headers, the API key among them; see ``RawPoints._next``) and reads
the responses directly: a hit becomes its id string, score, payload dict (only the fields asked for:
``with_payload`` include lists) and, when asked, a float32 vector, each read only where it is used.

The responses of ``QueryBatch`` and ``Get`` are parsed as lighter twins of Qdrant's messages
(:data:`LITE_POOL`: the same wire format, read differently): a payload map's values stay as their
encoded ``Value`` bytes, decoded only for the fields read (:func:`value_of`: the common kinds
straight from the bytes, any other through ``Value`` and ``value_to_json``), and a dense vector's
packed floats stay as bytes, read with ``numpy.frombuffer``. Building a ``Value`` message per
payload field and a Python float per vector component was most of the decoding's cost.

A candidate's ranking fields and cue are read from one packed payload value the server store
writes beside them (:data:`PACKED_FIELD`, :func:`packed_fields`: one ``struct`` unpack and a lookup
of its strings), or, for a point without it, straight from the fields' bytes
(:func:`candidate_fields`) when its payload is as Engram writes it; any other payload is decoded in
full.

Only the search's reads and writes go this way (the candidate query, the winners' records, the cue
fallback, the collection list and specs, and the access counters' read and write: ``set_payloads``,
the messages the client builds, values by its own ``payload_to_grpc``); other writes, the write
gate's neighbour lookups and administration keep the client's own calls. The values are those the
client's conversion gives (payload values by ``qdrant_client``'s own ``value_to_json``, ids as the
server's UUID string or the number's decimal string); tests/storage/test_qdrant_server_raw.py
compares both paths on a real server.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Mapping, Sequence
from math import isfinite
from typing import Any, Final

import grpc  # grpcio ships no stubs; types-grpcio not installed
import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2
from qdrant_client import AsyncQdrantClient, models
from qdrant_client import grpc as qg
from qdrant_client.connection import parse_channel_options, parse_ssl_credentials
from qdrant_client.context_headers import get_context_headers
from qdrant_client.conversions.conversion import RestToGrpc, payload_to_grpc, value_to_json

from engram_server.adapters.storage.payload import (
    Condition,
    FilterPlan,
    IsEmpty,
    MatchAny,
    MatchValue,
    Range,
)
from engram_server.adapters.storage.qdrant_cues import LABEL_FIELD, QUESTIONS_FIELD
from engram_server.domain.model import NEVER, MemoryType, SparseVector, Vector
from engram_server.domain.ranking import NO_CUE, RescoreCue

__all__ = [
    "DENSE_VECTOR",
    "LITE_POOL",
    "NO_PAYLOAD",
    "NO_VECTORS",
    "PACKED_FIELD",
    "SERVER_CANDIDATE_FIELDS",
    "CandidateFields",
    "Hit",
    "RawPoints",
    "candidate_fields",
    "dense_of",
    "dense_query",
    "exclude",
    "grpc_filter",
    "include",
    "pack_fields",
    "packed_fields",
    "payload_of",
    "point_key",
    "prefetch",
    "query",
    "raw_points",
    "search_params",
    "set_payload",
    "sparse_query",
    "value_of",
]


def _file_proto(file: Any) -> descriptor_pb2.FileDescriptorProto:
    out = descriptor_pb2.FileDescriptorProto()
    file.CopyToProto(out)
    return out


def _lighten(messages: Any) -> None:
    """Qdrant's messages with payload values as bytes (``map<string, bytes>``: each value the
    encoded ``Value``) and dense vector data as bytes (the packed floats; wire-compatible)."""
    for m in messages:
        _lighten(m.nested_type)
        if m.name == "PayloadEntry" and m.options.map_entry:
            for f in m.field:
                if f.name == "value":
                    f.type = descriptor_pb2.FieldDescriptorProto.TYPE_BYTES
                    f.ClearField("type_name")
        if m.name in ("DenseVector", "VectorOutput"):
            for f in m.field:
                if f.name == "data":
                    f.type = descriptor_pb2.FieldDescriptorProto.TYPE_BYTES
                    f.label = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
                    f.options.ClearField("packed")


def _lite_pool() -> descriptor_pool.DescriptorPool:
    points = qg.ScoredPoint.DESCRIPTOR.file
    pool = descriptor_pool.DescriptorPool()
    done: set[str] = set()

    def add(file: Any) -> None:
        if file.name in done:
            return
        for dep in file.dependencies:
            add(dep)
        proto = _file_proto(file)
        if file.name == points.name:
            _lighten(proto.message_type)
            proto.ClearField("service")
        pool.Add(proto)
        done.add(file.name)

    add(timestamp_pb2.DESCRIPTOR)
    add(points)
    return pool


#: Qdrant's points messages as read here (see the module docstring); their own pool, apart from
#: qdrant-client's.
LITE_POOL: Final = _lite_pool()
_LiteQueryBatchResponse: Any = message_factory.GetMessageClass(
    LITE_POOL.FindMessageTypeByName("qdrant.QueryBatchResponse")
)
_LiteGetResponse: Any = message_factory.GetMessageClass(LITE_POOL.FindMessageTypeByName("qdrant.GetResponse"))

#: One hit of a query as the server sent it (a ``ScoredPoint`` of :data:`LITE_POOL`):
#: ``point_key(h.id)``, ``h.score``, ``payload_of(h.payload)`` and ``dense_of(h)`` read it (each
#: only where it is used).
Hit = Any

_DOUBLE: Final = struct.Struct("<d").unpack_from
_NULL: Final = b"\x08\x00"
_TRUE: Final = b"\x28\x01"
_FALSE: Final = b"\x28\x00"
_EMPTY_STRUCT: Final = b"\x32\x00"


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """The varint at ``at`` and the offset after it."""
    out = shift = 0
    while True:
        byte = data[at]
        at += 1
        out |= (byte & 0x7F) << shift
        if byte < 0x80:
            return out, at
        shift += 7


def _strings(data: bytes) -> list[str] | None:
    """The list a ``list_value`` encodes when each of its values is a string (or it is empty);
    None for anything else."""
    size, at = _varint(data, 1)
    end = at + size
    if end != len(data):
        return None
    return _string_items(data, at, end)


def _string_items(data: bytes, at: int, end: int) -> list[str] | None:
    """The strings of the ``ListValue.values`` items in ``data[at:end]``; None when one is not a
    string."""
    out: list[str] = []
    while at < end:
        if data[at] != 0x0A:  # ListValue.values (field 1)
            return None
        size, at = _varint(data, at + 1)
        item_end = at + size
        if item_end > end or data[at] != 0x22:
            return None
        size, at = _varint(data, at + 1)
        if at + size != item_end:
            return None
        out.append(data[at:item_end].decode())
        at = item_end
    return out


def _string_struct(data: bytes) -> dict[str, str] | None:
    """The object a ``struct_value`` encodes when each of its values is a string (a memory's
    metadata); None for anything else."""
    size, at = _varint(data, 1)
    end = at + size
    if end != len(data):
        return None
    out: dict[str, str] = {}
    while at < end:
        if data[at] != 0x0A:  # Struct.fields (field 1): a map entry
            return None
        size, at = _varint(data, at + 1)
        entry_end = at + size
        if data[at] != 0x0A:  # its key (field 1; an empty key is not encoded: not read here)
            return None
        size, at = _varint(data, at + 1)
        key = data[at : at + size].decode()
        at += size
        if data[at] != 0x12:  # its value (field 2)
            return None
        size, at = _varint(data, at + 1)
        if at + size != entry_end or data[at] != 0x22:
            return None
        size, at = _varint(data, at + 1)
        if at + size != entry_end:
            return None
        out[key] = data[at:entry_end].decode()
        at = entry_end
    return out


def value_of(data: bytes) -> Any:
    """One payload value from its encoded ``Value`` bytes: what ``value_to_json`` gives of the
    ``Value`` they encode. A string, a finite double, an integer, a boolean, null, a list of
    strings or an object of strings as the server encodes them are read straight from the bytes;
    anything else (other lists and objects, non-finite doubles, any other encoding) through
    ``Value`` and ``value_to_json``."""
    try:
        tag = data[0]
        if tag == 0x22:  # string_value (field 4, length-delimited)
            size, at = (data[1], 2) if data[1] < 0x80 else _varint(data, 1)
            if size + at == len(data):
                return data[at:].decode()
        elif tag == 0x11:  # double_value (field 2, fixed64)
            if len(data) == 9:
                number = _DOUBLE(data, 1)[0]
                if math.isfinite(number):
                    return number
        elif tag == 0x18:  # integer_value (field 3, varint; negatives in ten bytes)
            number, at = _varint(data, 1)
            if at == len(data):
                return number - (1 << 64) if number >= 1 << 63 else number
        elif tag == 0x3A:  # list_value (field 7): a list of strings (tags, ids) read here
            strings = _strings(data)
            if strings is not None:
                return strings
        elif tag == 0x32:  # struct_value (field 6): an object of strings (metadata) read here
            if data == _EMPTY_STRUCT:
                return {}
            strings_of = _string_struct(data)
            if strings_of is not None:
                return strings_of
        elif data == _NULL:
            return None
        elif data == _TRUE:
            return True
        elif data == _FALSE:
            return False
    except IndexError:  # empty or cut short: as the message parser sees it
        pass
    return value_to_json(qg.Value.FromString(data))


#: Every payload field.
ALL_PAYLOAD: Final = qg.WithPayloadSelector(enable=True)
#: No payload field.
NO_PAYLOAD: Final = qg.WithPayloadSelector(enable=False)
#: No vector.
NO_VECTORS: Final = qg.WithVectorsSelector(enable=False)
#: The dense (unnamed) vector only.
DENSE_VECTOR: Final = qg.WithVectorsSelector(include=qg.VectorsSelector(names=[""]))


def raw_points(client: AsyncQdrantClient) -> RawPoints | None:
    """The raw gRPC reads on ``client``'s own channel; None when the client does not talk gRPC to
    a server (local mode, or ``prefer_grpc`` off: its calls are used as they are)."""
    remote = getattr(client, "_client", None)
    if remote is None or not getattr(remote, "_prefer_grpc", False) or not hasattr(remote, "grpc_points"):
        return None
    if getattr(remote, "_auth_token_provider", None) is not None:
        return None  # its tokens are added by the client's interceptor only
    return RawPoints(remote)


def exclude(fields: Sequence[str]) -> qg.WithPayloadSelector:
    """A ``with_payload`` selector of every field but these."""
    return qg.WithPayloadSelector(exclude=qg.PayloadExcludeSelector(fields=list(fields)))


def include(fields: Sequence[str]) -> qg.WithPayloadSelector:
    """A ``with_payload`` selector of only these fields."""
    return qg.WithPayloadSelector(include=qg.PayloadIncludeSelector(fields=list(fields)))


def search_params(params: models.SearchParams | None) -> qg.SearchParams | None:
    """The store's search params as the message the client would send."""
    return None if params is None else RestToGrpc.convert_search_params(params)


def point_key(pid: Any) -> str:
    """A point id as the client gives it, as a string: the UUID, or the number in decimal."""
    return pid.uuid or str(pid.num)  # (a UUID is never empty)


def _string_bytes(text: str) -> bytes:
    """A string value's bytes as the server encodes them (``Value.string_value``)."""
    return qg.Value(string_value=text).SerializeToString()


#: A memory type's value bytes → the type (the only encodings ``_text`` reads as a known type).
_TYPES: Final[dict[bytes, MemoryType]] = {_string_bytes(t.value): t for t in MemoryType}
#: A small integer's value bytes (tag and one varint byte) → the integer as a float.
_LEVELS: Final[dict[bytes, float]] = {bytes((0x18, i)): float(i) for i in range(0x80)}
#: Value bytes → the string they hold (the few scripts and labels: one string object each).
_STRINGS: dict[bytes, str] = {}
#: (questions share, label) value bytes → the cue they give (the few distinct cues).
_CUES: dict[tuple[bytes, bytes | None], RescoreCue] = {}
_SHARED_MAX: Final = 4096
#: ``valid_until`` of a memory that never expires, as the server encodes it.
_NEVER_BYTES: Final = qg.Value(double_value=NEVER).SerializeToString()


def _text(data: bytes) -> str | None:
    """A string value from its bytes; None when they encode anything else (or a long string)."""
    if data[0] == 0x22 and len(data) > 1 and data[1] < 0x80 and data[1] + 2 == len(data):
        return data[2:].decode()
    return None


def _shared_text(data: bytes) -> str | None:
    """``_text`` of a value that recurs (a script, a label): one string object per value."""
    text = _STRINGS.get(data)
    if text is None:
        text = _text(data)
        if text is not None and len(_STRINGS) < _SHARED_MAX:
            _STRINGS[data] = text
    return text


def _number(data: bytes) -> float | None:
    """A finite double or an integer value from its bytes, as a float; None otherwise."""
    tag = data[0]
    if tag == 0x11 and len(data) == 9:
        number: float = _DOUBLE(data, 1)[0]
        return number if math.isfinite(number) else None
    if tag == 0x18 and len(data) == 2 and data[1] < 0x80:
        return float(data[1])
    return None


def _cue(share_data: bytes, label_data: bytes | None) -> RescoreCue | None:
    """The stored cue of a questions share and a label (present, not null); None when either is
    not as Engram writes it."""
    share = _number(share_data)
    if share is None:
        return None
    if label_data is None or label_data == _NULL:
        return NO_CUE if share == 0.0 else RescoreCue(None, share)
    label = _shared_text(label_data)
    return None if label is None else RescoreCue(label, share)


#: What ranking reads of a candidate on the server path, in order: its type, importance,
#: ``created_at``, ``valid_until``, script tag, and stored rescoring cue (None when it has none).
CandidateFields = tuple[MemoryType, float, float, float, str, RescoreCue | None]

#: The payload fields :func:`candidate_fields` reads (the ranking fields, the cue's two).
SERVER_CANDIDATE_FIELDS: Final = (
    "type",
    "importance",
    "created_at",
    "valid_until",
    "script",
    QUESTIONS_FIELD,
    LABEL_FIELD,
)


def candidate_fields(payload: Mapping[str, bytes]) -> CandidateFields | None:
    """A candidate's ranking fields and stored rescoring cue straight from its payload map (of
    :data:`LITE_POOL`): what ``rank_fields(key, payload_of(payload), ...)[:5]`` and
    ``stored_cue(payload_of(payload))`` give, for payloads as Engram writes them (a known type, a
    small integer importance, finite numbers, short strings). None for any other payload: the
    caller decodes it in full (and reports what is wrong with it). The values that recur (types,
    importances, scripts, cues) are looked up by their bytes. (Whether the point is current is
    not read: the search's filter asks the node for current points only.)"""
    get = payload.get
    kind = _TYPES.get(get("type", b""))
    level = _LEVELS.get(get("importance", b""))
    if kind is None or level is None:
        return None
    # (``_number`` inline for the doubles Engram writes: a call per field costs more than the read)
    created_data = get("created_at", b"")
    created: float | None
    if len(created_data) == 9 and created_data[0] == 0x11:
        created = _DOUBLE(created_data, 1)[0]
        if created - created != 0.0:  # (not finite: inf - inf and nan - nan are nan)
            return None
    else:
        created = _number(created_data) if created_data else None
    data = get("valid_until")
    until: float | None
    if data is None or data == _NEVER_BYTES:
        until = NEVER
    elif len(data) == 9 and data[0] == 0x11:
        until = _DOUBLE(data, 1)[0]
        if until - until != 0.0:
            return None
    else:
        until = _number(data) if data else None
    data = get("script")
    script: str | None
    if data is None or data == _NULL:
        script = ""
    else:
        script = _STRINGS.get(data)
        if script is None:
            script = _shared_text(data) if data else None
    if created is None or until is None or script is None:
        return None
    share_data = get(QUESTIONS_FIELD)
    cue: RescoreCue | None = None
    if share_data is not None and share_data != _NULL:
        label_data = get(LABEL_FIELD)
        cue_key = (share_data, label_data)
        cue = _CUES.get(cue_key)
        if cue is None:
            try:
                cue = _cue(share_data, label_data)
            except IndexError:  # an empty value: the general decoding refuses it
                return None
            if cue is None:
                return None
            if len(_CUES) < _SHARED_MAX:
                _CUES[cue_key] = cue
    return kind, level, created, until, script, cue


#: The payload field that holds a point's :data:`CandidateFields` in one value, written by the
#: server store beside the fields it is made of (:func:`pack_fields`): a list of four numbers,
#: importance, ``created_at``, ``valid_until`` and the cue's questions share (-1 when the point has
#: no stored cue), then strings: the type, the script tag and, when the cue has one, its label.
#: The candidate query reads this one field instead of the seven (:func:`packed_fields`).
PACKED_FIELD: Final = "ranking"

#: The packed value's four numbers as the server encodes them: a list item each (``0x0A``, its
#: size 9) holding a ``double_value`` (``0x11`` and 8 bytes).
_PACKED_NUMBERS: Final = struct.Struct("<3sd3sd3sd3sd")
_PACKED_ITEM: Final = b"\x0a\x09\x11"
#: The packed value's strings (type, script, label) as their bytes → what they give (few distinct).
_PACKED_TAILS: dict[bytes, tuple[MemoryType, str, str | None]] = {}
#: (questions share, label) → the cue (the few distinct cues).
_PACKED_CUES: dict[tuple[float, str | None], RescoreCue] = {}
_TYPE_OF_NAME: Final[dict[str, MemoryType]] = {t.value: t for t in MemoryType}


def pack_fields(row: CandidateFields) -> list[Any] | None:
    """The :data:`PACKED_FIELD` value of a point whose candidate fields are ``row`` (None when
    they cannot be packed: a number that is not finite, a negative questions share)."""
    kind, importance, created, until, script, cue = row
    share = -1.0 if cue is None else float(cue.question_share)
    numbers = [float(importance), float(created), float(until), share]
    if not all(math.isfinite(x) for x in numbers) or (cue is not None and share < 0.0):
        return None
    out: list[Any] = [*numbers, kind.value, script]
    if cue is not None and cue.label is not None:
        out.append(cue.label)
    return out


def _packed_tail(data: bytes) -> tuple[MemoryType, str, str | None] | None:
    """The strings of a packed value (its list items after the numbers), or None."""
    out = _string_items(data, 0, len(data))
    if out is None:
        return None
    kind = _TYPE_OF_NAME.get(out[0]) if len(out) in (2, 3) else None
    if kind is None:
        return None
    return kind, out[1], out[2] if len(out) == 3 else None


def packed_fields(payload: Mapping[str, bytes]) -> CandidateFields | None:
    """A candidate's fields from its :data:`PACKED_FIELD` value (of :data:`LITE_POOL`): what
    :func:`candidate_fields` gives of the fields it packs. None when the payload has no packed
    value as the store writes it (absent, null, any other layout): the caller reads the fields
    themselves."""
    data = payload.get(PACKED_FIELD)
    if data is None or len(data) < 48 or data[0] != 0x3A:
        return None
    try:
        size, at = (data[1], 2) if data[1] < 0x80 else _varint(data, 1)
        if at + size != len(data):
            return None
        item1, importance, item2, created, item3, until, item4, share = _PACKED_NUMBERS.unpack_from(data, at)
        if not item1 == item2 == item3 == item4 == _PACKED_ITEM:
            return None
        total = importance + created + until + share
        if total - total != 0.0:  # (one not finite, or too large to add: read the fields)
            return None
        tail = data[at + 44 :]
        names = _PACKED_TAILS.get(tail)
        if names is None:
            names = _packed_tail(tail)
            if names is None:
                return None
            if len(_PACKED_TAILS) < _SHARED_MAX:
                _PACKED_TAILS[tail] = names
    except (IndexError, UnicodeDecodeError):  # cut short, or not text
        return None
    kind, script, label = names
    if share < 0.0:
        return kind, importance, created, until, script, None
    cue = _PACKED_CUES.get((share, label))
    if cue is None:
        cue = NO_CUE if share == 0.0 and label is None else RescoreCue(label, share)
        if len(_PACKED_CUES) < _SHARED_MAX:
            _PACKED_CUES[(share, label)] = cue
    return kind, importance, created, until, script, cue


def payload_of(payload: Mapping[str, bytes]) -> dict[str, Any]:
    """A point's payload map (of :data:`LITE_POOL`: values as bytes) as a dict, each value as
    qdrant-client decodes it. (Short strings and finite doubles, most of a record's fields, are
    read inline: ``value_of`` gives the same.)"""
    out: dict[str, Any] = {}
    for key in payload:  # (a map's ``items()`` is the generic view: a lookup per key in Python)
        data = payload[key]
        size = len(data)
        if size > 1:
            tag = data[0]
            if tag == 0x22 and data[1] + 2 == size and data[1] < 0x80:
                out[key] = data[2:].decode()
                continue
            if tag == 0x11 and size == 9:
                number = _DOUBLE(data, 1)[0]
                if isfinite(number):
                    out[key] = number
                    continue
        out[key] = value_of(data)
    return out


def fields_of(payload: Mapping[str, bytes], names: Sequence[str]) -> dict[str, Any]:
    """Only these fields of a payload map (those present), as ``payload_of`` decodes them."""
    out: dict[str, Any] = {}
    get = payload.get
    for name in names:
        data = get(name)
        if data is not None:
            out[name] = value_of(data)
    return out


def dense_of(hit: Any) -> Vector | None:
    """The dense vector of a hit (the unnamed one of named vectors), as float32; None when the
    query asked for none."""
    if not hit.HasField("vectors"):
        return None
    vectors = hit.vectors
    out = (
        vectors.vectors.vectors[""] if vectors.WhichOneof("vectors_options") == "vectors" else vectors.vector
    )
    data = out.dense.data if out.WhichOneof("vector") == "dense" else out.data
    return np.frombuffer(data, dtype="<f4").astype(np.float32)


def _condition(c: Condition) -> qg.Condition:
    if isinstance(c, IsEmpty):
        return qg.Condition(is_empty=qg.IsEmptyCondition(key=c.key))
    if isinstance(c, MatchValue):
        return qg.Condition(field=qg.FieldCondition(key=c.key, match=qg.Match(keyword=c.value)))
    if isinstance(c, MatchAny):
        return qg.Condition(
            field=qg.FieldCondition(
                key=c.key, match=qg.Match(keywords=qg.RepeatedStrings(strings=list(c.values)))
            )
        )
    if isinstance(c, Range):
        return qg.Condition(
            field=qg.FieldCondition(key=c.key, range=qg.Range(gte=c.gte, gt=c.gt, lte=c.lte, lt=c.lt))
        )
    raise TypeError(f"unknown condition {c!r}")


def grpc_filter(plan: FilterPlan) -> qg.Filter | None:
    """A filter plan as Qdrant's gRPC ``Filter`` (None when it has no condition): the message the
    client sends for ``QdrantStore``'s ``models.Filter`` of the same plan."""
    if not plan.must:
        return None
    return qg.Filter(must=[_condition(c) for c in plan.must])


def dense_query(vector: Sequence[float]) -> qg.Query:
    return qg.Query(nearest=qg.VectorInput(dense=qg.DenseVector(data=vector)))


def sparse_query(sparse: SparseVector) -> qg.Query:
    return qg.Query(
        nearest=qg.VectorInput(
            sparse=qg.SparseVector(indices=list(sparse.indices), values=list(sparse.values))
        )
    )


class RawPoints:
    """The search's reads on a Qdrant server, on a gRPC channel opened as the client opens its own."""

    def __init__(self, remote: Any) -> None:
        self._remote = remote  # qdrant_client's AsyncQdrantRemote
        self._headers: tuple[tuple[str, str], ...] = tuple(remote._grpc_headers)
        self._channel: grpc.aio.Channel | None = None
        self._calls: tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]] | None = None

    @property
    def _timeout(self) -> int:
        return int(self._remote._timeout)

    def _next(self) -> tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]]:
        """(QueryBatch, Get) answering messages of :data:`LITE_POOL`, and UpdateBatch, on a channel of this
        store's own, opened on first use (in the running event loop) the way the client opens its
        own (the same address, TLS and its certificates, options and compression). The client's
        channels carry a Python interceptor that adds its headers to every call (an extra task and
        several awaits per call); here the same headers (the API key among them) are passed with
        each call (``_metadata``)."""
        calls = self._calls
        if calls is None:
            remote = self._remote
            options = dict(remote._grpc_options)
            credentials = parse_ssl_credentials(options)  # (takes the certificates out)
            target = f"{remote._host}:{remote._grpc_port}"
            channel_options = parse_channel_options(options)
            if remote._https:
                channel = grpc.aio.secure_channel(
                    target,
                    grpc.ssl_channel_credentials(**credentials),
                    channel_options,
                    remote._grpc_compression,
                )
            else:
                channel = grpc.aio.insecure_channel(target, channel_options, remote._grpc_compression)
            self._channel = channel
            calls = self._calls = (
                channel.unary_unary(
                    "/qdrant.Points/QueryBatch",
                    request_serializer=qg.QueryBatchPoints.SerializeToString,
                    response_deserializer=_LiteQueryBatchResponse.FromString,
                ),
                channel.unary_unary(
                    "/qdrant.Points/Get",
                    request_serializer=qg.GetPoints.SerializeToString,
                    response_deserializer=_LiteGetResponse.FromString,
                ),
                channel.unary_unary(
                    "/qdrant.Points/UpdateBatch",
                    request_serializer=qg.UpdateBatchPoints.SerializeToString,
                    response_deserializer=qg.UpdateBatchResponse.FromString,
                ),
            )
        return calls

    def _metadata(self) -> tuple[tuple[str, str], ...]:
        """The headers the client's interceptor adds to each of its calls (its own, fixed when it
        was made, then those of ``qdrant_client.context_headers``, usually none)."""
        context = get_context_headers()
        return (*self._headers, *context.items()) if context else self._headers

    async def close(self) -> None:
        channel, self._channel, self._calls = self._channel, None, None
        if channel is not None:
            await channel.close()

    async def query_batch(self, collection: str, queries: Sequence[qg.QueryPoints]) -> list[Sequence[Hit]]:
        """One ``QueryBatch`` call; per query its hits, best first (undecoded: see ``Hit``)."""
        response = await self._next()[0](
            qg.QueryBatchPoints(collection_name=collection, query_points=queries),
            timeout=self._timeout,
            metadata=self._metadata(),
        )
        return [batch.result for batch in response.result]

    async def get(
        self, collection: str, ids: Sequence[str], with_payload: qg.WithPayloadSelector = ALL_PAYLOAD
    ) -> list[tuple[str, dict[str, Any]]]:
        """The points of ``ids`` that exist (canonical UUID strings), with their payloads."""
        response = await self._next()[1](
            qg.GetPoints(
                collection_name=collection,
                ids=[qg.PointId(uuid=i) for i in ids],
                with_payload=with_payload,
                with_vectors=NO_VECTORS,
            ),
            timeout=self._timeout,
            metadata=self._metadata(),
        )
        return [(point_key(r.id), payload_of(r.payload)) for r in response.result]

    async def set_payloads(self, collection: str, payloads: Mapping[str, dict[str, Any]]) -> None:
        """One ``UpdateBatch`` (``wait``) setting each point's payload fields: the message the
        client sends for ``batch_update_points`` of one ``SetPayloadOperation`` per point, the
        values converted by the client's own ``payload_to_grpc``."""
        await self._next()[2](
            qg.UpdateBatchPoints(
                collection_name=collection,
                wait=True,
                operations=[set_payload(key, payload) for key, payload in payloads.items()],
            ),
            timeout=self._timeout,
            metadata=self._metadata(),
        )

    async def collection_metadata(self, collection: str) -> dict[str, Any] | None:
        """The collection's metadata as the client's ``get_collection`` gives it
        (``config.metadata``: None when it has none); raises ``NotFound`` when there is no such
        collection."""
        response = await self._remote.grpc_collections.Get(
            qg.GetCollectionInfoRequest(collection_name=collection), timeout=self._timeout
        )
        metadata = response.result.config.metadata
        return {key: value_to_json(metadata[key]) for key in metadata} if len(metadata) > 0 else None

    async def collection_names(self) -> list[str]:
        """Every collection's name on the server."""
        response = await self._remote.grpc_collections.List(
            qg.ListCollectionsRequest(), timeout=self._timeout
        )
        return [c.name for c in response.collections]


def set_payload(key: str, payload: dict[str, Any]) -> qg.PointsUpdateOperation:
    """Setting ``payload``'s fields on the point ``key`` (a UUID string): what the client's
    ``RestToGrpc`` makes of ``SetPayloadOperation(set_payload=SetPayload(payload, points=[key]))``."""
    return qg.PointsUpdateOperation(
        set_payload=qg.PointsUpdateOperation.SetPayload(
            payload=payload_to_grpc(payload),
            points_selector=qg.PointsSelector(points=qg.PointsIdsList(ids=[qg.PointId(uuid=key)])),
        )
    )


def query(
    collection: str,
    vector: qg.Query,
    limit: int,
    *,
    flt: qg.Filter | None,
    with_payload: qg.WithPayloadSelector,
    with_vectors: qg.WithVectorsSelector,
    params: qg.SearchParams | None = None,
    using: str | None = None,
    prefetch: qg.PrefetchQuery | None = None,
) -> qg.QueryPoints:
    """One query of a ``QueryBatch`` on ``collection`` (as the client builds it); with ``prefetch``,
    ``vector`` scores the points that query finds (``filter`` is the prefetch's)."""
    return qg.QueryPoints(
        collection_name=collection,
        prefetch=None if prefetch is None else [prefetch],
        query=vector,
        using=using,
        filter=flt,
        params=params,
        limit=limit,
        with_payload=with_payload,
        with_vectors=with_vectors,
    )


def prefetch(
    vector: qg.Query, limit: int, *, flt: qg.Filter | None, using: str | None = None
) -> qg.PrefetchQuery:
    """A prefetch query (as the client builds one)."""
    return qg.PrefetchQuery(query=vector, using=using, filter=flt, limit=limit)
