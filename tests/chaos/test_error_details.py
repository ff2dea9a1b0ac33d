"""Item 6 of the hardening issue: every error's details are bounded, so the real status comes
back instead of a transport-level RESOURCE_EXHAUSTED ("metadata size exceeds soft limit").

Real server, real channel on loopback; the payloads are the ones that overflowed before."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1.memory_service_pb2_grpc import MemoryServiceStub
from engram_server.api.errors import MAX_MESSAGE_BYTES, MAX_VIOLATIONS, to_status
from engram_server.domain.errors import FieldViolation, InvalidArgument, PermissionDenied
from engram_server.testing import rich, running_server
from tests.security.support import bearer, write_auth_file

DETAILS_KEY = "grpc-status-details-bin"


def _trailer_bytes(exc: grpc.aio.AioRpcError) -> int:
    return sum(len(k) + len(v) for k, v in exc.trailing_metadata() or ())


async def test_a_hundred_overlong_tags_get_invalid_argument_with_bounded_details(tmp_path: Path) -> None:
    async with running_server(tmp_path / "data") as server, grpc.aio.insecure_channel(server.address) as ch:
        stub = MemoryServiceStub(ch)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.AddMemory(
                s.AddMemoryRequest(content="hello", tags=[f"{i:03d}" + "t" * 997 for i in range(100)])
            )
    err = rich(caught.value)
    assert err.code is grpc.StatusCode.INVALID_ARGUMENT, err
    assert err.reason == "ERROR_REASON_INVALID_ARGUMENT"
    # the first violations are listed, the rest counted in one more entry
    assert "tags[0]" in err.violations
    assert len(err.violations) == MAX_VIOLATIONS + 1
    assert any("more violations not listed" in d for d in err.violations.values())
    assert len(err.message.encode()) <= MAX_MESSAGE_BYTES
    assert _trailer_bytes(caught.value) < 8 * 1024


async def test_a_5000_character_collection_name_from_a_caller_without_access(tmp_path: Path) -> None:
    auth = write_auth_file(
        tmp_path / "auth.json", {"reader": {"key": "reader-key", "grants": {"alpha": "read"}}}
    )
    name = "z" * 5000
    async with (
        running_server(tmp_path / "data", auth_file=auth) as server,
        grpc.aio.insecure_channel(server.address) as ch,
    ):
        stub = MemoryServiceStub(ch)
        with pytest.raises(grpc.aio.AioRpcError) as denied:
            await stub.AddMemory(
                s.AddMemoryRequest(content="hello", collection=name), metadata=bearer("reader-key")
            )
        with pytest.raises(grpc.aio.AioRpcError) as deleting:
            await stub.DeleteCollection(
                s.DeleteCollectionRequest(name="é" * 5000), metadata=bearer("reader-key")
            )
    for caught in (denied, deleting):
        err = rich(caught.value)
        assert err.code is grpc.StatusCode.PERMISSION_DENIED, err
        assert err.reason == "ERROR_REASON_PERMISSION_DENIED"
        assert len(err.message.encode()) <= MAX_MESSAGE_BYTES
        assert all(len(v) <= 160 for v in err.metadata.values())
        assert _trailer_bytes(caught.value) < 8 * 1024
    assert rich(denied.value).metadata["collection"].startswith("zzzz")


def test_every_status_is_bounded_whatever_the_error_carries() -> None:
    """The mapping itself: a thousand violations of multi-byte text, a huge metadata map."""
    many = tuple(FieldViolation("记" * 500, "描" * 5000) for _ in range(1000))
    for error in (
        InvalidArgument("记" * 100_000, violations=many),
        PermissionDenied("x" * 100_000, metadata={f"k{i}" * 100: "€" * 10_000 for i in range(100)}),
    ):
        status = to_status(error)
        details = dict(status.trailing_metadata)[DETAILS_KEY]
        assert len(details) <= 2048 + 64
        assert len(status.details.encode()) <= MAX_MESSAGE_BYTES
