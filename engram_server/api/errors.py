"""The one place domain errors become gRPC status: code + google.rpc.Status details
(ErrorInfo with the ErrorReason name, BadRequest field violations, QuotaFailure and RetryInfo
for rate limits)."""

from __future__ import annotations

import logging
import math

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from engram_server.domain.errors import EngramError, FieldViolation, Reason

log = logging.getLogger(__name__)

DOMAIN = "engram.v1"

CODES: dict[Reason, grpc.StatusCode] = {
    Reason.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
    Reason.MEMORY_NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    Reason.COLLECTION_NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    Reason.NO_MATCH: grpc.StatusCode.NOT_FOUND,
    Reason.THRESHOLD_TOO_LOW: grpc.StatusCode.INVALID_ARGUMENT,
    Reason.PROTECTED_MEMORY: grpc.StatusCode.FAILED_PRECONDITION,
    Reason.EMBEDDING_MISMATCH: grpc.StatusCode.FAILED_PRECONDITION,
    Reason.STORAGE_UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    Reason.EMBEDDER_UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    Reason.IDEMPOTENCY_CONFLICT: grpc.StatusCode.ALREADY_EXISTS,
    Reason.MEMORY_SUPERSEDED: grpc.StatusCode.FAILED_PRECONDITION,
    Reason.AMBIGUOUS_MATCH: grpc.StatusCode.FAILED_PRECONDITION,
    Reason.LLM_NOT_CONFIGURED: grpc.StatusCode.FAILED_PRECONDITION,
    Reason.LLM_UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    Reason.LLM_INVALID_OUTPUT: grpc.StatusCode.UNAVAILABLE,
    Reason.UNAUTHENTICATED: grpc.StatusCode.UNAUTHENTICATED,
    Reason.PERMISSION_DENIED: grpc.StatusCode.PERMISSION_DENIED,
    Reason.RATE_LIMITED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    Reason.STORAGE_FULL: grpc.StatusCode.RESOURCE_EXHAUSTED,
}


def _pack(message: object) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)  # type: ignore[arg-type]
    return packed


def to_status(error: EngramError) -> grpc.Status:
    code = CODES[error.reason]
    details = [
        _pack(error_details_pb2.ErrorInfo(reason=error.reason.value, domain=DOMAIN, metadata=error.metadata))
    ]
    violations: tuple[FieldViolation, ...] = error.violations
    if error.reason is Reason.THRESHOLD_TOO_LOW and not violations:
        fieldname = error.metadata.get("field", "threshold")
        violations = (FieldViolation(fieldname, error.message),)
    if violations:
        details.append(
            _pack(
                error_details_pb2.BadRequest(
                    field_violations=[
                        error_details_pb2.BadRequest.FieldViolation(field=v.field, description=v.description)
                        for v in violations
                    ]
                )
            )
        )
    if error.quota_violations:
        details.append(
            _pack(
                error_details_pb2.QuotaFailure(
                    violations=[
                        error_details_pb2.QuotaFailure.Violation(subject=q.subject, description=q.description)
                        for q in error.quota_violations
                    ]
                )
            )
        )
    if error.retry_after is not None:
        delay = duration_pb2.Duration()
        delay.FromNanoseconds(max(0, math.ceil(error.retry_after * 1e9)))
        details.append(_pack(error_details_pb2.RetryInfo(retry_delay=delay)))
    status = status_pb2.Status(code=code.value[0], message=error.message, details=details)
    return rpc_status.to_status(status)


def internal_status(message: str) -> grpc.Status:
    status = status_pb2.Status(code=code_pb2.INTERNAL, message=message)
    return rpc_status.to_status(status)
