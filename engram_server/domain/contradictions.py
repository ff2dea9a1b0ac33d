"""Contradictions: when a new memory states a different value for the same subject as a stored one,
the stored one is superseded (pure rules; the optional LLM judge's prompt, schema and parser are at
the end: :data:`JUDGE_SYSTEM_PROMPT`, :data:`JUDGE_SCHEMA`, :func:`judge_prompt`,
:func:`parse_judgement`; the call is made in :mod:`engram_server.domain.service.superseding`).

The write gate lists the stored memories near a new one (calibrated similarity ≥ 0.70) and, for
each, the specifics on which they disagree (:func:`engram_server.domain.specifics.conflicts`).
:func:`judge` decides, for one such pair, whether the new memory *replaces* the stored one:

1. **Change statements.** The new text says that something changed: "moved from X to Y",
   "switched to", "changed to", "no longer", "now uses", "instead of"; 搬到, 改为, 改成, 换成, 不再,
   现在改 … With an old value named ("from Express", "从北京") the stored memory must contain it
   (similarity ≥ ``cue_threshold``); without one the pair must replace a value (a specific both
   hold with other values, while the content words outside the specifics overlap ≥
   ``cue_overlap``; or a negation of the same statement, overlap ≥ ``word_overlap``), or be a
   restatement (≥ ``specifics_threshold``).
   Two narrated past occurrences ("ran 5 km", 跑了) with other numbers are never a change without a
   change statement.
2. **Changed specifics.** Without a change cue: a pair (≥ ``cue_threshold``) whose specifics
   conflict (a number, date, name or negation) while the rest of the sentence is
   the same (the content words outside the specifics overlap by ≥ ``word_overlap``, and no word of
   one is swapped for another word: "the web team's standup is at 9:00" / "the platform team's
   standup is at 10:00" are two teams): "The staging cluster has 12 nodes." → "… 16 nodes.";
   "The user eats meat." → "The user does not eat meat."
3. **Different subjects are never superseded.** A conflicting value that *labels* the subject (a
   number or code after a label noun: "Invoice 4471", "ticket OPS-1182", "#58231", "发票4471",
   "4471号"), or a different name at the start of the sentence ("Priya leads …" / "Maria leads …"),
   makes the pair two subjects, not one changed fact. A whole number right after *any* noun is
   a counter-like label too ("writer 1 noted …" / "writer 2 noted …", "locker 12", "员工12负责…"):
   not after a function word, verb form, month or quantity word ("is 100", "has 12 nodes",
   "every 30 days", "runs 4", "May 3", "是30秒", "有12个"), not before a unit ("tenant 3 km",
   "3个", "2021年"), not a version after a name in mid-sentence ("uses PostgreSQL 14"), and not
   inside the change statement ("upgraded from PostgreSQL 14 to PostgreSQL 16"). A record told
   apart by such a label that is in fact the same subject is left undecided (both memories stay
   searchable): losing a different fact from search is worse than keeping an outdated one.

Everything else is "undecided": the LLM judge (when configured) may still call it a contradiction.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import rjieba

from engram_server.domain.specifics import (
    EN_FUNCTION_WORDS,
    MONTH_WORDS,
    VALUE_WORDS,
    ZH_COUNTERS,
    Conflict,
    content_words,
    extract,
)

__all__ = [
    "JUDGE_SCHEMA",
    "JUDGE_SYSTEM_PROMPT",
    "Basis",
    "ContradictionMode",
    "ContradictionPolicy",
    "Verdict",
    "change_cue",
    "judge",
    "judge_prompt",
    "parse_judgement",
]


class ContradictionMode(StrEnum):
    """What the write gate does with a contradicted memory."""

    #: Mark the older memory superseded by the new one (history; never searched again).
    SUPERSEDE = "supersede"
    #: Only report it in the add response's ``conflicts``.
    REPORT = "report"
    #: Do not look for contradictions.
    OFF = "off"


class Basis(StrEnum):
    """Why a pair is a contradiction."""

    CHANGE_STATEMENT = "change_statement"
    SPECIFICS = "specifics"
    LLM = "llm"


@dataclass(frozen=True, slots=True)
class ContradictionPolicy:
    mode: ContradictionMode = ContradictionMode.SUPERSEDE
    #: Calibrated similarity at or above which a change statement naming the old value is checked.
    cue_threshold: float = 0.72
    #: Calibrated similarity at or above which a change statement alone (no replaced value, no old
    #: value named) makes a contradiction: the scale's restatement level.
    specifics_threshold: float = 0.82
    #: Least overlap (Jaccard) of the content words outside the specifics for changed specifics.
    word_overlap: float = 0.6
    #: The same for a change statement that replaces a value ("switched to", "改为" …).
    cue_overlap: float = 0.3
    #: Protected types (identity, directive) are superseded only by a memory of the same type.
    protect_types: bool = True


@dataclass(frozen=True, slots=True)
class Verdict:
    """One pair's judgement: ``contradiction`` True/False, or None when the rules cannot tell."""

    contradiction: bool | None
    basis: Basis | None
    explanation: str


