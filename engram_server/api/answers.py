"""Answers that always fit in one gRPC message.

The server refuses to send a message larger than ``ENGRAM_MAX_MESSAGE_BYTES`` (default 4 MiB):
the caller would get RESOURCE_EXHAUSTED "Sent message larger than max", a status that looks
retryable and never succeeds. A memory within the input limits can take up to
:func:`largest_memory_bytes` on the wire (≈ 600 kB with the defaults: 64 metadata values of
2,048 characters of 4 UTF-8 bytes each), so a page of 1,000 memories, or 100 search results,
could take hundreds of megabytes. Instead of bounding memories so tightly that the largest page
fits (4 kB each), answers that carry lists of memories are sized by bytes:

* ListMemories ends a page early, before the memory that would not fit, and returns a
  ``next_page_token`` that continues with that memory: paging still visits every memory once.
* SearchMemories, GetMemory (history) and DeleteMemory (the deleted memories) keep the leading
  entries that fit, and say so in the answer (``truncated``): nothing is cut inside a memory.
* AddMemories answers one result per item, each with its memory: for a duplicate, the existing
  memory, which can be much larger than the item (64 short items that duplicate memories of
  600 kB would answer 38 MB). Results that do not fit are ``abridged``: their memory keeps its
  identity fields only, and says so.

The budget is the message limit less :data:`ENVELOPE_BYTES` for the answer's other fields. A
server whose message limit could not hold one largest memory refuses to start (config check).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypeVar

from google.protobuf.internal.containers import RepeatedCompositeFieldContainer
from google.protobuf.message import Message

from engram_client.proto.engram.v1 import memory_pb2 as m
from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_server.domain.validation import Limits

__all__ = [
    "ENVELOPE_BYTES",
    "abridged_to_fit",
    "answer_budget",
    "fit_in_place",
    "fitting",
    "framed_size",
    "largest_memory_bytes",
]

#: Room kept for an answer's fields besides its list (a page token, flags, a score, a memory
#: besides a history): a page token is ≈ 150 bytes; one extra memory is accounted for by callers.
ENVELOPE_BYTES = 4096

#: UTF-8 takes at most this many bytes per character.
_UTF8_MAX = 4
#: Fixed fields of a Memory: id, collection, enums, counters, five timestamps, request bookkeeping.
_FIXED_FIELDS_BYTES = 1024

M = TypeVar("M", bound=Message)


def _varint_size(n: int) -> int:
    return max(1, (n.bit_length() + 6) // 7)


def framed_size(n: int) -> int:
    """Bytes a length-delimited field (field number < 16) of ``n`` bytes takes in its message."""
    return 1 + _varint_size(n) + n


def largest_memory_bytes(limits: Limits, *, max_derived_from: int = 64) -> int:
    """An upper bound of one Memory message's size within ``limits`` (every character taking
    four UTF-8 bytes)."""
    content = framed_size(limits.max_content_chars * _UTF8_MAX)
    tags = limits.max_tags * framed_size(limits.max_tag_chars * _UTF8_MAX)
    entry = framed_size(
        framed_size(limits.max_metadata_key_chars * _UTF8_MAX)
        + framed_size(limits.max_metadata_value_chars * _UTF8_MAX)
    )
    metadata = limits.max_metadata_entries * entry
    derived = max_derived_from * framed_size(36)  # reflection insights: their source ids
    return content + tags + metadata + derived + _FIXED_FIELDS_BYTES


def answer_budget(max_message_bytes: int) -> int:
    """Bytes the list of an answer may take."""
    return max(0, max_message_bytes - ENVELOPE_BYTES)


def fitting(messages: Iterable[M], budget: int) -> tuple[list[M], bool]:
    """The leading ``messages`` whose framed sizes add up to at most ``budget`` (at least one, so
    that an answer always makes progress), and whether any was left out."""
    out: list[M] = []
    used = 0
    items: Sequence[M] = list(messages)
    for msg in items:
        size = framed_size(msg.ByteSize())
        if out and used + size > budget:
            return out, True
        out.append(msg)
        used += size
    return out, False


def fit_in_place(messages: RepeatedCompositeFieldContainer[M], budget: int) -> bool:
    """What :func:`fitting` keeps, for messages already in a repeated field of the answer (no
    copy of each into it): the leading ones whose framed sizes add up to at most ``budget`` stay
    (at least one), the rest are deleted; whether any was."""
    used = 0
    for i, msg in enumerate(messages):
        size = framed_size(msg.ByteSize())
        if i and used + size > budget:
            del messages[i:]
            return True
        used += size
    return False


#: Room kept per AddMemories result for its abridged form (ids, times, a few near-duplicate ids).
_ABRIDGED_BYTES = 512


def abridged(result: s.AddMemoryResult) -> s.AddMemoryResult:
    """``result`` with its memory reduced to its identity fields and its near duplicates to
    their ids, similarities, types and gate reasons (``abridged`` set)."""
    full = result.memory
    memory = m.Memory(
        id=full.id,
        collection=full.collection,
        type=full.type,
        importance=full.importance,
        version=full.version,
        source=full.source,
        source_type=full.source_type,
        superseded_by=full.superseded_by,
    )
    for name in ("created_at", "updated_at", "valid_until"):
        if full.HasField(name):
            getattr(memory, name).CopyFrom(getattr(full, name))
    out = s.AddMemoryResult()
    out.CopyFrom(result)
    out.memory.CopyFrom(memory)
    del out.near_duplicates[:]
    out.near_duplicates.extend(
        m.SimilarMemory(id=x.id, similarity=x.similarity, type=x.type, reason=x.reason)
        for x in result.near_duplicates
    )
    out.abridged = True
    return out


def abridged_to_fit(results: list[s.AddMemoryResult], budget: int) -> list[s.AddMemoryResult]:
    """The results in order: whole where it still fits in ``budget`` (keeping room for every
    result in abridged form), abridged otherwise."""
    room = budget - _ABRIDGED_BYTES * len(results)
    used = 0
    out: list[s.AddMemoryResult] = []
    for result in results:
        size = framed_size(result.ByteSize())
        if used + size <= room:
            out.append(result)
            used += size
        else:
            out.append(abridged(result))
    return out
