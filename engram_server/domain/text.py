"""Text facts the ranking and the write gate need (pure): which script a text is written in.

Scripts are told apart by **words**, not letters: a run of Chinese (Japanese, Korean) characters is
segmented into words with jieba (``rjieba``), a Latin word is a run of letters and digits, joined by
``- _ .`` (``maxmemory-policy``, ``p99``, ``v3.4``: one word each). Counting letters made a Chinese
sentence carrying a few product names or code identifiers ("在 staging 环境把 Redis cluster 的
maxmemory-policy 改成 allkeys-lru") count as English: its three dozen Latin letters outweighed a
dozen Chinese characters, although it has more Chinese words than English ones.

A stored memory carries a *script tag* (:func:`script_tag`): its main script, followed by ``+`` and
the other script when it has words in both (``"cjk"``, ``"latin"``, ``"cjk+latin"``, ``"latin+cjk"``;
``""`` when it has no word at all). Search uses its main script twice (see :func:`cross_script` and
:func:`lexically_blind`): the cross-lingual offset for a memory written mainly in another script
than the question, the blind-lexical credit for a memory whose main script the question has no word
in.
"""

from __future__ import annotations

import re
from functools import lru_cache

import rjieba

__all__ = [
    "cross_script",
    "function_counts",
    "lexically_blind",
    "reads_as_question",
    "reads_as_statement",
    "script_of",
    "script_tag",
    "word_counts",
    "word_scripts",
    "zh_cut",
    "zh_tagged",
]

_CJK_CHARS = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af"
_CJK_RUN = re.compile(f"[{_CJK_CHARS}]+")
_LATIN_LETTERS = "A-Za-z\u00c0-\u024f"
#: A Latin word: starts with a letter; letters and digits, joined by - _ . (an identifier is one word).
_LATIN_WORD = re.compile(f"[{_LATIN_LETTERS}][{_LATIN_LETTERS}0-9]*(?:[-_.'’][{_LATIN_LETTERS}0-9]+)*")
_PUNCT = re.compile(r"^\W+$")


@lru_cache(maxsize=8192)
def word_counts(text: str) -> tuple[int, int]:
    """``(cjk words, latin words)`` in ``text``: CJK runs segmented by jieba, Latin words by regex
    (digits alone, punctuation and symbols are no word)."""
    latin = len(_LATIN_WORD.findall(text))
    cjk = 0
    for run in _CJK_RUN.findall(text):
        cjk += sum(1 for w in rjieba.cut(run) if w.strip() and not _PUNCT.match(w))
    return cjk, latin


#: Closed-class (function) words of English: articles, auxiliaries and copulas, prepositions,
#: conjunctions, pronouns and determiners. A general list, not chosen from any case.
_EN_FUNCTION = frozenset(
    """a an the is are was were be been being am isn't aren't wasn't weren't do does did don't doesn't
    didn't has have had will would shall should can could may might must won't can't to of in on at
    by for with from into onto about over under after before between through during without and or
    but nor so if then than as that this these those it its he she they we you i me my our your his
    her their them us him there here not no which who whom whose""".split()  # noqa: SIM905 (a word list reads best as text)
)
#: Closed-class words of Chinese: structural and aspect particles, prepositions and localisers,
#: conjunctions, copula and modal verbs, negation, pronouns, demonstratives, common measure words.
_ZH_FUNCTION = frozenset(
    """的 地 得 了 着 过 吗 呢 吧 啊 呀 嘛 在 是 把 被 给 对 从 向 往 到 跟 和 与 同 及 或 或者
    而 但 但是 因为 所以 如果 虽然 然后 先 再 就 都 也 还 又 才 很 太 最 不 没 没有 别 要 会 能
    可以 应该 上 里 中 下 内 外 前 后 我 你 他 她 它 我们 你们 他们 她们 这 那 这个 那个 这些
    那些 其 之 个 条 一 一个 一条 一下 一些""".split()  # noqa: SIM905 (a word list reads best as text)
)
#: A bracketed aside ("(虾、蟹都不能吃)", "（见上文）"): not part of the sentence's own grammar.
_ASIDE = re.compile(r"[(（][^()（）]*[)）]")


@lru_cache(maxsize=8192)
def function_counts(text: str) -> tuple[int, int]:
    """``(Chinese, English)`` function words in ``text`` outside bracketed asides: whose grammar a
    code-switched sentence is written in (its *matrix language*)."""
    body = _ASIDE.sub(" ", text)
    latin = sum(1 for w in _LATIN_WORD.findall(body) if w.lower() in _EN_FUNCTION)
    cjk = 0
    for run in _CJK_RUN.findall(body):
        cjk += sum(1 for w in rjieba.cut(run) if w in _ZH_FUNCTION)
    return cjk, latin


