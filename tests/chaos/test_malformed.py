"""Item 5 of the hardening issue: request bodies that do not parse — invalid UTF-8 in a string
field, truncated or garbage bytes — answer INVALID_ARGUMENT with a short message, never UNKNOWN
with the parser's text, never a traceback, and the log line about them is rate limited.

Raw bytes over a real channel to the real server on loopback (no client-side serializer)."""

from __future__ import annotations

import logging
from pathlib import Path

import grpc
import pytest

from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_server.testing import rich, running_server
from tests.security.support import bearer, write_auth_file

SERVICE = s.DESCRIPTOR.services_by_name["MemoryService"]
METHODS = [f"/{SERVICE.full_name}/{m.name}" for m in SERVICE.methods]
#: Methods whose request has a string field 1 (content, query, id, collection, name).
STRING_FIELD_ONE = {
    f"/{SERVICE.full_name}/{m.name}"
    for m in SERVICE.methods
    if 1 in m.input_type.fields_by_number
    and m.input_type.fields_by_number[1].type == m.input_type.fields_by_number[1].TYPE_STRING
}

#: field 1, length-delimited, with invalid UTF-8 in it
BAD_UTF8 = b"\x0a\x04\xff\xfe\xfd\xfc"
BODIES = {
    "invalid utf-8 in a string field": BAD_UTF8,
    "truncated length-delimited field": b"\x0a\x10abc",
    "garbage": b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",
    "bad wire type": b"\x0f\x00",
}
ROUNDS = 5


async def _send(channel: grpc.aio.Channel, method: str, body: bytes, key: str | None) -> grpc.aio.AioRpcError:
    call = channel.unary_unary(method)  # no serializers: the bytes go as they are
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call(body, metadata=bearer(key), timeout=30)
    return caught.value


def _no_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    bad = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert not bad, [r.getMessage()[:200] for r in bad]


@pytest.mark.parametrize("auth", [False, True], ids=["auth-off", "auth-on"])
async def test_bodies_that_do_not_parse_get_invalid_argument(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, auth: bool
) -> None:
    caplog.set_level(logging.DEBUG)
    assert len(STRING_FIELD_ONE) >= 8
    overrides = {}
    key = None
    if auth:
        key = "malformed-admin"
        overrides["auth_file"] = write_auth_file(
            tmp_path / "auth.json", {"admin": {"key": key, "grants": {"*": "admin"}}}
        )
    async with running_server(tmp_path / "data", **overrides) as server:
        async with grpc.aio.insecure_channel(server.address) as channel:
            for _ in range(ROUNDS):
                for method in METHODS:
                    for name, body in BODIES.items():
                        if body is BAD_UTF8 and method not in STRING_FIELD_ONE:
                            continue
                        exc = await _send(channel, method, body, key)
                        err = rich(exc)
                        assert exc.code() is grpc.StatusCode.INVALID_ARGUMENT, (method, name, exc)
                        assert err.reason == "ERROR_REASON_INVALID_ARGUMENT"
                        assert len(err.message) < 120 and "Error" not in err.message
            if auth:  # no key: the key is refused first, the body is never looked at
                exc = await _send(channel, METHODS[0], BAD_UTF8, None)
                assert exc.code() is grpc.StatusCode.UNAUTHENTICATED
                exc = await _send(channel, METHODS[0], BAD_UTF8, "wrong-key")
                assert exc.code() is grpc.StatusCode.UNAUTHENTICATED
            # health: a malformed check is refused the same way, a good one still answers
            exc = await _send(channel, "/grpc.health.v1.Health/Check", b"\xff\xff", None)
            assert exc.code() is grpc.StatusCode.INVALID_ARGUMENT
        sent = ROUNDS * (len(METHODS) * (len(BODIES) - 1) + len(STRING_FIELD_ONE))
        assert server.guard is not None and server.guard.malformed == sent + 1
    _no_tracebacks(caplog)
    warnings = [
        r for r in caplog.records if r.name == "engram_server.api.guard" and "malformed" in r.getMessage()
    ]
    # rate limited: one line per method per interval, not one per request
    assert 1 <= len(warnings) <= len(METHODS) + 1, len(warnings)