# ------------------------------------------------------------------ change cues

_EN_VERBS = (
    r"moved|switched|changed|migrated|upgraded|downgraded|relocated|transferred|shifted|went|"
    r"converted|rescheduled|postponed|pushed|moved back|renamed|updated|raised|lowered|increased|"
    r"decreased|reduced|bumped|cut|dropped|changing|switching|moving|migrating"
)
#: Within one clause: any character but a clause end (a dot inside "5.7" or "v3.4" is not one).
_CLAUSE = r"(?:[^.;,]|\.(?=\S))"
_RE_EN_FROM_TO = re.compile(
    rf"\b(?:{_EN_VERBS})\b(?:[^.;]|\.(?=\S))*?\bfrom\s+(?P<old>{_CLAUSE}+?)\s+(?:to|into|with)\s+"
    rf"(?P<new>{_CLAUSE}+)",
    re.IGNORECASE,
)
_RE_EN_INSTEAD = re.compile(rf"\binstead of\s+(?P<old>{_CLAUSE}+)", re.IGNORECASE)
_RE_EN_CUE = re.compile(
    rf"\b(?:(?:{_EN_VERBS})\s+(?:to|over to|it to|them to|back to|into)|no longer|not anymore|"
    r"any ?more|stopped|quit|gave up|now (?:uses?|is|are|lives?|works?|prefers?|has|have|runs?|"
    r"leads?|goes|takes?)|has become|became|is now|are now|was replaced by|were replaced by|"
    r"replaced)\b",
    re.IGNORECASE,
)
_RE_ZH_FROM_TO = re.compile(
    r"(?:从|由)(?P<old>[^，。,.；;]{1,20}?)(?:搬到|搬去|改为|改成|换成|换到|调整为|调整到|变成|变为|"
    r"更改为|更换为|迁移到|迁到|转到|升级到|升级为|降到|涨到|提高到|推迟到|提前到|延期到|到)"
    r"(?P<new>[^，。,.；;]{1,20})"
)
_RE_ZH_CUE = re.compile(
    r"搬到|搬去|改为|改成|换成|换到|调整为|调整到|变成|变为|更改为|更换为|迁移到|迁到|转到|升级到|"
    r"不再|已经不|现在改|现在用|现在是|现在在|改用|改到|推迟到|提前到|延期到|取代|代替"
)


@dataclass(frozen=True, slots=True)
class Cue:
    """A change statement found in a text: the words that say it and, if named, the old value."""

    words: str
    old: str | None = None
    new: str | None = None


#: Conflict kinds that are a replaced word rather than a value (specifics.conflicts).
_WORD_KINDS = frozenset(("term", "action"))


