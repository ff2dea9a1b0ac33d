"""Typed exceptions built from the ``google.rpc.Status`` Engram attaches to failed calls.

Every failure the client reports is an :class:`EngramError`. The subclass is chosen from the
``google.rpc.ErrorInfo.reason`` the server sent (for example ``ERROR_REASON_PROTECTED_MEMORY`` →
:class:`ProtectedMemoryError`); a reason this client version does not know, or a failure without
an ``ErrorInfo`` (a dropped connection, a deadline), gets the class for its gRPC status code
(:class:`NotFoundError`, :class:`UnavailableError`, …) or :class:`EngramError` itself. So
``except NotFoundError`` keeps working when a server adds a new not-found reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import grpc
from google.protobuf.message import DecodeError, Message
from google.rpc import error_details_pb2, status_pb2

__all__ = [
    "AlreadyExistsError",
    "AmbiguousMatchError",
    "CollectionInTrashError",
    "CollectionLimitError",
    "CollectionNotFoundError",
    "DeadlineExceededError",
    "EmbedderUnavailableError",
    "EmbeddingMismatchError",
    "EngramError",
    "FailedPreconditionError",
    "FieldViolation",
    "IdempotencyConflictError",
    "InvalidArgumentError",
    "LlmInvalidOutputError",
    "LlmNotConfiguredError",
    "LlmUnavailableError",
    "MemoryNotFoundError",
    "MemorySupersededError",
    "NoMatchError",
    "NotFoundError",
    "PermissionDeniedError",
    "ProtectedMemoryError",
    "RateLimitedError",
    "ResourceExhaustedError",
    "StorageFullError",
    "StorageUnavailableError",
    "ThresholdTooLowError",
    "UnauthenticatedError",
    "UnavailableError",
    "UnimplementedError",
    "error_from_rpc_error",
    "error_from_status",
]

#: ErrorInfo.domain of every error Engram raises.
ERROR_DOMAIN = "engram.v1"
_DETAILS_KEY = "grpc-status-details-bin"


@dataclass(frozen=True, slots=True)
class FieldViolation:
    """One offending request field, from the ``google.rpc.BadRequest`` detail."""

    field: str
    description: str
    reason: str = ""


class EngramError(Exception):
    """Base of every error the client raises for a failed call.

    Attributes:
        code: the gRPC status code.
        message: the server's (or gRPC's) human-readable message.
        reason: ``ErrorInfo.reason`` (an ``ErrorReason`` name such as
            ``"ERROR_REASON_PROTECTED_MEMORY"``), or ``None`` when the status carried no ErrorInfo.
        domain: ``ErrorInfo.domain`` (``"engram.v1"`` for Engram's own errors).
        metadata: ``ErrorInfo.metadata`` (for example ``min_threshold``).
        field_violations: the ``BadRequest`` field violations, for invalid arguments.
        retry_after: the ``RetryInfo`` delay, when the server sent one.
        status: the full decoded ``google.rpc.Status``, or ``None`` when there was none.
        details: every decoded detail message (ErrorInfo, BadRequest, RetryInfo, …).
    """

    #: The ErrorReason name this class stands for (``None`` for the status-code classes). ``reason``
    #: holds what the server actually sent.
    REASON: str | None = None

    def __init__(
        self,
        message: str,
        *,
        code: grpc.StatusCode = grpc.StatusCode.UNKNOWN,
        reason: str | None = None,
        domain: str | None = None,
        metadata: Mapping[str, str] | None = None,
        field_violations: Sequence[FieldViolation] = (),
        retry_after: timedelta | None = None,
        status: status_pb2.Status | None = None,
        details: Sequence[Message] = (),
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.reason = reason
        self.domain = domain
        self.metadata: dict[str, str] = dict(metadata or {})
        self.field_violations: tuple[FieldViolation, ...] = tuple(field_violations)
        self.retry_after = retry_after
        self.status = status
        self.details: tuple[Message, ...] = tuple(details)

    def __str__(self) -> str:
        label = self.reason or self.code.name
        text = f"{label}: {self.message}"
        # Each thing once: the server's message usually names the violations already.
        said = (f"{v.field}: {v.description}" for v in self.field_violations)
        unsaid = [s for s in said if s not in text]
        if unsaid:
            text += " (" + "; ".join(unsaid) + ")"
        return text

    def __repr__(self) -> str:
        name = type(self).__name__
        return f"{name}(code={self.code.name}, reason={self.reason!r}, message={self.message!r})"


# Status-code categories: used directly for reasons this client does not know.
class InvalidArgumentError(EngramError):
    """INVALID_ARGUMENT: a request field is missing, malformed or out of range."""

    REASON = "ERROR_REASON_INVALID_ARGUMENT"


class NotFoundError(EngramError):
    """NOT_FOUND."""


class FailedPreconditionError(EngramError):
    """FAILED_PRECONDITION: the request is valid but the data's state refuses it."""


class UnavailableError(EngramError):
    """UNAVAILABLE: the server, its storage or its embedder cannot be reached. Safe to retry; the
    client already retried with backoff before raising this."""


class AlreadyExistsError(EngramError):
    """ALREADY_EXISTS."""


class DeadlineExceededError(EngramError):
    """DEADLINE_EXCEEDED: the call's deadline passed before an answer arrived."""


class UnauthenticatedError(EngramError):
    """UNAUTHENTICATED: no API key, or an unknown one."""

    REASON = "ERROR_REASON_UNAUTHENTICATED"


class PermissionDeniedError(EngramError):
    """PERMISSION_DENIED: the API key may not do this (for example reach that collection)."""

    REASON = "ERROR_REASON_PERMISSION_DENIED"


class UnimplementedError(EngramError):
    """UNIMPLEMENTED: the server does not offer this RPC (an older server, or a feature not built)."""


class ResourceExhaustedError(EngramError):
    """RESOURCE_EXHAUSTED."""


# One class per ErrorReason.
class ThresholdTooLowError(InvalidArgumentError):
    """A similarity threshold is below the allowed minimum; ``min_threshold`` gives it."""

    REASON = "ERROR_REASON_THRESHOLD_TOO_LOW"

    @property
    def min_threshold(self) -> float | None:
        value = self.metadata.get("min_threshold")
        try:
            return float(value) if value is not None else None
        except ValueError:
            return None


class MemoryNotFoundError(NotFoundError):
    """No memory with the given id exists in the collection."""

    REASON = "ERROR_REASON_MEMORY_NOT_FOUND"


class CollectionNotFoundError(NotFoundError):
    """The named collection does not exist."""

    REASON = "ERROR_REASON_COLLECTION_NOT_FOUND"


class TopicNotFoundError(NotFoundError):
    """The collection's topic index holds no topic with that id (never minted, or dissolved): list
    the topics again."""

    REASON = "ERROR_REASON_TOPIC_NOT_FOUND"


class NoMatchError(NotFoundError):
    """A semantic locate found no memory at or above the similarity threshold."""

    REASON = "ERROR_REASON_NO_MATCH"


class ProtectedMemoryError(FailedPreconditionError):
    """The target is an identity or directive memory and ``force`` was not set."""

    REASON = "ERROR_REASON_PROTECTED_MEMORY"


class EmbeddingMismatchError(FailedPreconditionError):
    """The collection was built with another embedding model or dimension."""

    REASON = "ERROR_REASON_EMBEDDING_MISMATCH"


class MemorySupersededError(FailedPreconditionError):
    """The target is a history version; ``superseded_by`` names the current one."""

    REASON = "ERROR_REASON_MEMORY_SUPERSEDED"

    @property
    def superseded_by(self) -> str | None:
        return self.metadata.get("superseded_by")


class AmbiguousMatchError(FailedPreconditionError):
    """A semantic locate matched more memories than the request allows."""

    REASON = "ERROR_REASON_AMBIGUOUS_MATCH"


class LlmNotConfiguredError(FailedPreconditionError):
    """No LLM endpoint is configured on the server, so reflection cannot run."""

    REASON = "ERROR_REASON_LLM_NOT_CONFIGURED"


class LlmUnavailableError(UnavailableError):
    """The server's LLM endpoint (used by reflection) cannot be reached, timed out or failed.
    Nothing was written."""

    REASON = "ERROR_REASON_LLM_UNAVAILABLE"


class LlmInvalidOutputError(UnavailableError):
    """The server's LLM answered with output that does not fit the required schema (reflection).
    Nothing was written."""

    REASON = "ERROR_REASON_LLM_INVALID_OUTPUT"


class StorageUnavailableError(UnavailableError):
    """The storage backend cannot be reached or failed."""

    REASON = "ERROR_REASON_STORAGE_UNAVAILABLE"


class EmbedderUnavailableError(UnavailableError):
    """The embedding provider cannot be reached or failed."""

    REASON = "ERROR_REASON_EMBEDDER_UNAVAILABLE"


class IdempotencyConflictError(AlreadyExistsError):
    """A ``request_id`` was reused with a different request."""

    REASON = "ERROR_REASON_IDEMPOTENCY_CONFLICT"


class RateLimitedError(ResourceExhaustedError):
    """Too many calls; wait ``retry_after`` (from the server's ``RetryInfo``) before trying again."""

    REASON = "ERROR_REASON_RATE_LIMITED"


class CollectionInTrashError(FailedPreconditionError):
    """The collection was deleted and is in the trash: nothing reads or writes it until
    ``restore_collection`` (or ``purge_trash(purge_collection=True)`` deletes it for good)."""

    REASON = "ERROR_REASON_COLLECTION_IN_TRASH"


class StorageFullError(ResourceExhaustedError):
    """The server's data volume is below its free-space headroom: writes are refused (nothing was
    written) until an operator frees space; reads keep working. Retrying soon will not help."""

    REASON = "ERROR_REASON_STORAGE_FULL"


class CollectionLimitError(ResourceExhaustedError):
    """The server's live collections fill its limit (``ENGRAM_MAX_COLLECTIONS``) or its system
    limit of memory maps, with nothing left in the trash to give way (trashed collections count
    too, and the one longest in the trash is purged to make room first): the new collection was
    not created; existing ones keep working. Delete collections no longer needed.
    ``metadata`` gives ``limit``, ``count`` and ``trashed``, or ``maps`` and ``max_map_count``."""

    REASON = "ERROR_REASON_COLLECTION_LIMIT"


_BY_REASON: dict[str, type[EngramError]] = {
    cls.REASON: cls
    for cls in (
        InvalidArgumentError,
        ThresholdTooLowError,
        MemoryNotFoundError,
        CollectionNotFoundError,
        CollectionInTrashError,
        TopicNotFoundError,
        NoMatchError,
        ProtectedMemoryError,
        EmbeddingMismatchError,
        MemorySupersededError,
        AmbiguousMatchError,
        LlmNotConfiguredError,
        LlmUnavailableError,
        LlmInvalidOutputError,
        StorageUnavailableError,
        EmbedderUnavailableError,
        IdempotencyConflictError,
        RateLimitedError,
        StorageFullError,
        CollectionLimitError,
        UnauthenticatedError,
        PermissionDeniedError,
    )
    if cls.REASON is not None
}

_BY_CODE: dict[grpc.StatusCode, type[EngramError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExistsError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.UNIMPLEMENTED: UnimplementedError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
}


def _unpack_details(status: status_pb2.Status) -> list[Message]:
    known: list[type[Message]] = [
        error_details_pb2.ErrorInfo,
        error_details_pb2.BadRequest,
        error_details_pb2.RetryInfo,
        error_details_pb2.QuotaFailure,
        error_details_pb2.PreconditionFailure,
        error_details_pb2.ResourceInfo,
        error_details_pb2.DebugInfo,
        error_details_pb2.Help,
        error_details_pb2.LocalizedMessage,
        error_details_pb2.RequestInfo,
    ]
    out: list[Message] = []
    for detail in status.details:
        for message_type in known:
            if detail.Is(message_type.DESCRIPTOR):
                message = message_type()
                detail.Unpack(message)
                out.append(message)
                break
        else:
            out.append(detail)  # an Any of a type we do not know: kept as is
    return out


def error_from_status(
    code: grpc.StatusCode,
    message: str,
    status: status_pb2.Status | None,
    *,
    cause: BaseException | None = None,
) -> EngramError:
    """Build the typed exception for a gRPC ``code``/``message`` and the decoded ``google.rpc.Status``
    from the trailers (``None`` when there was none)."""
    details = _unpack_details(status) if status is not None else []
    reason: str | None = None
    domain: str | None = None
    metadata: dict[str, str] = {}
    violations: list[FieldViolation] = []
    retry_after: timedelta | None = None
    for detail in details:
        if isinstance(detail, error_details_pb2.ErrorInfo) and reason is None:
            reason, domain, metadata = detail.reason, detail.domain, dict(detail.metadata)
        elif isinstance(detail, error_details_pb2.BadRequest):
            violations.extend(
                FieldViolation(field=v.field, description=v.description, reason=v.reason)
                for v in detail.field_violations
            )
        elif isinstance(detail, error_details_pb2.RetryInfo) and detail.HasField("retry_delay"):
            retry_after = detail.retry_delay.ToTimedelta()
    cls: type[EngramError] | None = _BY_REASON.get(reason) if reason else None
    if cls is None:
        cls = _BY_CODE.get(code, EngramError)
    error = cls(
        message or (status.message if status is not None else "") or code.name,
        code=code,
        reason=reason or None,
        domain=domain,
        metadata=metadata,
        field_violations=violations,
        retry_after=retry_after,
        status=status,
        details=details,
    )
    if cause is not None:
        error.__cause__ = cause
    return error


def _status_from_trailers(trailers: Any) -> status_pb2.Status | None:
    for key, value in trailers or ():
        if key == _DETAILS_KEY and isinstance(value, bytes):
            try:
                return status_pb2.Status.FromString(value)
            except DecodeError:
                return None
    return None


def error_from_rpc_error(error: grpc.RpcError) -> EngramError:
    """Build the typed exception for a failed call, sync (``grpc.RpcError`` that is also a
    ``grpc.Call``) or asyncio (``grpc.aio.AioRpcError``)."""
    code_fn = getattr(error, "code", None)
    code = code_fn() if callable(code_fn) else grpc.StatusCode.UNKNOWN
    if not isinstance(code, grpc.StatusCode):
        code = grpc.StatusCode.UNKNOWN
    details_fn = getattr(error, "details", None)
    message = details_fn() if callable(details_fn) else None
    trailers_fn = getattr(error, "trailing_metadata", None)
    status = _status_from_trailers(trailers_fn() if callable(trailers_fn) else None)
    return error_from_status(code, str(message or ""), status, cause=error)