#: Chinese aspect particles: the word right before one is a verb (选了, 去过, 看着).
ZH_ASPECT = frozenset("了过着")


def _glued_name(word: str, tag: str, following: str) -> bool:
    """One of jieba's errors: its HMM glues a one-character verb onto a two-character person name
    (刘洋选了, 孙丽写了, 张伟选了): a three-character word tagged as a person's name, right before
    an aspect particle, is the name and the verb the particle marks."""
    return len(word) == 3 and tag.startswith("nr") and following[:1] in ZH_ASPECT


@lru_cache(maxsize=8192)
def zh_tagged(text: str) -> tuple[tuple[str, str], ...]:
    """jieba's words of ``text`` with their part-of-speech tags (``rjieba.tag``), a one-character
    verb glued onto a person's name cut off again (刘洋选了 → 刘洋 ``nr`` | 选 ``v`` | 了)."""
    tags = rjieba.tag(text)
    out: list[tuple[str, str]] = []
    for k, (word, tag) in enumerate(tags):
        if _glued_name(word, tag, tags[k + 1][0] if k + 1 < len(tags) else ""):
            out += [(word[:2], tag), (word[2], "v")]
        else:
            out.append((word, tag))
    return tuple(out)


@lru_cache(maxsize=8192)
def zh_cut(text: str) -> tuple[str, ...]:
    """jieba's words of ``text`` (``rjieba.cut``), a one-character verb glued onto a person's name
    cut off again (see :func:`zh_tagged`)."""
    cuts = rjieba.cut(text)
    out: list[str] = []
    for k, word in enumerate(cuts):
        following = cuts[k + 1] if k + 1 < len(cuts) else ""
        if (
            len(word) == 3
            and following[:1] in ZH_ASPECT
            and _glued_name(word, zh_tagged(word)[0][1], following)
        ):
            out += [word[:2], word[2]]
        else:
            out.append(word)
    return tuple(out)


def script_of(text: str) -> str:
    """``"cjk"`` or ``"latin"``: the script ``text`` is written in; ``""`` if it has no word.

    A text in one script is in that script. A code-switched text, with words in both, is in the
    script of its grammar (its matrix language): the one with more function words outside bracketed
    asides (的 / 要 / 了 / 把 against is / to / the / who). "Grafana dashboard 上 p99 latency 的 panel
    要加一条 alert rule。" is Chinese though most of its words are Latin (Chinese grammar around English
    nouns); "Lin Wei is allergic to shellfish (虾、蟹都不能吃)." is English (the Chinese clause is an
    aside). Where the function words tie (or there are none), the script most of its words are
    written in decides, a tie of words counting as CJK: "Lin Wei 现在用什么编辑器写代码？" is CJK (6
    Chinese words, 2 Latin).
    """
    cjk, latin = word_counts(text)
    if not cjk and not latin:
        return ""
    if cjk and latin:
        fn_cjk, fn_latin = function_counts(text)
        if fn_cjk != fn_latin:
            return "cjk" if fn_cjk > fn_latin else "latin"
    return "cjk" if cjk >= latin else "latin"


def script_tag(text: str) -> str:
    """The main script of ``text`` (:func:`script_of`), then ``+`` and the other script when ``text``
    also has a word in it: ``"cjk"``, ``"latin"``, ``"cjk+latin"``, ``"latin+cjk"`` or ``""``."""
    main = script_of(text)
    if not main:
        return ""
    cjk, latin = word_counts(text)
    if cjk and latin:
        return "cjk+latin" if main == "cjk" else "latin+cjk"
    return main


def word_scripts(text: str) -> frozenset[str]:
    """The scripts ``text`` has any word in: a subset of ``{"cjk", "latin"}``.

    Search uses it on the query: a memory with no word in any of the query's scripts can share no
    lexical term with it (see :func:`lexically_blind`). Erring towards a script (an English stop
    word in a Chinese question) only falls back to plain lexical scoring.
    """
    cjk, latin = word_counts(text)
    out: set[str] = set()
    if cjk:
        out.add("cjk")
    if latin:
        out.add("latin")
    return frozenset(out)