def change_cue(text: str) -> Cue | None:
    """The change statement in ``text`` ("moved from X to Y", "no longer", 改为 …), or None."""
    m = _RE_EN_FROM_TO.search(text) or _RE_ZH_FROM_TO.search(text)
    if m:
        return Cue(m[0], m["old"].strip(), m["new"].strip())
    m = _RE_EN_INSTEAD.search(text)
    if m:
        return Cue(m[0], m["old"].strip())
    m = _RE_EN_CUE.search(text) or _RE_ZH_CUE.search(text)
    if m:
        return Cue(m[0])
    return None


# ------------------------------------------------------------------ subject labels

_LABEL_NOUNS_TEXT = """
    invoice invoices ticket tickets order orders issue issues bug bugs pr prs case cases room rooms
    flight flights account accounts table tables step steps item items task tasks incident incidents
    request requests job jobs build builds batch batches release releases version versions sprint
    sprints chapter chapters section sections page pages line lines row rows invoice# no no. number
    id ticket# order# contract contracts customer customers patient patients unit units lot lots
    server servers node nodes host hosts cluster clusters project projects phase phases milestone
    milestones gate gates seat seats bus route routes apartment apartments floor floors building"""
_LABEL_NOUNS = frozenset(_LABEL_NOUNS_TEXT.split())
_ZH_LABEL_BEFORE = re.compile(
    r"(?:发票|订单|工单|房间|航班|编号|单号|账号|账户|合同|客户|病人|患者|工号|车次|座位|版本|任务|"
    r"事故|第)\s*$"
)
_ZH_LABEL_AFTER = re.compile(r"^\s*(?:号|次航班|号房|号楼|号线)")
_RE_CJK_START = re.compile("[\u3400-\u4dbf\u4e00-\u9fff]")
#: A narrated past occurrence ("ran 5 km", "paid $40 yesterday", 跑了, 昨天): two of them with other
#: numbers are two occurrences, not a changed fact (unless a change statement says otherwise).
_RE_EN_PAST = re.compile(
    r"\b(?:was|were|did|had|went|ran|paid|bought|met|took|ate|visited|sent|spent|saw|made|got|"
    r"walked|cooked|read|wrote|called|yesterday|ago|last (?:week|month|year|night|time))\b",
    re.IGNORECASE,
)
_RE_ZH_PAST = re.compile(r"了|过|昨天|前天|上周|上个月|去年|刚才")
_RE_TOKEN = re.compile(r"[A-Za-z\u00c0-\u024f0-9#][A-Za-z\u00c0-\u024f0-9#\-_.@/:+]*")


#: Words after which a number is an amount, not a label ("every 30 days", "about 40", "top 10").
_QUANTITY_WORDS_TEXT = """
    every each per about around approximately roughly nearly almost only just exactly least most
    over under up down total top first last next past within plus minus times x aged age cost"""
_QUANTITY_WORDS = frozenset(_QUANTITY_WORDS_TEXT.split())
#: Words after a number that make it an amount ("3 km", "12 GB", "5 years").
_UNIT_WORDS_TEXT = """
    km m cm mm kg g mg lb lbs gb mb tb kb ms s sec secs h hr hrs min mins percent pct degrees
    years year days day hours hour minutes minute seconds second weeks week months month times
    dollars euros usd eur people users nodes replicas"""
_UNIT_WORDS = frozenset(_UNIT_WORDS_TEXT.split())
#: Characters after a Chinese number that make it a count or unit ("3个", "30秒", "2021年").
_ZH_UNIT_AFTER = frozenset(ZH_COUNTERS | set("秒分钟时公里米克斤磅美欧度层楼套间周遍轮"))
_RE_WORD_BEFORE = re.compile(r"(?:^|[^A-Za-z\u00c0-\u024f0-9])([A-Za-z\u00c0-\u024f]+)[ \t]*$")
_RE_WORD_AFTER = re.compile(r"^[ \t]*([A-Za-z\u00c0-\u024f%]+)")


