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

The budget is the message limit less :data:`ENVELOPE_BYTES` for the answer's other fields. A
server whose message limit could not hold one largest memory refuses to start (config check).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypeVar

from google.protobuf.message import Message

from engram_server.domain.validation import Limits

__all__ = ["ENVELOPE_BYTES", "answer_budget", "fitting", "framed_size", "largest_memory_bytes"]

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
