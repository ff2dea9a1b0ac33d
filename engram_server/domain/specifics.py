"""The specifics of a sentence, and where two sentences' specifics disagree (pure).

The write gate refuses a new memory whose embedding is a near copy of a stored one. Embeddings
barely see a changed number, id, date, name or a negation ("Invoice 4471 was paid on March 3." and
"Invoice 4472 …" sit at calibrated similarity 0.97), so before refusing, the gate compares the
*specifics* of the two texts; a pair whose specifics conflict is a different fact and is written
(reported in the near-duplicate zone with reason ``conflicting_specifics``).

What counts as a specific (English and Chinese, and text mixing both):

* ``number`` — digits (``2,400`` → 2400, ``78%``, ``#58231``, ``15th``), clock times (``9:30``,
  ``九点半`` → 9:30), Chinese numerals (``两``, ``十二``, ``八千五百``, ``五十万``, ``百分之七十八``),
  English number words (``seven``, ``twenty-five``), halves of a unit (``an hour and a half``,
  ``one and a half hours``, ``一个半小时`` → 1.5; ``half a day``, ``半天`` → 0.5; "half the team" and
  ``一半`` stay words), and the parts of an ISO date (``2026-05-01`` → 2026, 5, 1). Amounts are
  their numbers (the currency sign is not compared).
* ``date`` — month and weekday names in either language (``April`` / ``四月``, ``Monday`` / ``周一``):
  the same value whatever language names it. A month's short name (``Jun``, ``Mar``) is a month
  only beside a day or a year or after a preposition ("Jun 5", "in Mar"): "Ma Jun" is a name.
  A Chinese name jieba cuts differently in the two texts (马俊 | 用 glued as 马俊用) is the same
  name where one text's name overlaps it in the other's text.
* ``identifier`` — tokens mixing letters and digits or joined by ``- _ . @ /`` (``OPS-1182``,
  ``v3.4.1``, ``db-eu-3``, ``4B``, ``ops@acme.io``), compared case-insensitively.
* ``name`` — Latin words written with a capital that are not function words (``Priya``, ``Denver``),
  compared when both texts have Latin words; Chinese person, place and organisation names (jieba
  tags ``nr ns nt nz``), compared when both texts have Chinese words. A name conflicts only when it
  does not occur in the other text at all (so a reordered sentence keeps its names).
* ``order`` — the order of the names two texts share, within one script: "moved from Berlin to
  Paris" and "moved from Paris to Berlin" name the same places in swapped roles. Names joined by
  ``and`` / ``or`` / ``,`` / ``&`` / 和 / 与 / 跟 / 及 / 、 form one group whose inner order does not count
  ("Anna and Tom" = "Tom and Anna"). When one text only is passive (``by`` / 被 / 由 in only one of
  them) it is compared in the active voice (:func:`active_voice`: "Tom was hired by Anna" is "Anna
  hired Tom", and so not "Tom hired Anna"), or not at all when its passive cannot be read ("by
  Friday", "by email"), nor when the names trade places both as written and in the active voice
  (a passive whose parts were misplaced). Only two names trading places count: a
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
from dataclasses import dataclass, replace
from functools import lru_cache

import lemminflect

from engram_server.domain.contrast import (
    contrasting,
    light_verb_action,
    light_verb_noun_restated,
    light_verb_restated,
    phrasal_action,
    phrasal_restated,
    synonym_swapped,
    thing_for_act,
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


#: Units a half is counted in ("an hour and a half", "half a day", 一个半小时, 三年半): a closed class
#: of time, distance, weight and volume units, so that "half the team" or 一半 stays a word.
_EN_HALF_UNITS = (
    r"(?:second|minute|hour|day|night|week|month|year|decade|mile|kilometer|kilometre|km|meter|metre|"
    r"pound|kilo|kilogram|kg|gram|ounce|liter|litre|gallon|cup|glass|bottle|dozen|lap|shift)s?"
)
_ZH_HALF_UNITS = (
    "(?:个)?(?:小时|钟头|分钟|天|晚|年|月|周|星期|礼拜|学期|公里|里|米|斤|公斤|克|升|杯|瓶|碗|圈)"
)
_RE_EN_HALF = re.compile(
    rf"\b(?:(?P<n>\d+|a|an|{'|'.join(_EN_UNITS)})\s+(?:(?P<u>{_EN_HALF_UNITS})\s+)?and\s+a\s+half"
    rf"|half\s+(?:an?\s+)?(?={_EN_HALF_UNITS}\b))\b",
    re.IGNORECASE,
)
_RE_ZH_HALF = re.compile(
    rf"(?:(?P<n>[{_ZH_NUM_CHARS}]+|\d+)(?:个)?(?:(?P<u>{_ZH_HALF_UNITS})半|半(?={_ZH_HALF_UNITS}))"
    rf"|(?<![{_ZH_NUM_CHARS}\d点一])半(?={_ZH_HALF_UNITS}))"
)


_RE_DATE_BEFORE = re.compile(
    r"(?:\d(?:st|nd|rd|th)?\s*(?:of\s+)?|\b(?:in|on|since|until|till|by|from|before|after|of|early|"
    r"late|mid|next|last|this|every)\s+)$",
    re.IGNORECASE,
)
_RE_DATE_AFTER = re.compile(r"\.?\s*\d")


def _dated(text: str, start: int, end: int) -> bool:
    """Whether the word at ``text[start:end]`` (a month's short name: Jun, Mar, Dec) stands where a
    date is: beside a day or a year ("Jun 5", "5 Jun", "Jun 2026") or after a preposition or a
    word that names a time ("in Jun", "early Mar"). A short name elsewhere is a word or a name
    ("Ma Jun", 马俊)."""
    return bool(_RE_DATE_AFTER.match(text, end) or _RE_DATE_BEFORE.search(text[max(0, start - 12) : start]))


def _half(count: str | None) -> str | None:
    """The value of "<count> and a half" / <count>个半 (``count`` None: a half alone)."""
    if count is None:
        return "0.5"
    low = count.casefold()
    whole = 1 if low in ("a", "an") else _EN_UNITS.get(low)
    if whole is None:
        whole = int(low) if low.isdigit() else _zh_number(count)
    return None if whole is None else _fmt(whole + 0.5)


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
    # Halves of a unit: "an hour and a half" = "one and a half hours" = 1.5 = 一个半小时; "half a
    # day" = 半天 = 0.5. The unit (:data:`_EN_HALF_UNITS`) stays a word.
    for pattern in (_RE_EN_HALF, _RE_ZH_HALF):
        for m in list(pattern.finditer(rest)):
            half = _half(m["n"])
            if half is not None:
                number(m, half)
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
    for w, low, wm in zip(words, lowered, word_matches, strict=True):
        if low in _MONTHS and (w[0].isupper() or len(low) > 3):  # "May", not "may be"; "mar", "dec" …
            if len(low) <= 4 and low != "may" and not _dated(text, wm.start(), wm.end()):
                continue  # "Ma Jun": a month's short name is a month only where a date is
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
        a, b = _as_cut_alike(a, b)
        old = tuple(sorted(n for n in a.cjk_names if n not in b.text))
        added = tuple(sorted(n for n in b.cjk_names if n not in a.text))
        if old or added:
            out.append(Conflict("name", old, added))
    voiced = _voiced(existing, new) if same_script else None
    if voiced is not None:
        va, vb = voiced
        swapped = _order_conflict(a if va == existing else extract(va), b if vb == new else extract(vb))
        if swapped is not None and (voiced == (existing, new) or _order_conflict(a, b) is None):
            out.append(swapped)  # (a passive whose names trade places as written too is misread)
    if a.negations != b.negations:
        out.append(Conflict("negation", (str(a.negations),), (str(b.negations),)))
    if same_script:
        for kind, (old_words, new_words) in contrasting(existing, new).items():
            if not any(c.kind == kind for c in out):
                out.append(Conflict(kind, old_words, new_words))
        acted = phrasal_action(existing, new) or light_verb_action(existing, new)
        if acted is not None and not any(c.kind == "action" for c in out):
            out.append(Conflict("action", (acted[0],), (acted[1],)))
    return out


def _as_cut_alike(a: Specifics, b: Specifics) -> tuple[Specifics, Specifics]:
    """``a`` and ``b`` with each Chinese name jieba cut differently in the two texts read as the
    other text's name: jieba glues a name to the word after it or cuts across it (马俊 | 用 read as
    one name 马俊用; 彭丽 | 都 read as 彭 | 丽都), so where a name of one text is missing from the other
    text, and the other text's name stands at an overlapping place in the first text, the two are
    one person, named as both texts write it. The names then compare as they should: no name
    conflict for one person, and an ``order`` conflict when 韩雪教曹宇 becomes 曹宇教韩雪. A name that
    starts before the other text's name is not cut differently: 吴秀英 against 秀英 (jieba's 孙 | 秀英)
    adds a surname, another person."""

    def recut(x: Specifics, y: Specifics) -> frozenset[str]:
        out: set[str] = set()
        for name in x.cjk_names:
            if name in y.text:
                out.add(name)
                continue
            spans = [(m.start(), m.end()) for m in re.finditer(re.escape(name), x.text)]
            alike = [
                other
                for other in y.cjk_names
                if other in x.text
                and any(
                    m.start() <= start < m.end()  # it starts within the other name: no name before it
                    for m in re.finditer(re.escape(other), x.text)
                    for start, _ in spans
                )
            ]
            out.update(alike or [name])
        return frozenset(out)

    ca, cb = recut(a, b), recut(b, a)
    if ca == a.cjk_names and cb == b.cjk_names:
        return a, b
    return replace(a, cjk_names=ca), replace(b, cjk_names=cb)


#: What joins names into one unordered group ("Anna and Tom", "安娜和汤姆").
_RE_NAME_JOINER = re.compile(r"^(?:\s|,|&|、|和|与|跟|及|/|\band\b|\bor\b)*$", re.IGNORECASE)
_RE_PASSIVE = re.compile(r"\bby\b|被|由", re.IGNORECASE)


#: The auxiliaries of an English passive ("was approved by", "got hired by").
_EN_PASSIVE_BE = frozenset(["is", "are", "was", "were", "be", "been", "being", "am", "get", "gets", "got"])
#: Words that open a noun phrase: the agent after "by" runs from them to the first other function
#: word ("by the new intern at the meeting": the new intern).
_EN_DETERMINERS = frozenset(["the", "a", "an", "this", "that", "these", "those"])
_EN_DETERMINERS |= frozenset(["my", "our", "your", "his", "her", "their", "its"])
_RE_EN_WORD = re.compile(r"[A-Za-z\u00c0-\u024f0-9]+(?:['’][A-Za-z]+)?")
_ZH_PASSIVE_MARKS = frozenset("被由")


def _participle(word: str) -> bool:
    """Whether an English word is a past participle ("approved", "written", "hired")."""
    low = word.casefold()
    return any(
        low in lemminflect.getInflection(lemma, "VBN")
        for lemma in lemminflect.getAllLemmas(low).get("VERB", ())
    )


@lru_cache(maxsize=4096)
def active_voice(text: str) -> str | None:
    """A passive sentence's words in the active voice's order, or None when ``text`` is not one
    this reads (one script only). English "S be [adverb] V-ed … by AGENT REST" → "AGENT V-ed …
    S REST" ("The invoice was approved by Maria on Monday." → "Maria approved the invoice on
    Monday."), the agent running from "by" to the first function word that opens no noun phrase,
    a name or a phrase with a determiner (not a means, "by email", nor a time, "by Friday");
    Chinese "S 被 / 由 AGENT REST" → "AGENT REST S" (李娜被张伟雇用了 → 张伟雇用了李娜: the agent
    and the verb follow the mark), when a noun or pronoun follows the mark (jieba's tags; not
    会议被推迟了, which names no agent). Its content words and names are compared with the other
    text's as they would be in the active voice: who did what to whom."""
    if _RE_CJK.search(text):
        if _RE_LATIN_WORD.search(text):
            return None
        tagged = zh_tagged(text)
        marks = [i for i, (w, _) in enumerate(tagged) if w in _ZH_PASSIVE_MARKS]
        if len(marks) != 1 or marks[0] == 0 or marks[0] + 1 >= len(tagged):
            return None
        at = marks[0]
        tag = tagged[at + 1][1]
        if not (tag.startswith(("n", "r")) or tag == "vn"):
            return None  # no agent (会议被推迟了, 自行车被偷了): no one's role to swap
        cut = [w for w, _ in tagged]
        return "".join(cut[at + 1 :]) + "".join(cut[:at])
    words = list(_RE_EN_WORD.finditer(text))
    low = [m.group().casefold() for m in words]
    if low.count("by") != 1:
        return None
    by = low.index("by")
    be = next((i for i in range(by) if low[i] in _EN_PASSIVE_BE), None)
    if be is None or be == 0:
        return None
    verb = be + 1
    if verb < by and low[verb].endswith("ly") and verb + 1 < by:
        verb += 1  # "was quickly approved"
    if verb >= by or not _participle(low[verb]):
        return None
    end = by + 1
    while end < len(low) and low[end] in _EN_DETERMINERS:
        end += 1
    start = end
    while end < len(low) and low[end] not in _EN_FUNCTION and low[end] not in _EN_NEGATIONS:
        end += 1
    named = start > by + 1 or (start < len(low) and words[start].group()[0].isupper())
    if end == start or not named or any(w in MONTH_WORDS or w[0].isdigit() for w in low[start:end]):
        return None  # no agent: a means ("by email") or a time ("by Friday", "by 5 May")
    agent = text[words[by + 1].start() : words[end - 1].end()]
    subject = text[: words[be].start()].strip()
    action = text[words[be + 1].start() : words[by].start()].strip()
    rest = text[words[end - 1].end() :]
    return f"{agent} {action} {subject}{rest}"