def _value_spans(text: str, value: str) -> list[tuple[int, int]]:
    """Where a normalised specific value (as :func:`extract` gives it) is written in ``text``."""
    if value.startswith(("month:", "weekday:")):
        return []
    spans = [(start, end) for start, end, v in extract(text).number_spans if v == value]
    if spans:
        return spans
    return [(m.start(), m.end()) for m in re.finditer(re.escape(value), text, re.IGNORECASE)]


def _counter_label(text: str, start: int, end: int) -> bool:
    """Whether the whole number at ``text[start:end]`` is a counter-like label after a noun
    ("writer 1 noted …", "locker 12", "员工12负责"; see the module doc, rule 3)."""
    if not text[start:end].isdigit():
        return False  # "3.5", "2,400", "9:30", "twenty": amounts and times, not labels
    before, after = text[:start], text[end:]
    m = _RE_WORD_BEFORE.search(before)
    if m:
        word = m[1]
        low = word.casefold()
        if (
            low in EN_FUNCTION_WORDS
            or low in _QUANTITY_WORDS
            or low in MONTH_WORDS
            or low.endswith(("ed", "ing"))
            or (low.endswith("s") and not low.endswith(("ss", "us", "is")))
            or (word[0].isupper() and before[: m.start(1)].strip() != "")  # "PostgreSQL 14": a version
        ):
            return False
        unit = _RE_WORD_AFTER.match(after)
        return not (unit and unit[1].casefold() in _UNIT_WORDS) and not after.lstrip().startswith("%")
    if not before or not _RE_CJK_START.match(before[-1]) or after[:1] in _ZH_UNIT_AFTER:
        return False
    at = 0
    for word, tag in rjieba.tag(before):
        at += len(word)
        if at == len(before):
            return tag.startswith("n") and tag != "nr"  # a noun, not a person's name ("曹娟2021年")
    return False


def _labels_subject(text: str, value: str, cue: Cue | None = None) -> bool:
    """Whether ``value`` (a number or code) names what ``text`` is about: it follows a label noun
    ("Invoice 4471", "ticket #58231", "发票4471"), is a ``#`` number, or is a counter-like label
    after any noun (:func:`_counter_label`) outside the change statement ``cue``."""
    plain = text.replace(",", "")
    in_cue = (text.find(cue.words), text.find(cue.words) + len(cue.words)) if cue else (-1, -1)
    for start, end in _value_spans(text, value):
        before = text[:start]
        if before.rstrip().endswith("#"):
            return True
        words = _RE_TOKEN.findall(before[-40:])
        if words and words[-1].casefold().rstrip(".#:") in _LABEL_NOUNS:
            return True
        if _ZH_LABEL_BEFORE.search(before[-8:]) or _ZH_LABEL_AFTER.match(plain[end : end + 4]):
            return True
        if not in_cue[0] <= start < in_cue[1] and _counter_label(text, start, end):
            return True
    return False


_ARTICLES = frozenset(("the", "a", "an", "our", "my", "their", "his", "her"))


def _leads(text: str, name: str) -> bool:
    """Whether the name is in the capitalised run that starts ``text`` (the sentence's subject:
    "Priya leads …", "Mia Baker moved …")."""
    if _RE_CJK_START.match(name):
        return text.lstrip().startswith(name)
    run: list[str] = []
    end = len(text) - len(text.lstrip())
    for m in _RE_TOKEN.finditer(text):
        if m.start() != end and text[end : m.start()].strip():
            break  # the run is the words at the very start, separated by spaces only
        end = m.end()
        word = m[0]
        if not run and word.casefold() in _ARTICLES:
            continue
        if run and not word[:1].isupper():
            break
        run.append(word)
        if len(run) == 4:
            break
    return name in {re.sub(r"'s$", "", w.casefold()) for w in run}


