"""Domain errors. Each carries a :class:`Reason` whose name matches the proto's ErrorReason
(``ERROR_REASON_<NAME>``); exactly one place (``api/errors.py``) maps them to gRPC status."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum


class Reason(StrEnum):
    INVALID_ARGUMENT = "ERROR_REASON_INVALID_ARGUMENT"
    MEMORY_NOT_FOUND = "ERROR_REASON_MEMORY_NOT_FOUND"
    COLLECTION_NOT_FOUND = "ERROR_REASON_COLLECTION_NOT_FOUND"
    NO_MATCH = "ERROR_REASON_NO_MATCH"
    THRESHOLD_TOO_LOW = "ERROR_REASON_THRESHOLD_TOO_LOW"
    PROTECTED_MEMORY = "ERROR_REASON_PROTECTED_MEMORY"
    EMBEDDING_MISMATCH = "ERROR_REASON_EMBEDDING_MISMATCH"
    STORAGE_UNAVAILABLE = "ERROR_REASON_STORAGE_UNAVAILABLE"
    EMBEDDER_UNAVAILABLE = "ERROR_REASON_EMBEDDER_UNAVAILABLE"
    IDEMPOTENCY_CONFLICT = "ERROR_REASON_IDEMPOTENCY_CONFLICT"
    MEMORY_SUPERSEDED = "ERROR_REASON_MEMORY_SUPERSEDED"
    AMBIGUOUS_MATCH = "ERROR_REASON_AMBIGUOUS_MATCH"
    LLM_NOT_CONFIGURED = "ERROR_REASON_LLM_NOT_CONFIGURED"
    LLM_UNAVAILABLE = "ERROR_REASON_LLM_UNAVAILABLE"
    LLM_INVALID_OUTPUT = "ERROR_REASON_LLM_INVALID_OUTPUT"
    UNAUTHENTICATED = "ERROR_REASON_UNAUTHENTICATED"
    PERMISSION_DENIED = "ERROR_REASON_PERMISSION_DENIED"
    RATE_LIMITED = "ERROR_REASON_RATE_LIMITED"
    STORAGE_FULL = "ERROR_REASON_STORAGE_FULL"
    COLLECTION_IN_TRASH = "ERROR_REASON_COLLECTION_IN_TRASH"
    TOPIC_NOT_FOUND = "ERROR_REASON_TOPIC_NOT_FOUND"
    COLLECTION_LIMIT = "ERROR_REASON_COLLECTION_LIMIT"


@dataclass(frozen=True, slots=True)
class FieldViolation:
    field: str
    description: str


@dataclass(frozen=True, slots=True)
class QuotaViolation:
    subject: str
    description: str


class EngramError(Exception):
    """Base of every error Engram reports to callers."""

    reason: Reason = Reason.INVALID_ARGUMENT
    #: Seconds before a retry can succeed (sent as google.rpc.RetryInfo), when known.
    retry_after: float | None = None
    #: Quota checks that failed (sent as google.rpc.QuotaFailure).
    quota_violations: tuple[QuotaViolation, ...] = ()

    def __init__(
        self,
        message: str,
        *,
        metadata: Mapping[str, str] | None = None,
        violations: tuple[FieldViolation, ...] = (),
    ) -> None:
        super().__init__(message)
        self.message = message
        self.metadata: dict[str, str] = dict(metadata or {})
        self.violations = violations


class InvalidArgument(EngramError):
    reason = Reason.INVALID_ARGUMENT

    @classmethod
    def of(cls, fieldname: str, description: str) -> InvalidArgument:
        return cls(f"{fieldname}: {description}", violations=(FieldViolation(fieldname, description),))


class MemoryNotFound(EngramError):
    reason = Reason.MEMORY_NOT_FOUND


class CollectionNotFound(EngramError):
    reason = Reason.COLLECTION_NOT_FOUND


class TopicNotFound(EngramError):
    reason = Reason.TOPIC_NOT_FOUND


class NoMatch(EngramError):
    reason = Reason.NO_MATCH


class ThresholdTooLow(EngramError):
    reason = Reason.THRESHOLD_TOO_LOW


class ProtectedMemory(EngramError):
    reason = Reason.PROTECTED_MEMORY


class EmbeddingMismatch(EngramError):
    reason = Reason.EMBEDDING_MISMATCH


class StorageUnavailable(EngramError):
    reason = Reason.STORAGE_UNAVAILABLE


class StorageFull(EngramError):
    """The data volume has less free space than the configured headroom: writes are refused
    before they touch the disk."""

    reason = Reason.STORAGE_FULL


class CollectionLimit(EngramError):
    """Creating one more collection would pass the server's limit (``ENGRAM_MAX_COLLECTIONS``,
    live and trashed collections counted) or the process is too close to the kernel's limit of
    memory maps (each open embedded collection maps its files): refused before anything is made.
    Existing collections keep working."""

    reason = Reason.COLLECTION_LIMIT


class CollectionInTrash(EngramError):
    """The collection was deleted and is in the trash: restore or purge it first."""

    reason = Reason.COLLECTION_IN_TRASH


class EmbedderUnavailable(EngramError):
    reason = Reason.EMBEDDER_UNAVAILABLE


class IdempotencyConflict(EngramError):
    reason = Reason.IDEMPOTENCY_CONFLICT


class MemorySuperseded(EngramError):
    reason = Reason.MEMORY_SUPERSEDED


class AmbiguousMatch(EngramError):
    reason = Reason.AMBIGUOUS_MATCH


class LlmNotConfigured(EngramError):
    reason = Reason.LLM_NOT_CONFIGURED


class LlmUnavailable(EngramError):
    reason = Reason.LLM_UNAVAILABLE


class LlmInvalidOutput(EngramError):
    reason = Reason.LLM_INVALID_OUTPUT


class Unauthenticated(EngramError):
    reason = Reason.UNAUTHENTICATED


class PermissionDenied(EngramError):
    reason = Reason.PERMISSION_DENIED


class RateLimited(EngramError):
    reason = Reason.RATE_LIMITED

    def __init__(
        self,
        message: str,
        *,
        retry_after: float,
        violations: tuple[QuotaViolation, ...] = (),
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message, metadata=metadata)
        self.retry_after = retry_after
        self.quota_violations = violations
