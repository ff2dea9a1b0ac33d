"""Error mapping: google.rpc.Status (ErrorInfo, BadRequest, RetryInfo) -> typed exceptions."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

import engram_client
from engram_client import (
    AlreadyExistsError,
    AsyncEngramClient,
    CollectionNotFoundError,
    DeadlineExceededError,
    EngramClient,
    EngramError,
    FailedPreconditionError,
    IdempotencyConflictError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ProtectedMemoryError,
    RateLimitedError,
    ResourceExhaustedError,
    RetryPolicy,
    ThresholdTooLowError,
    UnauthenticatedError,
    UnavailableError,
    UnimplementedError,
)
from engram_client.errors import error_from_status
from engram_client.proto.engram.v1 import error_reason_pb2

from .fake_engram import Script, fake_server, rich_status

NO_RETRY = RetryPolicy(max_attempts=1)


def test_protected_memory_from_crafted_status() -> None:
    status = rich_status(
        grpc.StatusCode.FAILED_PRECONDITION,
        "memory m-1 is a directive; pass force",
        reason="ERROR_REASON_PROTECTED_MEMORY",
        metadata={"id": "m-1", "type": "directive"},
    )
    err = error_from_status(grpc.StatusCode.FAILED_PRECONDITION, status.message, status)
    assert type(err) is ProtectedMemoryError
    assert isinstance(err, FailedPreconditionError) and isinstance(err, EngramError)
    assert err.code is grpc.StatusCode.FAILED_PRECONDITION
    assert err.reason == "ERROR_REASON_PROTECTED_MEMORY"
    assert err.domain == "engram.v1"
    assert err.metadata == {"id": "m-1", "type": "directive"}
    assert err.status is status
    assert any(isinstance(d, error_details_pb2.ErrorInfo) for d in err.details)
    assert "ERROR_REASON_PROTECTED_MEMORY" in str(err)


def test_violations_the_message_does_not_name_are_added_once() -> None:
    status = rich_status(
        grpc.StatusCode.INVALID_ARGUMENT,
        "invalid request: content: must not be empty",
        reason="ERROR_REASON_INVALID_ARGUMENT",
        violations=[("content", "must not be empty"), ("tags[0]", "tags must not be empty")],
    )
    err = error_from_status(grpc.StatusCode.INVALID_ARGUMENT, status.message, status)
    assert str(err) == (
        "ERROR_REASON_INVALID_ARGUMENT: invalid request: content: must not be empty "
        "(tags[0]: tags must not be empty)"
    )


def test_threshold_too_low_exposes_minimum() -> None:
    status = rich_status(
        grpc.StatusCode.INVALID_ARGUMENT,
        "threshold 0.5 is below 0.85",
        reason="ERROR_REASON_THRESHOLD_TOO_LOW",
        metadata={"min_threshold": "0.85"},
        violations=[("locate.threshold", "must be at least 0.85")],
    )
    err = error_from_status(grpc.StatusCode.INVALID_ARGUMENT, status.message, status)
    assert isinstance(err, ThresholdTooLowError) and isinstance(err, InvalidArgumentError)
    assert err.min_threshold == pytest.approx(0.85)
    assert [(v.field, v.description) for v in err.field_violations] == [
        ("locate.threshold", "must be at least 0.85")
    ]


def test_rate_limited_carries_retry_after() -> None:
    status = rich_status(
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "slow down",
        reason="ERROR_REASON_RATE_LIMITED",
        retry_after_seconds=1.5,
    )
    err = error_from_status(grpc.StatusCode.RESOURCE_EXHAUSTED, status.message, status)
    assert isinstance(err, RateLimitedError)
    assert err.retry_after == timedelta(seconds=1.5)


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (grpc.StatusCode.NOT_FOUND, NotFoundError),
        (grpc.StatusCode.UNAVAILABLE, UnavailableError),
        (grpc.StatusCode.INTERNAL, EngramError),
    ],
)
def test_unknown_reason_falls_back_to_status_code_class(
    code: grpc.StatusCode, expected: type[EngramError]
) -> None:
    status = rich_status(code, "new kind of failure", reason="ERROR_REASON_FROM_THE_FUTURE")
    err = error_from_status(code, status.message, status)
    assert type(err) is expected
    assert err.reason == "ERROR_REASON_FROM_THE_FUTURE"


def test_without_status_details() -> None:
    err = error_from_status(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded", None)
    assert err.reason is None and err.status is None and err.details == ()
    assert err.code is grpc.StatusCode.DEADLINE_EXCEEDED


async def test_status_travels_through_trailers_async() -> None:
    script = Script()
    script.fail(
        "DeleteMemory",
        rich_status(
            grpc.StatusCode.FAILED_PRECONDITION,
            "protected",
            reason="ERROR_REASON_PROTECTED_MEMORY",
            metadata={"id": "m-1"},
        ),
    )
    async with fake_server(script) as address, AsyncEngramClient(address, retry=NO_RETRY) as client:
        with pytest.raises(ProtectedMemoryError) as info:
            await client.delete("m-1")
    assert info.value.metadata == {"id": "m-1"}
    assert info.value.message == "protected"
    assert isinstance(info.value.__cause__, grpc.RpcError)


async def test_status_travels_through_trailers_sync() -> None:
    script = Script()
    script.fail(
        "AddMemory",
        rich_status(
            grpc.StatusCode.ALREADY_EXISTS, "request_id reused", reason="ERROR_REASON_IDEMPOTENCY_CONFLICT"
        ),
    )
    script.fail(
        "DeleteCollection",
        rich_status(
            grpc.StatusCode.NOT_FOUND, "no such collection", reason="ERROR_REASON_COLLECTION_NOT_FOUND"
        ),
    )

    def calls(address: str) -> tuple[EngramError, EngramError]:
        with EngramClient(address, retry=NO_RETRY) as client:
            with pytest.raises(IdempotencyConflictError) as first:
                client.add("x", request_id="r-1")
            with pytest.raises(CollectionNotFoundError) as second:
                client.delete_collection("nope")
            return first.value, second.value

    async with fake_server(script) as address:
        first, second = await asyncio.to_thread(calls, address)
    assert first.code is grpc.StatusCode.ALREADY_EXISTS
    assert second.reason == "ERROR_REASON_COLLECTION_NOT_FOUND"


def test_invalid_argument_without_error_info_has_no_reason() -> None:
    err = error_from_status(grpc.StatusCode.INVALID_ARGUMENT, "bad request", None)
    assert type(err) is InvalidArgumentError and err.reason is None


def _reason_names() -> list[str]:
    enum = error_reason_pb2.ErrorReason.DESCRIPTOR
    return [v.name for v in enum.values if v.number != 0]


def test_every_error_reason_in_the_proto_has_its_exception_class() -> None:
    exported = {
        getattr(engram_client, name).REASON: getattr(engram_client, name)
        for name in engram_client.__all__
        if isinstance(getattr(engram_client, name), type)
        and issubclass(getattr(engram_client, name), EngramError)
    }
    assert set(_reason_names()) <= set(exported), set(_reason_names()) - set(exported)


@pytest.mark.parametrize("reason", _reason_names())
def test_each_reason_maps_to_its_class_under_its_status_code(reason: str) -> None:
    expected = next(
        cls
        for name in engram_client.__all__
        if isinstance(cls := getattr(engram_client, name), type)
        and issubclass(cls, EngramError)
        and reason == cls.REASON
    )
    code = next(c for c, base in CODE_CLASSES.items() if issubclass(expected, base))
    status = rich_status(code, "crafted", reason=reason, metadata={"k": "v"})
    err = error_from_status(code, status.message, status)
    assert type(err) is expected and err.reason == reason and err.code is code
    assert err.metadata == {"k": "v"} and err.domain == "engram.v1"


CODE_CLASSES: dict[grpc.StatusCode, type[EngramError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExistsError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.UNIMPLEMENTED: UnimplementedError,
}


@pytest.mark.parametrize(("code", "expected"), list(CODE_CLASSES.items()))
async def test_each_status_code_without_error_info_gets_its_class(
    code: grpc.StatusCode, expected: type[EngramError]
) -> None:
    """Through a real call (sync and asyncio), with a bare status and no retry."""
    script = Script()
    script.fail("GetMemory", status_pb2.Status(code=code.value[0], message="bare"))
    script.fail("GetMemory", status_pb2.Status(code=code.value[0], message="bare"))
    async with fake_server(script) as address, AsyncEngramClient(address, retry=NO_RETRY) as client:
        with pytest.raises(EngramError) as info:
            await client.get("m-1")

        def sync_call() -> EngramError:
            with EngramClient(address, retry=NO_RETRY) as sync_client:
                with pytest.raises(EngramError) as sync_info:
                    sync_client.get("m-1")
                return sync_info.value

        sync_error = await asyncio.to_thread(sync_call)
    for err in (info.value, sync_error):
        assert type(err) is expected and err.code is code and err.reason is None
        assert err.message == "bare"
    assert len(script.attempts("GetMemory")) == 2
