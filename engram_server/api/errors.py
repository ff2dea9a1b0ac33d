"""The one place domain errors become gRPC status: code + google.rpc.Status details
(ErrorInfo with the ErrorReason name, BadRequest field violations, QuotaFailure and RetryInfo
for rate limits).

Every status is bounded in size. The message and the details travel in trailers (the message
percent-encoded, the details base64-encoded), and gRPC replaces a status whose trailers pass the
peer's metadata limit (8 KiB by default) with a transport-level RESOURCE_EXHAUSTED ("metadata
size exceeds soft limit") that hides the real error. So: at most :data:`MAX_VIOLATIONS` field
violations are listed (then one ``"N more violations not listed"`` entry), every echoed string is
cut to a few hundred characters, and the message to :data:`MAX_MESSAGE_BYTES` of UTF-8 — at most
~3.5 KiB on the wire in the worst case.
"""

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

#: Most field or quota violations listed in one status (the rest are counted in one more entry,
#: as the domain's own cap does: ``Violations.raise_if_any``).
MAX_VIOLATIONS = 10
#: Longest UTF-8 message (percent-encoding can triple it on the wire).
MAX_MESSAGE_BYTES = 512
#: Longest echoed field name, description, metadata key or value.
MAX_DETAIL_CHARS = 160
#: Largest serialized details (base64 adds a third on the wire). Past it (multi-byte text can
#: get there) only the ErrorInfo reason and the RetryInfo are kept.
MAX_DETAILS_BYTES = 2048

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
    Reason.COLLECTION_IN_TRASH: grpc.StatusCode.FAILED_PRECONDITION,
    Reason.TOPIC_NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    Reason.COLLECTION_LIMIT: grpc.StatusCode.RESOURCE_EXHAUSTED,
}


def _pack(message: object) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)  # type: ignore[arg-type]
    return packed


def truncate(text: str, limit: int = MAX_DETAIL_CHARS) -> str:
    """``text`` cut to ``limit`` characters, marked with "…" when cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def truncate_bytes(text: str, limit: int = MAX_MESSAGE_BYTES) -> str:
    """``text`` cut so its UTF-8 encoding is at most ``limit`` bytes (on a character boundary)."""
    raw = text.encode("utf-8", "replace")
    if len(raw) <= limit:
        return text
    return raw[: limit - 3].decode("utf-8", "ignore") + "…"


def _bounded_violations(violations: tuple[FieldViolation, ...]) -> list[FieldViolation]:
    if len(violations) > MAX_VIOLATIONS + 1:  # one more is the domain's own "N more" entry
        rest = len(violations) - MAX_VIOLATIONS
        violations = (*violations[:MAX_VIOLATIONS], FieldViolation("", f"{rest} more violations not listed"))
    return [FieldViolation(truncate(v.field), truncate(v.description)) for v in violations]


def to_status(error: EngramError) -> grpc.Status:
    code = CODES[error.reason]
    metadata = {truncate(k, 64): truncate(v) for k, v in list(error.metadata.items())[:16]}
    details = [
        _pack(error_details_pb2.ErrorInfo(reason=error.reason.value, domain=DOMAIN, metadata=metadata))
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
                        for v in _bounded_violations(violations)
                    ]
                )
            )
        )
    if error.quota_violations:
        details.append(
            _pack(
                error_details_pb2.QuotaFailure(
                    violations=[
                        error_details_pb2.QuotaFailure.Violation(
                            subject=truncate(q.subject), description=truncate(q.description)
                        )
                        for q in error.quota_violations[:MAX_VIOLATIONS]
                    ]
                )
            )
        )
    retry: list[any_pb2.Any] = []
    if error.retry_after is not None:
        delay = duration_pb2.Duration()
        delay.FromNanoseconds(max(0, math.ceil(error.retry_after * 1e9)))
        retry.append(_pack(error_details_pb2.RetryInfo(retry_delay=delay)))
    details += retry
    if sum(d.ByteSize() for d in details) > MAX_DETAILS_BYTES:
        info = error_details_pb2.ErrorInfo(
            reason=error.reason.value, domain=DOMAIN, metadata={"details_truncated": "true"}
        )
        details = [_pack(info), *retry]
    status = status_pb2.Status(code=code.value[0], message=truncate_bytes(error.message), details=details)
    return rpc_status.to_status(status)


def internal_status(message: str) -> grpc.Status:
    status = status_pb2.Status(code=code_pb2.INTERNAL, message=message)
    return rpc_status.to_status(status)
