"""Property tests: random request messages for every RPC — built from the proto descriptors, with
unknown enum numbers, huge and empty strings, NaN and infinite floats, out-of-range timestamps,
oversized maps and lists — sent with random credentials. No input may produce INTERNAL or UNKNOWN,
and health stays SERVING throughout.

Bounded: ``ENGRAM_FUZZ_EXAMPLES`` examples per RPC (default 40). The number of inputs tried is
reported in the security figures."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor as d
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1.memory_service_pb2_grpc import MemoryServiceStub
from tests.security.support import add_figure, bearer, threaded_server, write_auth_file

EXAMPLES = int(os.environ.get("ENGRAM_FUZZ_EXAMPLES", "40"))
KEYS = {"admin": "fuzz-admin-key", "reader": "fuzz-reader-key"}
FORBIDDEN = (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN)
KNOWN_IDS: list[str] = []

F = d.FieldDescriptor
INT_RANGES = {
    F.TYPE_INT32: (-(2**31), 2**31 - 1),
    F.TYPE_SINT32: (-(2**31), 2**31 - 1),
    F.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    F.TYPE_INT64: (-(2**63), 2**63 - 1),
    F.TYPE_SINT64: (-(2**63), 2**63 - 1),
    F.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    F.TYPE_UINT32: (0, 2**32 - 1),
    F.TYPE_FIXED32: (0, 2**32 - 1),
    F.TYPE_UINT64: (0, 2**64 - 1),
    F.TYPE_FIXED64: (0, 2**64 - 1),
}
COLLECTIONS = ["", "default", "alpha", "alpha_reflection", "beta", "A", "x" * 65, "../etc", "*", "a b", "é"]


def _text(name: str) -> st.SearchStrategy[str]:
    plain = st.text(max_size=40)
    huge = st.builds(
        lambda c, n: c * n, st.sampled_from(["x", "é", "记", " ", "\x00"]), st.integers(0, 20_000)
    )
    if name in ("collection", "name", "collections"):
        return st.one_of(st.sampled_from(COLLECTIONS), plain)
    if name == "id":
        return st.one_of(st.sampled_from(KNOWN_IDS or ["missing"]), st.just(""), plain)
    return st.one_of(plain, huge, st.sampled_from(["", " ", "peanut allergy", "\n\t"]))


def _scalar(field: d.FieldDescriptor) -> st.SearchStrategy[Any]:
    t = field.type
    if t == F.TYPE_STRING:
        return _text(field.name)
    if t == F.TYPE_BYTES:
        return st.binary(max_size=32)
    if t == F.TYPE_BOOL:
        return st.booleans()
    if t in (F.TYPE_FLOAT, F.TYPE_DOUBLE):
        width = 32 if t == F.TYPE_FLOAT else 64
        return st.one_of(
            st.sampled_from([0.0, -0.0, 1.0, -1.0, float("nan"), float("inf"), float("-inf"), 1e-45]),
            st.floats(width=width),
        )
    if t == F.TYPE_ENUM:
        numbers = [v.number for v in field.enum_type.values]
        return st.one_of(st.sampled_from(numbers), st.integers(-(2**31), 2**31 - 1))
    lo, hi = INT_RANGES[t]
    return st.one_of(
        st.sampled_from([0, 1, -1, 5, 10, 11, 100, 1001, lo, hi]).filter(lambda v: lo <= v <= hi),
        st.integers(lo, hi),
    )


def _timestamp() -> st.SearchStrategy[dict[str, Any]]:
    seconds = st.one_of(
        st.sampled_from([0, -1, 1_767_225_600, 253_402_300_799, 253_402_300_800, -62_135_596_801]),
        st.integers(-(2**63), 2**63 - 1),
    )
    nanos = st.one_of(st.sampled_from([0, 999_999_999, 1_000_000_000, -1]), st.integers(-(2**31), 2**31 - 1))
    return st.fixed_dictionaries({}, optional={"seconds": seconds, "nanos": nanos})


def _value(field: d.FieldDescriptor, depth: int) -> st.SearchStrategy[Any]:
    if field.type == F.TYPE_MESSAGE:
        return message_dicts(field.message_type, depth + 1)
    return _scalar(field)


def message_dicts(desc: d.Descriptor, depth: int = 0) -> st.SearchStrategy[dict[str, Any]]:
    """A strategy of {field name: value} for ``desc`` (values nested the same way)."""
    if desc.full_name in ("google.protobuf.Timestamp", "google.protobuf.Duration"):
        return _timestamp()
    if depth > 3:
        return st.just({})
    optional: dict[str, st.SearchStrategy[Any]] = {}
    for field in desc.fields:
        if field.type == F.TYPE_MESSAGE and field.message_type.GetOptions().map_entry:
            key_f, value_f = (
                field.message_type.fields_by_name["key"],
                field.message_type.fields_by_name["value"],
            )
            optional[field.name] = st.one_of(
                st.dictionaries(_scalar(key_f), _value(value_f, depth), max_size=6),
                st.dictionaries(
                    st.text(min_size=1, max_size=8), _value(value_f, depth), min_size=60, max_size=80
                ),
            )
        elif field.is_repeated:
            item = _value(field, depth)
            optional[field.name] = st.one_of(
                st.lists(item, max_size=5), st.lists(item, min_size=15, max_size=40)
            )
        else:
            optional[field.name] = _value(field, depth)
    return st.fixed_dictionaries({}, optional=optional)


def fill(message: Message, values: dict[str, Any]) -> Message:
    desc = message.DESCRIPTOR
    for name, value in values.items():
        field = desc.fields_by_name[name]
        target = getattr(message, name)
        if field.type == F.TYPE_MESSAGE and field.message_type.GetOptions().map_entry:
            value_f = field.message_type.fields_by_name["value"]
            for k, v in value.items():
                if value_f.type == F.TYPE_MESSAGE:
                    fill(target[k], v)
                else:
                    target[k] = v
        elif field.is_repeated:
            for v in value:
                if field.type == F.TYPE_MESSAGE:
                    fill(target.add(), v)
                else:
                    target.append(v)
        elif field.type == F.TYPE_MESSAGE:
            target.SetInParent()
            fill(target, value)
        else:
            setattr(message, name, value)
    return message


METHODS = s.DESCRIPTOR.services_by_name["MemoryService"].methods
CREDENTIALS = st.sampled_from(["admin", "admin", "admin", "reader", "none", "bad"])


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[MemoryServiceStub, grpc.Channel]]:
    root = tmp_path_factory.mktemp("fuzz")
    auth_file = write_auth_file(
        root / "auth.json",
        {
            "admin": {"key": KEYS["admin"], "grants": {"*": "admin"}},
            "reader": {"key": KEYS["reader"], "grants": {"alpha": "read", "default": "read"}},
        },
    )
    with (
        threaded_server(
            root / "data", auth_file=auth_file, rate_limit_rps=0.0, auth_failure_rps=0.0
        ) as server,
        grpc.insecure_channel(server.address) as channel,
    ):
        stub = MemoryServiceStub(channel)
        for text, coll in (("The user is allergic to peanuts.", "alpha"), ("Frank likes short commits.", "")):
            added = stub.AddMemory(
                s.AddMemoryRequest(content=text, collection=coll), metadata=bearer(KEYS["admin"])
            )
            KNOWN_IDS.append(added.memory.id)
        yield stub, channel


def _credentials(who: str) -> tuple[tuple[str, str], ...]:
    return bearer({"admin": KEYS["admin"], "reader": KEYS["reader"], "bad": "wrong", "none": None}[who])


def _healthy(channel: grpc.Channel) -> None:
    answer = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=30)
    assert answer.status == health_pb2.HealthCheckResponse.SERVING


@pytest.mark.parametrize("method", [m.name for m in METHODS])
def test_no_input_is_internal_or_unknown(method: str, live: tuple[MemoryServiceStub, grpc.Channel]) -> None:
    stub, channel = live
    desc = METHODS[[m.name for m in METHODS].index(method)]
    request_class = getattr(s, desc.input_type.name)
    rpc = getattr(stub, method)
    codes: dict[str, int] = {}

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=False,
        database=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
        ],
    )
    @given(values=message_dicts(desc.input_type), who=CREDENTIALS)
    def probe(values: dict[str, Any], who: str) -> None:
        request = fill(request_class(), values)
        add_figure("hostile inputs tried", 1)
        try:
            if desc.client_streaming:  # (ImportMemories) the request as a stream of one message
                rpc(iter([request]), metadata=_credentials(who), timeout=60)
            elif desc.server_streaming:  # (ExportMemories) read the whole stream
                list(rpc(request, metadata=_credentials(who), timeout=60))
            else:
                rpc(request, metadata=_credentials(who), timeout=60)
            code = grpc.StatusCode.OK
        except grpc.RpcError as exc:
            code = exc.code()  # type: ignore[attr-defined]
            assert code not in FORBIDDEN, f"{method} {code}: {exc.details()} for {request!r}"  # type: ignore[attr-defined]
        codes[code.name] = codes.get(code.name, 0) + 1

    probe()
    _healthy(channel)
    assert codes, "no example ran"
