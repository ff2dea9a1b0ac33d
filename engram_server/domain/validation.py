"""Input rules. Violations raise InvalidArgument naming the proto field."""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from engram_server.domain.context import (
    TRIGGER_NAME_RULE,
    normalise_trigger,
    valid_trigger,
)
from engram_server.domain.errors import FieldViolation, InvalidArgument
from engram_server.domain.model import TRIGGER_TAG_PREFIX

#: Matched with ``fullmatch`` (``$`` alone would let a trailing newline through: ``"bob\n"``).
COLLECTION_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")

#: Characters that render as nothing although Unicode does not class them as whitespace or format
#: characters (Hangul fillers, the braille blank, the Khmer inherent vowels).
INVISIBLE = frozenset("\u115f\u1160\u3164\uffa0\u2800\u17b4\u17b5")
#: Categories that carry no visible text: format (zero-width space/joiners, BOM, bidi marks),
#: control, separators, unassigned.
_BLANK_CATEGORIES = frozenset({"Cf", "Cc", "Zs", "Zl", "Zp", "Cn"})
#: Valid google.protobuf.Timestamp seconds: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z.
MIN_TIMESTAMP_SECONDS = -62_135_596_800
MAX_TIMESTAMP_SECONDS = 253_402_300_799


def is_blank(text: str) -> bool:
    """True when ``text`` has nothing visible: only whitespace, zero-width and other format or
    control characters (``"\u200b\u200d\ufeff"`` is blank)."""
    return all(
        ch.isspace() or ch in INVISIBLE or unicodedata.category(ch) in _BLANK_CATEGORIES for ch in text
    )


def valid_collection_name(name: str) -> bool:
    return COLLECTION_RE.fullmatch(name) is not None


def check_timestamp(fieldname: str, seconds: int, nanos: int) -> None:
    """A google.protobuf.Timestamp must be normalised: ``nanos`` in [0, 1e9) and ``seconds`` within
    years 1–9999, else InvalidArgument."""
    if not 0 <= nanos < 1_000_000_000:
        raise InvalidArgument.of(fieldname, f"nanos must be in [0, 999999999] (got {nanos})")
    if not MIN_TIMESTAMP_SECONDS <= seconds <= MAX_TIMESTAMP_SECONDS:
        raise InvalidArgument.of(fieldname, f"seconds must be within years 1-9999 (got {seconds})")


@dataclass(frozen=True, slots=True)
class Limits:
    """Input bounds (configurable)."""

    max_content_chars: int = 8192
    max_tags: int = 32
    max_tag_chars: int = 64
    max_metadata_entries: int = 64
    max_metadata_key_chars: int = 128
    max_metadata_value_chars: int = 2048
    max_request_id_chars: int = 128
    max_collections_per_search: int = 16
    max_search_limit: int = 100
    max_page_size: int = 1000
    max_delete_limit: int = 100
    max_batch_items: int = 64
    future_skew_seconds: float = 300.0


#: Most violations one error lists (then one entry counting the rest): error details must stay
#: small enough to arrive (see ``api/errors.py``).
MAX_LISTED = 10


class Violations:
    """Collects every violation of a request so the caller sees them all at once."""

    def __init__(self) -> None:
        self.items: list[FieldViolation] = []

    def add(self, fieldname: str, description: str) -> None:
        self.items.append(FieldViolation(fieldname, description))

    def raise_if_any(self, *, max_listed: int | None = MAX_LISTED) -> None:
        """Raise InvalidArgument listing the violations (at most ``max_listed`` of them, then a
        count of the rest on the request itself, ``""``)."""
        if self.items:
            listed = self.items
            if max_listed is not None and len(listed) > max_listed:
                rest = len(listed) - max_listed
                listed = [*listed[:max_listed], FieldViolation("", f"{rest} more violations not listed")]
            summary = "; ".join(f"{v.field}: {v.description}" if v.field else v.description for v in listed)
            raise InvalidArgument(f"invalid request: {summary}", violations=tuple(listed))


def check_collection(v: Violations, fieldname: str, name: str) -> None:
    if not valid_collection_name(name):
        v.add(
            fieldname,
            "collection names are 1–64 characters of a–z, 0–9, '_' and '-', starting with a letter or digit",
        )


def check_content(v: Violations, fieldname: str, content: str, limits: Limits) -> None:
    if is_blank(content):
        v.add(fieldname, "must not be empty")
    elif len(content) > limits.max_content_chars:
        v.add(fieldname, f"at most {limits.max_content_chars} characters (got {len(content)})")
    elif "\x00" in content:
        v.add(fieldname, "must not contain NUL characters")


def check_importance(v: Violations, fieldname: str, importance: int) -> None:
    if not 1 <= importance <= 10:
        v.add(fieldname, f"must be between 1 and 10 (got {importance})")


def normalise_tags(v: Violations, fieldname: str, tags: Iterable[str], limits: Limits) -> tuple[str, ...]:
    out: list[str] = []
    seen: set[str] = set()
    for i, raw in enumerate(tags):
        tag = raw.strip()
        if is_blank(tag):
            v.add(f"{fieldname}[{i}]", "tags must not be empty")
            continue
        if len(tag) > limits.max_tag_chars:
            v.add(f"{fieldname}[{i}]", f"at most {limits.max_tag_chars} characters")
            continue
        if tag.startswith(TRIGGER_TAG_PREFIX):
            name = normalise_trigger(tag[len(TRIGGER_TAG_PREFIX) :])
            if not valid_trigger(name):
                v.add(f"{fieldname}[{i}]", f"{tag!r}: {TRIGGER_NAME_RULE}")
                continue
            tag = TRIGGER_TAG_PREFIX + name
        if tag not in seen:
            seen.add(tag)
            out.append(tag)
    if len(out) > limits.max_tags:
        v.add(fieldname, f"at most {limits.max_tags} tags (got {len(out)})")
    return tuple(out)


def check_metadata(v: Violations, fieldname: str, metadata: Mapping[str, str], limits: Limits) -> None:
    if len(metadata) > limits.max_metadata_entries:
        v.add(fieldname, f"at most {limits.max_metadata_entries} entries (got {len(metadata)})")
    for key, value in metadata.items():
        if not key or len(key) > limits.max_metadata_key_chars:
            v.add(f"{fieldname}[{key[:32]!r}]", f"keys must be 1–{limits.max_metadata_key_chars} characters")
        if len(value) > limits.max_metadata_value_chars:
            v.add(
                f"{fieldname}[{key[:32]!r}]",
                f"values must be at most {limits.max_metadata_value_chars} chars",
            )


#: Session and agent ids: 1–128 characters of letters, digits and ``. _ : @ / + -``, starting with
#: a letter or digit (matched with ``fullmatch``).
SESSION_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@/+-]{0,127}")


def check_session_id(v: Violations, fieldname: str, value: str) -> None:
    """An optional session or agent id ("" = not given)."""
    if value and SESSION_ID_RE.fullmatch(value) is None:
        v.add(
            fieldname,
            "must be 1–128 characters of letters, digits and . _ : @ / + -, starting with a letter or digit",
        )


def check_unit_interval(v: Violations, fieldname: str, value: float) -> None:
    if math.isnan(value) or not 0.0 <= value <= 1.0:
        v.add(fieldname, f"must be between 0 and 1 (got {value})")


def check_request_id(v: Violations, fieldname: str, request_id: str, limits: Limits) -> None:
    if len(request_id) > limits.max_request_id_chars:
        v.add(fieldname, f"at most {limits.max_request_id_chars} characters")