#: At most this many words on each side of an "of" genitive ("the release date of the mobile app").
_GENITIVE_WORDS = 3


@lru_cache(maxsize=4096)
def possessor_first(text: str) -> str:
    """English "the Y of X" written "X's Y", the possessor first, as the ``'s`` genitive has it:
    "The mother of the bride is the teacher." → "The bride's mother is the teacher.". Y is one to
    :data:`_GENITIVE_WORDS` content words after "the", X as many after "of" and a determiner;
    each such phrase is rewritten, left to right. Two texts' content words are compared in the
    order of their roles (:func:`swapped_roles`): "the lead of the team" and "the team's lead"
    name one person, "the teacher's mother" another."""
    words = list(_RE_EN_WORD.finditer(text))
    low = [m.group().casefold() for m in words]

    def content(at: int) -> bool:
        return (
            low[at] not in _EN_FUNCTION and low[at] not in _EN_NEGATIONS and not _POSSESSIVE.search(low[at])
        )

    out: list[str] = []
    last = 0
    i = 0
    while i < len(low):
        if low[i] != "the":
            i += 1
            continue
        j = i + 1
        while j < len(low) and j - i <= _GENITIVE_WORDS and content(j):
            j += 1
        if j == i + 1 or j >= len(low) or low[j] != "of":
            i += 1
            continue
        k = j + 1 + (j + 1 < len(low) and low[j + 1] in _EN_DETERMINERS)
        m = k
        while m < len(low) and m - k < _GENITIVE_WORDS and content(m):
            m += 1
        if m == k:
            i += 1
            continue
        det = text[words[j + 1].start() : words[k].start()] if k > j + 1 else ""
        possessor = text[words[k].start() : words[m - 1].end()]
        possessed = text[words[i + 1].start() : words[j - 1].end()]
        the = words[i].group()
        lead = det[:1].upper() + det[1:] if the[0].isupper() and det else det
        out.append(text[last : words[i].start()] + f"{lead}{possessor}'s {possessed}")
        last = words[m - 1].end()
        i = m
    return "".join(out) + text[last:]


