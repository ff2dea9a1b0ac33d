"""The context pack's policy: sections, rendering, the token budget; trigger names; slots.

Pure functions over records and token counts (no storage, no model): the use case that gathers the
candidates is :mod:`engram_server.domain.service.context`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import IntEnum
from typing import Final

from engram_server.domain.model import TRIGGER_TAG_PREFIX, MemoryRecord, MemoryType

DEFAULT_TOKEN_BUDGET: Final = 2_000
MAX_TOKEN_BUDGET: Final = 32_000
#: The tag marking an open item (a pending task or question).
PENDING_TAG: Final = "pending"
#: Without ``since`` and without an earlier session, the recent window is this long.
DEFAULT_RECENT_WINDOW_SECONDS: Final = 7 * 86_400.0
#: At most this many memories from one session in the relevant section.
RELEVANT_PER_SESSION: Final = 3
RELEVANT_LIMIT: Final = 20
#: The relevant section keeps memories at or above this calibrated relevance (unrelated memories
#: score about 0.45 on the e5 scale, the same topic 0.70 and more).
RELEVANT_MIN_RELEVANCE: Final = 0.6


class SectionKind(IntEnum):
    """The pack's sections, in pack order (values as the proto's ContextSectionKind)."""

    CORE = 1
    TRIGGERS = 2
    OPEN_ITEMS = 3
    RELEVANT = 4
    RECENT = 5
    TOPICS = 6


TITLES: Final[dict[SectionKind, str]] = {
    SectionKind.CORE: "Core",
    SectionKind.TRIGGERS: "Triggers",
    SectionKind.OPEN_ITEMS: "Open items",
    SectionKind.RELEVANT: "Relevant to the task",
    SectionKind.RECENT: "Recent",
    SectionKind.TOPICS: "Topics",
}

#: Each section's share of the budget in the first pass (what one section leaves unspent passes to
#: the next; whatever is left after the last goes, in a second pass, to the candidates that did not
#: fit, in section order). Without a query the relevant share goes to recent.
SHARES: Final[dict[SectionKind, float]] = {
    SectionKind.CORE: 0.40,
    SectionKind.TRIGGERS: 0.05,
    SectionKind.OPEN_ITEMS: 0.10,
    SectionKind.RELEVANT: 0.20,
    SectionKind.RECENT: 0.20,
    SectionKind.TOPICS: 0.05,
}


class SinceSource(IntEnum):
    """Where the recent window's start came from (values as the proto's SinceSource)."""

    REQUEST = 1
    LAST_SESSION = 2
    DEFAULT_WINDOW = 3


@dataclass(frozen=True, slots=True)
class TopicEntry:
    """One topic of the topic index, as the pack shows it."""

    id: str
    name: str
    size: int
    #: The collection the topic belongs to.
    collection: str = ""


@dataclass(frozen=True, slots=True)
class Item:
    """A candidate entry of a section: rendered text, why it was chosen, what it is."""

    text: str
    reason: str
    memory: MemoryRecord | None = None
    slot: str = ""
    trigger: str = ""
    count: int = 0
    topic: TopicEntry | None = None
    tokens: int = 0
    #: For memory items built with an empty ``text``: render it with the update date (recent).
    dated: bool = False


@dataclass(slots=True)
class Section:
    kind: SectionKind
    title: str
    items: list[Item] = field(default_factory=list)
    tokens: int = 0
    omitted: int = 0


# ------------------------------------------------------------------ rendering


def _day(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d")


def bullet(text: str) -> str:
    """A Markdown list entry: continuation lines indented, blank lines dropped."""
    lines = [ln.rstrip() for ln in text.strip().splitlines() if ln.strip()]
    return "- " + "\n  ".join(lines)


def memory_label(r: MemoryRecord, *, dated: bool = False) -> str:
    label = f"{r.type.value}, importance {r.importance}"
    if dated:
        label += f", {_day(r.updated_at)}"
    return f"_({label})_"


def memory_text(r: MemoryRecord, *, dated: bool = False) -> str:
    return bullet(f"{r.content} {memory_label(r, dated=dated)}")


def slot_text(name: str, content: str, collection: str | None) -> str:
    where = f" ({collection})" if collection else ""
    return bullet(f"**{name}**{where}: {content}")


def topic_text(t: TopicEntry, with_collection: bool) -> str:
    """A topic entry; with the collection when the pack spans several (GetTopic takes both)."""
    where = f", collection `{t.collection}`" if with_collection and t.collection else ""
    return bullet(f"{t.name} ({t.size} memories, id `{t.id}`{where})")


def heading(section: Section, *, query: str = "", since: float | None = None) -> str:
    if section.kind is SectionKind.RECENT and since is not None:
        return f"## {section.title} (since {_day(since)})"
    if section.kind is SectionKind.TRIGGERS:
        return f"## {section.title} (recall with GetTriggers before the action)"
    return f"## {section.title}"


# ------------------------------------------------------------------ ordering


def core_order(r: MemoryRecord) -> tuple[int, int, float, str]:
    """Identity before directive; then by importance, the latest update, id."""
    return (0 if r.type is MemoryType.IDENTITY else 1, -r.importance, -r.updated_at, r.id)


def by_importance(r: MemoryRecord) -> tuple[int, float, str]:
    return (-r.importance, -r.updated_at, r.id)


def by_update(r: MemoryRecord) -> tuple[float, str]:
    return (-r.updated_at, r.id)


# ------------------------------------------------------------------ the budget


def counted(item: Item, count: Callable[[str], int]) -> Item:
    """The item with its text (a memory item's is rendered now, when built without) and tokens.

    A memory item's count is that of its parts — the list marker, the content, the label — which
    is exact (the bullet only changes white space, and counts add up over white space: see
    :func:`render`) and lets one count of a memory's content serve every section and label."""
    r = item.memory
    if item.text or r is None:
        return replace(item, tokens=max(1, count(item.text)))
    label = memory_label(r, dated=item.dated)
    tokens = count("-") + count(r.content) + count(label)
    return replace(item, text=bullet(f"{r.content} {label}"), tokens=tokens)


def pack(
    sections: Sequence[Section],
    budget: int,
    heading_tokens: Sequence[int],
    *,
    has_query: bool,
    count: Callable[[str], int],
) -> bool:
    """Choose each section's items within ``budget`` tokens, in place; True when some candidate
    did not fit. ``sections[k].items`` come in as candidates, in the section's order, and are
    rendered and counted (``count`` of their text) only when the packing gets to them;
    ``heading_tokens[k]`` is what the section's heading costs once it has an item.

    First pass: each section in order takes the candidates that fit in its share of the budget
    (plus what earlier sections left), stopping at the first that does not fit (never a later,
    smaller one: the order is the ranking). Second pass: what is left of the budget goes to the
    candidates left out, section by section, in order. Items are never cut.
    """
    shares = dict(SHARES)
    if not has_query:
        shares[SectionKind.RECENT] += shares.pop(SectionKind.RELEVANT)
    chosen: list[list[Item]] = [[] for _ in sections]
    nxt = [0] * len(sections)
    spent = 0
    carry = 0.0

    def take(k: int, allowance: float) -> float:
        """Take section k's next candidates while they fit in ``allowance`` and in the budget."""
        nonlocal spent
        cands = sections[k].items
        while nxt[k] < len(cands):
            if not cands[nxt[k]].tokens:
                cands[nxt[k]] = counted(cands[nxt[k]], count)
            cost = cands[nxt[k]].tokens + (heading_tokens[k] if not chosen[k] else 0)
            if cost > allowance or spent + cost > budget:
                break
            chosen[k].append(cands[nxt[k]])
            nxt[k] += 1
            spent += cost
            allowance -= cost
        return allowance

    for k, s in enumerate(sections):
        carry = take(k, shares.get(s.kind, 0.0) * budget + carry)
    for k in range(len(sections)):
        take(k, budget - spent)
    truncated = False
    for k, s in enumerate(sections):
        s.omitted = len(s.items) - len(chosen[k])
        truncated = truncated or s.omitted > 0
        s.items = chosen[k]
        s.tokens = sum(i.tokens for i in s.items) + (heading_tokens[k] if s.items else 0)
    return truncated


def render(sections: Sequence[Section], headings: Sequence[str]) -> str:
    """The pack's Markdown: the non-empty sections, each its heading then its items, one per
    line; sections separated by a blank line.

    Its token count is the sum of the sections' ``tokens`` (their headings' and items' counts):
    the tokenizer's pieces never span white space, line breaks are white space and white space
    at the ends is not counted, so counting the parts is exact and the whole text is never
    counted again."""
    blocks = []
    for s, h in zip(sections, headings, strict=True):
        if s.items:
            blocks.append("\n".join([h, *(i.text for i in s.items)]))
    return "\n\n".join(blocks) + ("\n" if blocks else "")


# ------------------------------------------------------------------ triggers

#: A trigger name once normalised: 1–64 characters of a–z, 0–9 and ``- _ . /``, starting and
#: ending with a letter or digit; ``/`` separates a parent from a child ("deploy/prod").
TRIGGER_NAME_RE: Final = re.compile(r"[a-z0-9](?:[a-z0-9._/-]{0,62}[a-z0-9])?")
TRIGGER_NAME_RULE: Final = (
    "trigger names are 1–64 characters of a–z, 0–9 and - _ . / (white space becomes '-', "
    "upper case is lowered), starting and ending with a letter or digit, no '//'"
)


def normalise_trigger(raw: str) -> str:
    """``" Git  Push "`` -> ``"git-push"``: trimmed, lower-cased, runs of white space to '-'."""
    return "-".join(raw.strip().lower().split())


def valid_trigger(name: str) -> bool:
    return TRIGGER_NAME_RE.fullmatch(name) is not None and "//" not in name


def trigger_lineage(name: str) -> list[str]:
    """The name and its parents, most specific first: ``a/b/c`` -> ``[a/b/c, a/b, a]``."""
    parts = name.split("/")
    return ["/".join(parts[:i]) for i in range(len(parts), 0, -1)]


def trigger_names(tags: Sequence[str]) -> list[str]:
    return [t[len(TRIGGER_TAG_PREFIX) :] for t in tags if t.startswith(TRIGGER_TAG_PREFIX)]


# ------------------------------------------------------------------ slots

#: The slots every collection has, in pack order.
SLOT_NAMES: Final[tuple[str, ...]] = (
    "persona",
    "user_preferences",
    "project_context",
    "pending_items",
    "guidance",
)
MAX_SLOT_TEXT_CHARS: Final = 8_192


def slot_state_key(collection: str) -> str:
    """The store state document holding a collection's slots."""
    return "slots." + hashlib.sha256(collection.encode()).hexdigest()[:40]


def truncation_marker(removed_tokens: int) -> str:
    return f"[… {removed_tokens} earlier tokens removed …]"


def truncate_oldest(content: str, capacity: int, count: Callable[[str], int]) -> str:
    """``content`` cut from its start (its oldest lines: slots append at the end) so that it fits
    in ``capacity`` tokens with a marker saying how many tokens went. Whole lines go first; when the
    newest line alone is too long, its start is cut too (at a word boundary when there is one)."""
    total = count(content)
    if total <= capacity:
        return content
    lines = content.splitlines()
    while lines:
        rest = "\n".join(lines)
        removed = max(1, total - count(rest))
        candidate = f"{truncation_marker(removed)}\n{rest}"
        if count(candidate) <= capacity:
            return candidate
        if len(lines) == 1:
            break
        lines = lines[1:]
    line = lines[0] if lines else ""
    lo, hi = 0, len(line)  # the shortest suffix start such that marker + suffix fits
    while lo < hi:
        mid = (lo + hi) // 2
        removed = max(1, total - count(line[mid:]))
        if count(f"{truncation_marker(removed)}\n{line[mid:]}") <= capacity:
            hi = mid
        else:
            lo = mid + 1
    tail = line[lo:]
    space = tail.find(" ")
    if 0 <= space < len(tail) - 1 and lo > 0:
        tail = tail[space + 1 :]
    removed = max(1, total - count(tail))
    out = f"{truncation_marker(removed)}\n{tail}" if tail else truncation_marker(total)
    return out if count(out) <= capacity else ""
