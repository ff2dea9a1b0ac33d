"""The specifics of a sentence, and where two sentences' specifics disagree (pure).

The write gate refuses a new memory whose embedding is a near copy of a stored one. Embeddings
barely see a changed number, id, date, name or a negation ("Invoice 4471 was paid on March 3." and
"Invoice 4472 …" sit at calibrated similarity 0.97), so before refusing, the gate compares the
*specifics* of the two texts; a pair whose specifics conflict is a different fact and is written
(reported in the near-duplicate zone with reason ``conflicting_specifics``).

What counts as a specific (English and Chinese, and text mixing both):

* ``number`` — digits (``2,400`` → 2400, ``78%``, ``#58231``, ``15th``), clock times (``9:30``,
  ``九点半`` → 9:30), Chinese numerals (``两``, ``十二``, ``八千五百``, ``五十万``, ``百分之七十八``),
  English number words (``seven``, ``twenty-five``), and the parts of an ISO date (``2026-05-01`` →
  2026, 5, 1). Amounts are their numbers (the currency sign is not compared).
* ``date`` — month and weekday names in either language (``April`` / ``四月``, ``Monday`` / ``周一``):
  the same value whatever language names it.
* ``identifier`` — tokens mixing letters and digits or joined by ``- _ . @ /`` (``OPS-1182``,
  ``v3.4.1``, ``db-eu-3``, ``4B``, ``ops@acme.io``), compared case-insensitively.
* ``name`` — Latin words written with a capital that are not function words (``Priya``, ``Denver``),
  compared when both texts have Latin words; Chinese person, place and organisation names (jieba
  tags ``nr ns nt nz``), compared when both texts have Chinese words. A name conflicts only when it
  does not occur in the other text at all (so a reordered sentence keeps its names).
* ``order`` — the order of the names two texts share, within one script: "moved from Berlin to
  Paris" and "moved from Paris to Berlin" name the same places in swapped roles. Names joined by
  ``and`` / ``or`` / ``,`` / ``&`` / 和 / 与 / 跟 / 及 / 、 form one group whose inner order does not count
  ("Anna and Tom" = "Tom and Anna"), and a pair where one text is passive (``by`` / 被 / 由 in only
  one of them: "Tom was hired by Anna") is not compared. Only two names trading places count: a
  fronted phrase ("In Paris Anna met Tom") moves one name past all the others, which is no swap.
* ``negation`` — the number of negation cues (``not``, ``n't``, ``never``, ``no``, ``without`` …;
  ``不``, ``没``, ``别``, ``未``, ``无``, ``非``, ``勿`` outside words such as ``不过``, ``特别``,
  ``无线``).

Numbers, dates and identifiers conflict when the two texts do not hold the same values (a value only
one text has is a difference too: it adds or drops a specific). Translated pairs are compared on the
script-neutral kinds (number, date, identifier, negation); names only within a script.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

from engram_server.domain.contrast import (
    contrasting,
    light_verb_restated,
    phrasal_action,
    phrasal_restated,
    synonym_swapped,
    zh_phrase_restated,
)
from engram_server.domain.text import script_of, zh_cut, zh_tagged

__all__ = [
    "EN_FUNCTION_WORDS",
    "MONTH_WORDS",
    "VALUE_WORDS",
    "ZH_COUNTERS",
    "Conflict",
    "Specifics",
    "conflicts",
    "content_words",
    "extract",
    "same_words",
]


@dataclass(frozen=True, slots=True)
class Conflict:
    """One kind of specific on which two texts disagree: the values only one of them has."""

    kind: str  # number | date | identifier | name | order | negation | term | action | antonym
    existing: tuple[str, ...]
    new: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Specifics:
    numbers: Counter[str]
    dates: Counter[str]
    identifiers: Counter[str]
    latin_names: frozenset[str]
    cjk_names: frozenset[str]
    latin_words: frozenset[str]  # every Latin word, casefolded (for the name check)
    text: str  # NFKC-free original, for the substring check of Chinese names
    negations: int
    script: str  # main script by words (engram_server.domain.text.script_of)
    #: Every number with where it is written, in text order: (start, end, normalised value). The
    #: parts of an ISO date share the date's span.
    number_spans: tuple[tuple[int, int, str], ...] = ()


# ------------------------------------------------------------------ tables

_ZH_DIGITS = {
    "零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4,
    "五": 5, "六": 6, "七": 7, "八": 8, "九": 9,
}  # fmt: skip
_ZH_UNITS = {"十": 10, "百": 100, "千": 1000}
_ZH_BIG = {"万": 10_000, "亿": 100_000_000}
_ZH_NUM_CHARS = "".join(_ZH_DIGITS) + "".join(_ZH_UNITS) + "".join(_ZH_BIG)
_ZH_WEEKDAY = {"一": 1, "二": 2, "三": 3, "四": 4, "五": 5, "六": 6, "日": 7, "天": 7}
#: Characters after which a lone 一 is a count ("一个", "一次"), not part of a word ("一起", "统一").
_ZH_COUNTERS = set("个只位次件条本张台天年月日号点岁元块万千百倍项份名人")

_EN_UNITS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15,
    "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19,
}  # fmt: skip
_EN_TENS = {
    "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80,
    "ninety": 90,
}  # fmt: skip
_EN_SCALES = {"hundred": 100, "thousand": 1000, "million": 1_000_000}
_MONTHS = {
    "january": 1, "jan": 1, "february": 2, "feb": 2, "march": 3, "mar": 3, "april": 4, "apr": 4,
    "may": 5, "june": 6, "jun": 6, "july": 7, "jul": 7, "august": 8, "aug": 8, "september": 9,
    "sep": 9, "sept": 9, "october": 10, "oct": 10, "november": 11, "nov": 11, "december": 12, "dec": 12,
}  # fmt: skip
_WEEKDAYS = {
    "monday": 1, "tuesday": 2, "wednesday": 3, "thursday": 4, "friday": 5, "saturday": 6, "sunday": 7,
    "mondays": 1, "tuesdays": 2, "wednesdays": 3, "thursdays": 4, "fridays": 5, "saturdays": 6,
    "sundays": 7,
}  # fmt: skip
#: Capitalised words that are not names (sentence starts, pronouns, titles, common abbreviations).
_NOT_NAMES_TEXT = """
    a an the this that these those there here it its i me my we our you your he him his she her
    they them their in on at by for from to of with without into onto over under after before during
    since until about as and or but if when while where why how what which who whom whose every each
    all any some no not never always also then so because although though however yes please
    remember note dr mr mrs ms prof st mt let today tomorrow yesterday tonight"""
_NOT_NAMES = frozenset(_NOT_NAMES_TEXT.split())
_EN_NEGATIONS = frozenset(
    ("not", "no", "never", "without", "none", "nobody", "nothing", "neither", "nor", "cannot", "nowhere")
)
#: Chinese negation characters, and the words that contain one without negating.
_ZH_NEGATION_CHARS = "不没别未无非勿莫"
_ZH_NOT_NEGATION = (
    "不过", "不仅", "不断", "不错", "差不多", "不少", "不久", "不同", "不管", "了不起", "忍不住",
    "别人", "别的", "特别", "分别", "区别", "类别", "级别", "告别", "识别", "别名",
    "无线", "无论", "未来", "非常", "除非", "是非", "莫名",
)  # fmt: skip

_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_RE_ISO_DATE = re.compile(r"(?<![A-Za-z0-9_.])(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})(?![A-Za-z0-9_]|\.\d)")
_RE_TIME = re.compile(r"(?<![A-Za-z0-9_:.])(\d{1,2}):(\d{2})(?::\d{2})?(?![A-Za-z0-9_:])")
_RE_ID_TOKEN = re.compile(
    r"[A-Za-z0-9]+(?:[-_.@/:#+][A-Za-z0-9]+)+|[A-Za-z]+\d[A-Za-z0-9]*|\d+[A-Za-z][A-Za-z0-9]*"
)
_RE_NUMBER = re.compile(r"\d+(?:,\d{3})*(?:\.\d+)?")
_RE_ORDINAL_SUFFIX = re.compile(r"^(\d+)(?:st|nd|rd|th)$", re.IGNORECASE)
_RE_ZH_WEEKDAY = re.compile(r"(?:周|星期|礼拜)([一二三四五六日天])")
_RE_ZH_PERCENT = re.compile(rf"百分之([{_ZH_NUM_CHARS}]+)")
_RE_ZH_NUM = re.compile(rf"[{_ZH_NUM_CHARS}]+")
_RE_LATIN_WORD = re.compile(r"[A-Za-z\u00c0-\u024f]+(?:['’][A-Za-z]+)?")
_RE_CJK = re.compile(f"[{_CJK}]")
_POSSESSIVE = re.compile(r"'s$")
_RE_NT = re.compile(r"n['’]t\b", re.IGNORECASE)


def _zh_number(run: str) -> int | None:
    """Value of a run of Chinese numerals ("十二" 12, "八千五百" 8500, "五十万" 500000, "二〇二六" 2026)."""
    if all(c in _ZH_DIGITS for c in run):
        if len(run) == 1:
            return _ZH_DIGITS[run]
        return int("".join(str(_ZH_DIGITS[c]) for c in run))  # digit by digit: 二〇二六
    total, section, digit = 0, 0, None
    for c in run:
        if c in _ZH_DIGITS:
            digit = _ZH_DIGITS[c]
        elif c in _ZH_UNITS:
            section += (1 if digit is None else digit) * _ZH_UNITS[c]
            digit = None
        elif c in _ZH_BIG:
            section += digit or 0
            total += (section or 1) * _ZH_BIG[c]
            section, digit = 0, None
    return total + section + (digit or 0)


def _fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _blank(text: str, m: re.Match[str]) -> str:
    return text[: m.start()] + " " * (m.end() - m.start()) + text[m.end() :]


def _en_number_words(words: list[str], spans: list[tuple[int, int]]) -> list[tuple[int, int, str]]:
    """Numbers written as English words ("seven", "twenty-five", "two hundred"), with their spans."""
    out: list[tuple[int, int, str]] = []
    value: int | None = None
    start = end = 0
    for w, (ws, we) in zip([*words, ""], [*spans, (0, 0)], strict=True):
        parts = w.split("-")
        if all(p in _EN_UNITS or p in _EN_TENS for p in parts) and w:
            if value is None:
                start = ws
            value = (value or 0) + sum(_EN_UNITS.get(p, 0) + _EN_TENS.get(p, 0) for p in parts)
            end = we
        elif w in _EN_SCALES and value is not None:
            value *= _EN_SCALES[w]
            end = we
        else:
            if value is not None:
                out.append((start, end, str(value)))
            value = None
    return out


@lru_cache(maxsize=4096)
def extract(text: str) -> Specifics:
    """The specifics of ``text`` (see the module doc)."""
    spans: list[tuple[int, int, str]] = []

    def number(m: re.Match[str], value: str) -> None:
        spans.append((m.start(), m.end(), value))

    dates: Counter[str] = Counter()
    ids: Counter[str] = Counter()
    rest = text
    for m in list(_RE_ISO_DATE.finditer(rest)):
        number(m, _fmt(int(m[1])))
        dates.update([f"month:{int(m[2])}"])
        number(m, _fmt(int(m[3])))
        rest = _blank(rest, m)
    for m in list(_RE_TIME.finditer(rest)):
        number(m, f"{int(m[1])}:{m[2]}")
        rest = _blank(rest, m)
    for m in list(_RE_ID_TOKEN.finditer(rest)):
        token = m[0]
        if not re.search(r"\d|@|_", token):
            continue  # hyphenated words ("on-call", "Wi-Fi", "twenty-five") are words
        ordinal = _RE_ORDINAL_SUFFIX.match(token)
        if ordinal:
            number(m, _fmt(int(ordinal[1])))
        elif re.fullmatch(r"\d+(?:,\d{3})+(?:\.\d+)?|\d+\.\d+", token):
            continue  # a plain number with separators: handled below
        else:
            ids.update([token.casefold()])
        rest = _blank(rest, m)
    for m in list(_RE_ZH_WEEKDAY.finditer(rest)):
        dates.update([f"weekday:{_ZH_WEEKDAY[m[1]]}"])
        rest = _blank(rest, m)
    for m in list(_RE_ZH_PERCENT.finditer(rest)):
        value = _zh_number(m[1])
        if value is not None:
            number(m, _fmt(value))
        rest = _blank(rest, m)
    # Clock times in Chinese: 九点半 -> 9:30; 三点 -> 3.
    for m in list(re.finditer(rf"([{_ZH_NUM_CHARS}]+|\d+)点(半|([{_ZH_NUM_CHARS}]+|\d+)分)?", rest)):
        hour = int(m[1]) if m[1].isdigit() else _zh_number(m[1])
        if hour is None:
            continue
        if m[2] == "半":
            number(m, f"{hour}:30")
        elif m[3]:
            minute = int(m[3]) if m[3].isdigit() else _zh_number(m[3])
            number(m, f"{hour}:{(minute or 0):02d}")
        else:
            number(m, _fmt(hour))
        rest = _blank(rest, m)
    # Months written with 月 after a numeral (四月, 12月) are dates, not counts (三个月 is a count).
    for m in list(re.finditer(rf"([{_ZH_NUM_CHARS}]+|\d+)月", rest)):
        month = int(m[1]) if m[1].isdigit() else _zh_number(m[1])
        if month is not None and 1 <= month <= 12:
            dates.update([f"month:{month}"])
            rest = _blank(rest, m)
    for m in list(_RE_ZH_NUM.finditer(rest)):
        run = m[0]
        after = rest[m.end() : m.end() + 1]
        if set(run) == {"一"} and after not in _ZH_COUNTERS:
            continue  # 一起, 统一一些: words, not the number one
        if run in ("万", "亿", "千", "百"):
            continue
        value = _zh_number(run)
        if value is not None:
            number(m, _fmt(value))
        rest = _blank(rest, m)
    for m in list(_RE_NUMBER.finditer(rest)):
        number(m, _fmt(float(m[0].replace(",", ""))))
        rest = _blank(rest, m)
    word_matches = list(_RE_LATIN_WORD.finditer(rest))
    words = [m[0] for m in word_matches]
    lowered = [_POSSESSIVE.sub("", w.casefold().replace("’", "'")) for w in words]
    for w, low in zip(words, lowered, strict=True):
        if low in _MONTHS and (w[0].isupper() or len(low) > 3):  # "May", not "may be"; "mar", "dec" …
            dates.update([f"month:{_MONTHS[low]}"])
        elif low in _WEEKDAYS:
            dates.update([f"weekday:{_WEEKDAYS[low]}"])
    spans.extend(_en_number_words(lowered, [(m.start(), m.end()) for m in word_matches]))
    spans.sort(key=lambda s: s[:2])  # stable: a date keeps its year before its day
    numbers = Counter(value for _, _, value in spans)
    latin_names = frozenset(
        low
        for w, low in zip(words, lowered, strict=True)
        if w[0].isupper()
        and low not in _NOT_NAMES
        and low not in _MONTHS
        and low not in _WEEKDAYS
        and low not in _EN_UNITS
        and low not in _EN_TENS
    )
    has_cjk = bool(_RE_CJK.search(text))
    cjk_names: frozenset[str] = frozenset()
    if has_cjk:
        cjk_names = frozenset(
            w for w, tag in zh_tagged(text) if tag in ("nr", "ns", "nt", "nz", "nrt") and _RE_CJK.search(w)
        )
    negations = sum(1 for w in lowered if w in _EN_NEGATIONS) + len(_RE_NT.findall(text))
    if has_cjk:
        masked = text
        for word in _ZH_NOT_NEGATION:
            masked = masked.replace(word, "")
        negations += sum(masked.count(c) for c in _ZH_NEGATION_CHARS)
    return Specifics(
        numbers=+numbers,
        dates=+dates,
        identifiers=ids,
        latin_names=latin_names,
        cjk_names=cjk_names,
        latin_words=frozenset(lowered) | frozenset(ids),
        text=text,
        negations=negations,
        script=script_of(text),
        number_spans=tuple(spans),
    )


def _diff(kind: str, old: Counter[str], new: Counter[str]) -> Conflict | None:
    if set(old) == set(new):
        return None
    return Conflict(kind, tuple(sorted(set(old) - set(new))), tuple(sorted(set(new) - set(old))))


def conflicts(existing: str, new: str) -> list[Conflict]:
    """Where the specifics of ``new`` disagree with those of ``existing`` (empty: they agree)."""
    a, b = extract(existing), extract(new)
    out = [
        c
        for c in (
            _diff("number", a.numbers, b.numbers),
            _diff("date", a.dates, b.dates),
            _diff("identifier", a.identifiers, b.identifiers),
        )
        if c is not None
    ]
    # Names only within a script: "Anna" and "安娜" are one person, and no rule tells.
    same_script = a.script == b.script
    if same_script:
        old = tuple(sorted(n for n in a.latin_names if n not in b.latin_words))
        added = tuple(sorted(n for n in b.latin_names if n not in a.latin_words))
        if old or added:
            out.append(Conflict("name", old, added))
    if same_script:
        old = tuple(sorted(n for n in a.cjk_names if n not in b.text))
        added = tuple(sorted(n for n in b.cjk_names if n not in a.text))
        if old or added:
            out.append(Conflict("name", old, added))
    if same_script:
        swapped = _order_conflict(a, b)
        if swapped is not None:
            out.append(swapped)
    if a.negations != b.negations:
        out.append(Conflict("negation", (str(a.negations),), (str(b.negations),)))
    if same_script:
        for kind, (old_words, new_words) in contrasting(existing, new).items():
            if not any(c.kind == kind for c in out):
                out.append(Conflict(kind, old_words, new_words))
        phrasal = phrasal_action(existing, new)
        if phrasal is not None and not any(c.kind == "action" for c in out):
            out.append(Conflict("action", (phrasal[0],), (phrasal[1],)))
    return out


#: What joins names into one unordered group ("Anna and Tom", "安娜和汤姆").
_RE_NAME_JOINER = re.compile(r"^(?:\s|,|&|、|和|与|跟|及|/|\band\b|\bor\b)*$", re.IGNORECASE)
_RE_PASSIVE = re.compile(r"\bby\b|被|由", re.IGNORECASE)


def _name_groups(spec: Specifics, shared: frozenset[str]) -> list[frozenset[str]]:
    """The shared names in order of first appearance in the text, coordinated runs as one group."""
    low = spec.text.casefold()
    spans: list[tuple[int, int, str]] = []
    for name in shared:
        m = re.search(rf"(?<![^\W\d_]){re.escape(name)}(?![^\W\d_])", low) if name.isascii() else None
        at = m.start() if m else low.find(name)
        if at >= 0:
            spans.append((at, at + len(name), name))
    spans.sort()
    groups: list[set[str]] = []
    end = -1
    for start, stop, name in spans:
        if groups and _RE_NAME_JOINER.match(low[end:start]):
            groups[-1].add(name)
        else:
            groups.append({name})
        end = stop
    return [frozenset(g) for g in groups]


def _order_conflict(a: Specifics, b: Specifics) -> Conflict | None:
    """Two shared names in swapped roles (see the module doc), or None."""
    shared = (a.latin_names & b.latin_names) | (a.cjk_names & b.cjk_names)
    if len(shared) < 2 or bool(_RE_PASSIVE.search(a.text)) != bool(_RE_PASSIVE.search(b.text)):
        return None
    ga, gb = _name_groups(a, shared), _name_groups(b, shared)
    if ga == gb or {n for g in ga for n in g} != {n for g in gb for n in g}:
        return None
    if len(ga) != len(gb) or sorted(map(sorted, ga)) != sorted(map(sorted, gb)):
        return None  # grouped differently: no clear roles to compare
    if sum(x != y for x, y in zip(ga, gb, strict=True)) != 2:
        return None  # not two names trading places (a fronted phrase moves one name past the rest)
    return Conflict("order", tuple(" ".join(sorted(g)) for g in ga), tuple(" ".join(sorted(g)) for g in gb))


#: Words that carry grammar, not content: articles, pronouns, prepositions, conjunctions, the
#: auxiliaries be/have/do, and the negation cues (negation is compared on its own). Modal verbs stay
#: content ("can swim" is not "must swim").
_EN_FUNCTION_TEXT = """
    a an the this that these those there here it its i me my we our you your he him his she her
    they them their in on at by for from to of with without into onto over under after before during
    since until about as and or but if when while where which who whom whose so also then than too
    is are was were be been being am has have had having do does did doing get gets got
    not no never none nor cannot
    """
_EN_FUNCTION = frozenset(_EN_FUNCTION_TEXT.split())
EN_FUNCTION_WORDS = _EN_FUNCTION
MONTH_WORDS = frozenset(_MONTHS) | frozenset(_WEEKDAYS)
#: Words that are themselves a specific's value: month and weekday names, English number words.
VALUE_WORDS = MONTH_WORDS | frozenset(_EN_UNITS) | frozenset(_EN_TENS) | frozenset(_EN_SCALES)
ZH_COUNTERS = frozenset(_ZH_COUNTERS)
_ZH_FUNCTION = frozenset("的了是在都会把被由就着过呢吗啊得地和与及对也还很这那之所为而并或些个")
ZH_FUNCTION_WORDS = _ZH_FUNCTION
_RE_CONTENT_LATIN = re.compile(r"[A-Za-z\u00c0-\u024f0-9]+(?:[-_.'’][A-Za-z\u00c0-\u024f0-9]+)*")


def stem(word: str) -> str:
    """Light English stemming: possessive and plural / third-person ``s`` ("drinks" = "drink")."""
    word = _POSSESSIVE.sub("", word.replace("’", "'"))
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


#: Verbs English puts in place of "is" for an event with its time or place ("standup happens at
#: 9:30" = "standup is at 9:30"): no content word of their own when two texts are compared.
EN_EVENT_COPULAS = frozenset(["happen", "happens", "happened", "occur", "occurs", "occurred"])
#: Chinese verbs of holding an event (开 / 举行 / 召开 / 举办 + 会议, 周会 …): with an event noun in the
#: text ("周会在周四十点开" = "周会是周四十点") no content word of their own, as
#: :data:`EN_EVENT_COPULAS` in English (:func:`engram_server.domain.contrast.zh_event_noun`).
ZH_EVENT_VERBS = frozenset(["开", "举行", "召开", "举办"])


@lru_cache(maxsize=4096)
def content_sequence(text: str) -> tuple[str, ...]:
    """The content words of ``text`` in the order they occur: Latin words case-folded and lightly
    stemmed, Chinese words as jieba segments them (a separable verb split by an aspect particle or
    a count joined back first: 洗了个澡 is 洗澡, :func:`engram_server.domain.crosslingual.
    joined_separable`; a cut CC-CEDICT lacks re-cut into dictionary words, :func:`engram_server.
    domain.crosslingual.recut`: 开周会 → 开 | 周会), without function words, negation cues, event
    verbs (:data:`EN_EVENT_COPULAS`; :data:`ZH_EVENT_VERBS` with an event noun) and punctuation."""
    out: list[tuple[int, str]] = []
    for m in _RE_CONTENT_LATIN.finditer(text):
        low = m.group().casefold()
        if low in _EN_FUNCTION or low in EN_EVENT_COPULAS or _RE_NT.search(low):
            continue
        out.append((m.start(), stem(low)))
    from engram_server.domain.contrast import zh_event_noun  # noqa: PLC0415 - it imports this module
    from engram_server.domain.crosslingual import joined_separable, recut  # noqa: PLC0415 - idem

    zh: list[tuple[int, str]] = []
    for run in re.finditer(f"[{_CJK}]+", text):
        at = run.start()
        for cut in zh_cut(joined_separable(run.group())):
            for word in recut(cut):
                w = (
                    word
                    if word in _ZH_NOT_NEGATION
                    else "".join(c for c in word if c not in _ZH_NEGATION_CHARS)
                )
                if w.strip() and w not in _ZH_FUNCTION:
                    zh.append((at, w))
                at += len(word)
    if any(w in ZH_EVENT_VERBS for _, w in zh) and any(
        zh_event_noun(w) for _, w in zh if w not in ZH_EVENT_VERBS
    ):
        zh = [(at, w) for at, w in zh if w not in ZH_EVENT_VERBS]  # 周会在周四开 = 周会是周四
    return tuple(w for _, w in sorted(out + zh))


def content_words(text: str) -> frozenset[str]:
    """The content words of ``text`` (:func:`content_sequence`) as a set. Two texts with the same
    content words (and the same specifics) say the same thing in a different order or with
    different grammar words — unless the words trade roles (:func:`swapped_roles`)."""
    return frozenset(content_sequence(text))


def swapped_roles(existing: str, new: str) -> bool:
    """Whether the content words both texts share, in the order each text has them, are the same
    words with two runs of them trading places across the words between ("The manager praised the
    new intern." / "The new intern praised the manager."; 经理表扬了实习生 / 实习生表扬了经理): who
    did what to whom is reversed, as :func:`conflicts` finds for names (kind ``order``). A run moved
    to the front or back past an adjacent one is no swap ("In every editor, the user prefers dark
    mode."). Not compared when exactly one text is passive (``by``, 被, 由: "The intern was praised
    by the manager."), nor when a shared word occurs twice in a text."""
    if bool(_RE_PASSIVE.search(existing)) != bool(_RE_PASSIVE.search(new)):
        return False
    sa, sb = content_sequence(existing), content_sequence(new)
    shared = set(sa) & set(sb)
    a = [w for w in sa if w in shared]
    b = [w for w in sb if w in shared]
    if a == b or len(a) < 3 or len(set(a)) != len(a) or len(set(b)) != len(b):
        return False
    n = len(a)
    for i in range(n):  # a = P X Y Z S and b = P Z Y X S, with X, Y and Z not empty
        for j in range(i + 1, n):
            for k in range(j + 1, n):
                for m in range(k + 1, n + 1):
                    if b == a[:i] + a[k:m] + a[j:k] + a[i:j] + a[m:]:
                        return True
    return False


def same_words(existing: str, new: str) -> bool:
    """Whether two texts have the same non-empty set of content words (:func:`content_words`),
    in the same roles (:func:`swapped_roles`), or are the same words in the same order with at
    most two replaced in place by a synonym (:func:`engram_server.domain.contrast.synonym_swapped`:
    sofa / couch, 电脑 / 计算机), or with a possessed noun and its copula replaced by the verb of
    what one does with that thing (:func:`engram_server.domain.contrast.light_verb_restated`:
    "The user's car is a blue Toyota." / "The user drives a blue Toyota."), or with a phrasal verb
    in place of a one-word verb of the same WordNet synset
    (:func:`engram_server.domain.contrast.phrasal_restated`: "gave up smoking" / "quit smoking"),
    or with a Chinese word whose verb sense is a phrase in place of the words that spell it out
    (:func:`engram_server.domain.contrast.zh_phrase_restated`: 戒烟 "to give up smoking" / 放弃
    "to give up" + 吸烟 "to smoke")."""
    a = content_words(existing)
    if bool(a) and a == content_words(new) and not swapped_roles(existing, new):
        return True
    return (
        synonym_swapped(existing, new)
        or light_verb_restated(existing, new)
        or phrasal_restated(existing, new)
        or zh_phrase_restated(existing, new)
    )