def cross_script(query_script: str, tag: str) -> str:
    """The script of a memory tagged ``tag`` for the cross-lingual offset of a query written mainly
    in ``query_script``: the memory's main script when it differs from the query's, else ``""``
    (no offset).

    By words, a Chinese sentence carrying product names or identifiers ("在 staging 环境把 Redis
    cluster 的 maxmemory-policy 改成 allkeys-lru") is Chinese, so a Chinese question gives it no
    offset; by letters it counted as English and was lifted to the relevance of answers. A Chinese
    translation with one Latin token ("我的血型是 AB 型") is still Chinese for an English question.
    """
    if not query_script or not tag:
        return ""
    main = tag.split("+", maxsplit=1)[0]
    return "" if main == query_script else main


def lexically_blind(query_scripts: frozenset[str], tag: str) -> bool:
    """Whether the lexical side is (mostly) blind to a memory tagged ``tag``: the question has no word
    in the memory's main script, so a lexical score of 0 says little about it. A memory without words
    (``""``) is not blind; one that does score lexically keeps its score either way."""
    if not tag:
        return False
    return tag.split("+", maxsplit=1)[0] not in query_scripts


#: Closing marks that may follow a sentence's last punctuation mark ("He said: 'no.'", "（见上文。）").
_TRAILING_CLOSERS = "\"'”’)]）】」』》 \t\r\n"
_STATEMENT_END = frozenset(".。!！")
_QUESTION_MARKS = frozenset("?？")
_SENTENCE_BREAK = re.compile(r"[.。!！;；]\s*")
#: English words that open a question ("what is Frank's editor"); auxiliaries ("do", "can") are left
#: out: they open unpunctuated directives too ("Do not deploy on Fridays").
_EN_QUESTION_OPENERS = frozenset(("what", "when", "where", "who", "whom", "whose", "which", "why", "how"))
#: Chinese question words and sentence-final question particles.
_ZH_QUESTION = re.compile(
    r"什么|哪|谁|怎么|怎样|为什么|为何|多少|几[个点次天年月号岁]|是否|是不是|有没有|[吗呢嘛]$"
)


def reads_as_statement(text: str) -> bool:
    """Whether a search text reads as a statement (a memory an agent is about to write) rather than
    a question or keywords: it ends with ``.``, ``。``, ``!`` or ``！`` (closing quotes and brackets
    aside), has at least three words, no question mark anywhere, its last sentence does not open
    with an English question word ("what", "how", ...) and it carries no Chinese one ("什么", "哪",
    "是否", a final "吗"). Unpunctuated text ("recent decisions in the shop project") is a query.

    Search compares a statement with the stored memories as the write gate compares two memories
    (both embedded as documents, the document calibration), so the relevance it returns is the
    similarity the gate would report for the pair; a question or keywords are embedded as a query
    and read on the query scale. SearchMemoriesRequest.reading overrides the form.
    """
    if any(ch in _QUESTION_MARKS for ch in text):
        return False
    stripped = text.rstrip(_TRAILING_CLOSERS)
    if not stripped or stripped[-1] not in _STATEMENT_END:
        return False
    if _question_words(stripped):
        return False
    cjk, latin = word_counts(text)
    return cjk + latin >= 3


def _question_words(text: str) -> bool:
    """Whether ``text`` (closing marks stripped) asks with words: its last sentence opens with an
    English question word, or it carries a Chinese question word or a final question particle."""
    body = text.rstrip(".。!！")
    first = _LATIN_WORD.match(_SENTENCE_BREAK.split(body)[-1].lstrip())  # the last sentence's
    if first is not None and first.group(0).lower() in _EN_QUESTION_OPENERS:
        return True
    return _ZH_QUESTION.search(body) is not None


def reads_as_question(text: str) -> bool:
    """Whether a text reads as a question: it has a question mark (``?``, ``？``) anywhere, or asks
    with words as :func:`reads_as_statement` reads them — its last sentence opens with an English
    question word ("where does Ana live now"), or it carries a Chinese question word or a final
    question particle ("谢娟现在住在哪里", "他喝咖啡吗"). Auxiliaries alone ("Does she drink
    coffee") do not make a question without a question mark: they open directives too.

    A text is never both a statement and a question; keywords ("recent decisions in the shop
    project") are neither. UpdateMemory's locate holds a question to a stricter test than a statement
    (see ``Policy.locate_question_min_relevance``): a question names what to change, not the text.
    """
    if any(ch in _QUESTION_MARKS for ch in text):
        return True
    stripped = text.rstrip(_TRAILING_CLOSERS)
    return bool(stripped) and _question_words(stripped)