def _different_subjects(
    existing: str, new: str, found: Sequence[Conflict], cue: Cue | None = None
) -> str | None:
    """Why the two texts are about different subjects (a label or a leading name differs), or None.
    ``cue`` is the new text's change statement (a value inside it is the changed value)."""
    for c in found:
        if c.kind in ("number", "identifier"):
            for v in c.existing:
                if _labels_subject(existing, v):
                    return f"{v!r} labels what the stored memory is about"
            for v in c.new:
                if _labels_subject(new, v, cue):
                    return f"{v!r} labels what the new memory is about"
        elif c.kind == "name":
            for v in c.existing:
                if _leads(existing, v):
                    return f"the stored memory is about {v!r}"
            for v in c.new:
                if _leads(new, v):
                    return f"the new memory is about {v!r}"
    return None


def _words_outside(text: str, found: Sequence[Conflict], cue: Cue | None = None) -> frozenset[str]:
    """The content words of ``text`` outside its conflicting values and its change statement."""
    values = {v.casefold() for c in found for v in (*c.existing, *c.new)}
    # A value as the text writes it ("十二" for 12, "twenty" for 20) is the value, not another word.
    values |= {text[a:b].casefold() for a, b, v in extract(text).number_spans if v in values}
    values |= {w for v in list(values) for w in content_words(v)}
    if cue is not None:
        values |= content_words(cue.words)
    return frozenset(w for w in content_words(text) if w not in values and not w.isdigit())


def _numbers_changed_in_place(existing: str, new: str) -> int:
    """How many numbers differ position by position when both texts hold as many ("note 1 on topic
    7" / "note 7 on topic 49": 2, though the sets differ in one); 0 when the counts differ."""
    a = [v for _, _, v in extract(existing).number_spans]
    b = [v for _, _, v in extract(new).number_spans]
    if len(a) != len(b):
        return 0
    return sum(x != y for x, y in zip(a, b, strict=True))


def _not_values(words: frozenset[str]) -> frozenset[str]:
    """``words`` without those that are a specific's value ("friday", "twelve", "twenty-five")."""
    return frozenset(w for w in words if not all(p in VALUE_WORDS for p in w.split("-")))