def _voiced(existing: str, new: str) -> tuple[str, str] | None:
    """The two texts in one voice: as written when both or neither are passive, else the passive
    one in the active voice (:func:`active_voice`); None when that one cannot be read."""
    pa, pb = bool(_RE_PASSIVE.search(existing)), bool(_RE_PASSIVE.search(new))
    if pa == pb:
        return existing, new
    turned = active_voice(existing if pa else new)
    if turned is None:
        return None
    return (turned, new) if pa else (existing, turned)


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
    """Two shared names in swapped roles (see the module doc), or None. Chinese names are compared
    as both texts write them (:func:`_as_cut_alike`), also for a passive read in the active voice."""
    a, b = _as_cut_alike(a, b)
    shared = (a.latin_names & b.latin_names) | (a.cjk_names & b.cjk_names)
    if len(shared) < 2:
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
    mode."). When exactly one text is passive (``by``, 被, 由) it is read in the active voice
    (:func:`active_voice`: "The intern was praised by the manager." is "The manager praised the
    intern.", and so not "The intern praised the manager."), and not compared when that passive
    cannot be read or shows runs trading places as written too (its parts misplaced); an "of"
    genitive is read with the possessor first (:func:`possessor_first`: "The mother of the bride
    is the teacher." says "The bride's mother is the teacher.", not "The teacher's mother is the
    bride."). Not compared when a shared word occurs twice in a text."""
    voiced = _voiced(existing, new)
    if voiced is None:
        return False
    if voiced != (existing, new) and _runs_swapped(existing, new):
        return False  # swapped as written too: the passive was read with its parts misplaced
    return _runs_swapped(*voiced)


def _runs_swapped(existing: str, new: str) -> bool:
    """:func:`swapped_roles` for two texts in one voice."""
    sa, sb = content_sequence(possessor_first(existing)), content_sequence(possessor_first(new))
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
    in the same roles (:func:`swapped_roles`) and none a concrete thing in one and a verb in the
    other (:func:`engram_server.domain.contrast.thing_for_act`: "has a garden" / "gardens"), or
    are the same words in the same order with at most two replaced in place by a synonym
    (:func:`engram_server.domain.contrast.synonym_swapped`: sofa / couch, 电脑 / 计算机), or with a
    possessed noun and its copula replaced by the verb of what one does with that thing
    (:func:`engram_server.domain.contrast.light_verb_restated`:
    "The user's car is a blue Toyota." / "The user drives a blue Toyota."), or with a light verb
    and the noun of an act in place of the act's verb
    (:func:`engram_server.domain.contrast.light_verb_noun_restated`: "gave the report a review" /
    "reviewed the report", "took a shower" / "showered"), or with a phrasal verb
    in place of a one-word verb of the same WordNet synset
    (:func:`engram_server.domain.contrast.phrasal_restated`: "gave up smoking" / "quit smoking"),
    or with a Chinese word whose verb sense is a phrase in place of the words that spell it out
    (:func:`engram_server.domain.contrast.zh_phrase_restated`: 戒烟 "to give up smoking" / 放弃
    "to give up" + 吸烟 "to smoke")."""
    a = content_words(existing)
    if (
        bool(a)
        and a == content_words(new)
        and not swapped_roles(existing, new)
        and thing_for_act(existing, new) is None
    ):
        return True
    return (
        synonym_swapped(existing, new)
        or light_verb_restated(existing, new)
        or light_verb_noun_restated(existing, new)
        or phrasal_restated(existing, new)
        or zh_phrase_restated(existing, new)
    )
