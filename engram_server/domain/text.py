"""Text facts the ranking needs (pure)."""

from __future__ import annotations

import re

__all__ = ["script_of", "word_scripts"]

_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af]")
_LATIN = re.compile(r"[A-Za-z\u00c0-\u024f]")


def script_of(text: str) -> str:
    """``"cjk"`` or ``"latin"``: the script most of ``text``'s words are written in ("" if neither).

    A CJK character carries about as much as a short word, a Latin word takes about three letters or
    more, so a text counts as CJK when ``3 × CJK characters ≥ Latin letters``: "Lin Wei 现在用什么
    编辑器写代码？" is CJK, "Lin Wei is allergic to shellfish (虾、蟹都不能吃)." is Latin.
    """
    cjk = len(_CJK.findall(text))
    latin = len(_LATIN.findall(text))
    if not cjk and not latin:
        return ""
    return "cjk" if 3 * cjk >= latin else "latin"


def word_scripts(text: str) -> frozenset[str]:
    """The scripts ``text`` has any word in: a subset of ``{"cjk", "latin"}``.

    Search uses it on the query: a memory written in a script the query has no word in can share no
    lexical term with it (see :func:`engram_server.domain.ranking.hybrid_relevance`, ``blind``).
    Erring towards a script (an English stop word in a Chinese question) only falls back to plain
    lexical scoring.
    """
    out: set[str] = set()
    if _CJK.search(text):
        out.add("cjk")
    if _LATIN.search(text):
        out.add("latin")
    return frozenset(out)