def _overlap(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0


def _describe(found: Sequence[Conflict]) -> str:
    parts = []
    for c in found:
        if c.kind == "negation":
            parts.append("negation differs")
        else:
            parts.append(f"{c.kind} {', '.join(c.existing) or '—'} → {', '.join(c.new) or '—'}")
    return "; ".join(parts)


#: A year as a date ("2019", "in 2019", "2019年"; 1900–2099, not part of a longer number).
_RE_YEAR = re.compile(
    r"(?<!\d)(?<!\d[.,])(?:19|20)\d{2}(?!\d|[.,]\d|%)"
    r"(?!\s*(?:元|块|美元|欧元|dollars?|euros?|usd|eur|km|kg|m\b))"
)


def _years(text: str) -> list[int]:
    return [int(m[0]) for m in _RE_YEAR.finditer(text)]


def _dated_earlier(existing: str, new: str) -> str | None:
    """Why a change statement is older history than the stored memory (the new text dates its
    change before every year the stored one names: "陈明2018年搬到了广州。" after
    "陈明2024年搬到了武汉。"), or None. A change dated the same year or later may replace it."""
    a, b = _years(existing), _years(new)
    if a and b and max(b) < min(a):
        return f"the new memory's change is dated {max(b)}, before the stored memory's {min(a)}"
    return None


_RE_ZH_AFTER_CUE = re.compile(r"^[了过]?([\u3400-\u4dbf\u4e00-\u9fff]{1,8}?)(?:[了的，。,.；;！!]|$)")
_RE_EN_AFTER_CUE = re.compile(
    r"^\s+(?:the\s+|a\s+|an\s+)?([A-Za-z][\w-]*(?:\s+[A-Z][\w-]*)*(?:\s+\d[\d:.,]*\d|\s+\d)?)"
)


#: Chinese change statements that lead to no new value ("no longer", "replaces").
_ZH_NOT_DESTINATION = frozenset(("不再", "已经不", "取代", "代替"))


def _destination_stated(existing: str, new: str, cue: Cue) -> bool:
    """Whether what the new memory's change statement leads to (the words right after "moved to",
    "switched to", 搬到, 改成 …) is already in the stored memory: "朱磊2020年搬到了西安。" does not
    replace "朱磊在西安的月租是6200元。", it agrees with it."""
    at = new.find(cue.words)
    chinese = _RE_CJK_START.match(cue.words) is not None
    leads_to = (
        cue.words not in _ZH_NOT_DESTINATION
        if chinese
        else cue.words.split()[-1].casefold() in ("to", "into")
    )
    if at < 0 or not leads_to:
        return False
    rest = new[at + len(cue.words) :]
    m = _RE_ZH_AFTER_CUE.match(rest) if chinese else _RE_EN_AFTER_CUE.match(rest)
    if m is None:
        return False
    target = m[1].strip().casefold()
    if not target or target in EN_FUNCTION_WORDS or target.isdigit():
        return False
    if chinese:
        return target in existing.casefold()
    return re.search(rf"(?<!\w){re.escape(target)}(?!\w)", existing.casefold()) is not None


def judge(
    existing: str,
    new: str,
    similarity: float,
    found: Sequence[Conflict],
    policy: ContradictionPolicy | None = None,
) -> Verdict:
    """Whether ``new`` replaces ``existing`` (see the module doc). ``found`` are the specifics on
    which they disagree; ``similarity`` is calibrated."""
    pol = policy or ContradictionPolicy()
    if similarity < pol.cue_threshold:
        return Verdict(False, None, "not about the same thing")
    # A word replaced by another thing of its kind (kitchen → bathroom, cat → dog) may name another
    # subject as well as a changed value: it never decides alone; its words stay in the comparison
    # of the rest of the sentences below (where a differing word leaves the pair undecided). So
    # does another verb on the same thing (sold → lent): another act, maybe another occurrence.
    terms = [c for c in found if c.kind in _WORD_KINDS]
    found = [c for c in found if c.kind not in _WORD_KINDS]
    cue = change_cue(new)
    different = _different_subjects(existing, new, found, cue)
    if different is not None:
        return Verdict(False, None, f"different subjects: {different}")
    a, b = _words_outside(existing, found), _words_outside(new, found, cue)
    overlap = _overlap(a, b)
    # A replaced value: a kind of specific both texts hold with other values, or a negation flip.
    replaced = any(c.kind == "negation" or (c.existing and c.new) for c in found)
    # For a change statement, a negation flip replaces something only when it negates the same
    # statement (the rest overlaps as for changed specifics): "谢娟不吃海鲜。" is not what
    # "谢娟2024年搬到了北京。" changes, though one has a negation and the other not.
    value_replaced = any(c.kind != "negation" and c.existing and c.new for c in found)
    negation_flipped = any(c.kind == "negation" for c in found) and overlap >= pol.word_overlap
    if cue is not None:
        earlier = _dated_earlier(existing, new)
        if earlier is not None:
            return Verdict(None, None, earlier)
        if cue.old is None and _destination_stated(existing, new, cue):
            return Verdict(None, None, "the stored memory already states what the change leads to")
        if cue.old is not None:
            old = cue.old.casefold()
            key_words = content_words(cue.old)
            if old in existing.casefold() or (key_words and key_words <= content_words(existing)):
                return Verdict(
                    True,
                    Basis.CHANGE_STATEMENT,
                    f"the new memory says it changed ({cue.words!r}) from a value the stored one states",
                )
        if (value_replaced and overlap >= pol.cue_overlap) or negation_flipped:
            return Verdict(
                True,
                Basis.CHANGE_STATEMENT,
                f"the new memory says it changed ({cue.words!r}): {_describe(found)}",
            )
        if similarity >= pol.specifics_threshold:
            return Verdict(
                True,
                Basis.CHANGE_STATEMENT,
                f"the new memory says it changed ({cue.words!r}); the stored one says the same thing before"
                + (f" ({_describe(found)})" if found else ""),
            )
        return Verdict(None, None, "a change statement, but not clearly about the stored memory")
    if not found:
        if terms:
            return Verdict(None, None, f"a word differs ({_describe(terms)}): another thing of its kind")
        return Verdict(None, None, "no specific differs")
    if _RE_EN_PAST.search(existing) or _RE_EN_PAST.search(new) or _RE_ZH_PAST.search(existing + new):
        return Verdict(None, None, "two narrated occurrences, not a changed fact")
    if {c.kind for c in found} <= {"identifier"}:
        return Verdict(False, None, "only identifiers differ: different things")
    if overlap < pol.word_overlap:
        return Verdict(None, None, f"the rest of the sentence differs (overlap {overlap:.2f})")
    only_a, only_b = _not_values(a - b), _not_values(b - a)
    if only_a and only_b:  # "the web team's standup is at 9:00" / "the platform team's … at 10:00"
        swapped = f"{', '.join(sorted(only_a))} → {', '.join(sorted(only_b))}"
        return Verdict(None, None, f"a word differs as well ({swapped}): likely another subject")
    if not replaced:  # a value one side lacks entirely adds a detail rather than changing one
        return Verdict(None, None, "one memory adds a detail the other lacks")
    changed = sum(max(len(c.existing), len(c.new)) for c in found if c.kind != "negation")
    changed = max(changed, _numbers_changed_in_place(existing, new))
    if changed > 1:  # without a change statement, several new values read as another record
        return Verdict(None, None, f"several values differ ({_describe(found)}): likely another record")
    return Verdict(True, Basis.SPECIFICS, f"the same statement with another value: {_describe(found)}")


# ------------------------------------------------------------------ the LLM judge

JUDGE_SYSTEM_PROMPT = """\
You are the contradiction check of a long-term memory system. You receive one NEW memory and \
numbered STORED memories. For each stored memory decide whether the new memory contradicts it \
about the same subject, so that the stored memory is now out of date (a changed value, a move, a \
reversed preference, a negation). Two memories about different subjects (two invoices, two \
people, two projects) do not contradict, and a memory that adds detail does not contradict. \
Answer with a JSON object only."""

JUDGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["verdicts"],
    "properties": {
        "verdicts": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["index", "contradicts", "explanation"],
                "properties": {
                    "index": {"type": "integer"},
                    "contradicts": {"type": "boolean"},
                    "explanation": {"type": "string"},
                },
            },
        }
    },
}


def judge_prompt(new: str, stored: Sequence[str]) -> str:
    lines = [f"NEW: {new}", "STORED:"]
    lines.extend(f"[{i}] {text}" for i, text in enumerate(stored, start=1))
    return "\n".join(lines)


def parse_judgement(data: dict[str, Any], count: int) -> dict[int, tuple[bool, str]]:
    """The LLM's verdicts by 0-based index (entries out of range or malformed are skipped)."""
    out: dict[int, tuple[bool, str]] = {}
    items = data.get("verdicts")
    if not isinstance(items, list):
        return out
    for item in items:
        if not isinstance(item, dict):
            continue
        index, verdict = item.get("index"), item.get("contradicts")
        if isinstance(index, bool) or not isinstance(index, int) or not 1 <= index <= count:
            continue
        if not isinstance(verdict, bool):
            continue
        explanation = item.get("explanation")
        out[index - 1] = (verdict, explanation.strip()[:500] if isinstance(explanation, str) else "")
    return out


def specifics_of(text: str) -> int:
    """How many specifics a text carries (numbers, dates, identifiers): for tests and the eval."""
    s = extract(text)
    return sum(s.numbers.values()) + sum(s.dates.values()) + sum(s.identifiers.values())
