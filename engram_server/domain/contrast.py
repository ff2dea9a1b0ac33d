"""Two sentences that say one thing about two different things of one kind, or opposite things.

"The light in the kitchen is broken." and "The light in the bathroom is broken." share every word
but one, and the embedding puts them above the duplicate threshold; no number, date or name tells
them apart. The word that changed does: kitchen and bathroom are two kinds of room. When two texts
in one script are the same sequence of words but for at most two content words replaced one for one
in place, and a replaced word is the opposite of its replacement (kind ``antonym``: buy / sell,
before / after) or names another thing of the same kind (kind ``term``: kitchen / bathroom), the
two texts state different facts: written and flagged, never refused as a duplicate. Two content
words trading places are an ``order`` conflict, as two names are. A replaced word used as a verb in
both texts that does not name the same act (kind ``action``: "Tom borrowed the van" / "Tom sold the
van", "Anna called the dentist" / "Anna emailed the dentist", 我们取消了订阅 / 我们续订了订阅) is another
act on the same thing: a different fact too.

Opposites and kinds come from WordNet 3.0 (:mod:`engram_server.domain.wordnet`), over each word's
most frequent senses and the parts of speech it is commonly used as:

- antonyms in any sense (buy / sell, like / dislike, sister / brother), and a few opposed function
  words WordNet does not relate (:data:`OPPOSED_FUNCTION_WORDS`);
- nouns under a common hypernym at most four steps up from one and five from the other (cat / dog:
  carnivore; red / blue: chromatic colour; tennis / soccer: athletic game; aunt / mother: relative,
  two steps up from aunt and five from mother), but not near the top of the hierarchy (entity,
  abstraction, object …), which would make anything one kind. A word the sentence places as a noun
  (after a determiner, a possessive or a preposition: "the saddle of Anna's bike") is compared as
  one, whatever it is used as most;
- verbs with a common direct hypernym (buy / borrow: get);
- adjectives in one cluster (red / blue: chromatic).

Verbs (a word lemminflect and WordNet have as a verb, not placed as a noun; a Chinese word jieba
tags as a verb or one before an aspect particle 了 / 过 / 着) name the same act when they share a
WordNet synset in any sense (phone / call, mend / repair), are senses of the same CC-CEDICT
headwords, or one is at most two steps up the verb hierarchy from the other (buy → get); a
Chinese verb by its CC-CEDICT glosses (a gloss in common, or two glosses that name the same act;
遛狗 / 喂狗 compared by what differs, 遛 / 喂). A verb whose lemma the other text has as a noun is
a light-verb restatement ("gave the draft a review" / "reviewed the draft"), not another act; a
verb in place of a light verb and the noun of an act that is neither the noun's verb nor one act
with it is another act (:func:`light_verb_action`: "gave the budget a review" / "rejected the
budget").

Restatements the same module reads for :func:`engram_server.domain.specifics.same_words`: a
synonym in place (:func:`synonym_swapped`), a phrasal verb for a one-word verb of its synset
(:func:`phrasal_restated`), a possessed thing and its copula for the verb of its use
(:func:`light_verb_restated`: "The user's car is a blue Toyota." / "The user drives a blue
Toyota."), and a light verb with the noun of an act for the act's verb in the same tense
(:func:`light_verb_noun_restated`: "gave the report a review" / "reviewed the report", "took a
shower" / "showered", "paid a visit to Oslo" / "visited Oslo"; the noun must be an act or event
in WordNet derived from the verb, so "has a garden" / "gardens" and "paid a bill" / "billed" are
not).
A Chinese compound whose CC-CEDICT verb sense is a phrase is restated by the words that spell it
out (:func:`zh_phrase_restated`: 戒烟 "to give up smoking" / 放弃 + 吸烟).

What is not a contrast: synonyms (film / movie, begin / start; also words CC-CEDICT gives as senses
of the same headwords, job / position), one word a kind of the other
(laptop / computer, vegan / vegetarian), and words WordNet lacks. Chinese words are compared through
their CC-CEDICT glosses (银色 "silver" / 黄色 "yellow"). Two Chinese personal names that jieba does not
tag (张娟 / 马娟: a common surname and a given name, no dictionary word) are a ``name`` conflict. A
possessor in a gloss says whose, not what: 叔叔 "father's younger brother" is glossed brother,
younger, uncle (:mod:`engram_server.domain.crosslingual`), so 爸爸 / 叔叔 is father / uncle.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from difflib import SequenceMatcher
from functools import lru_cache
from itertools import product

import lemminflect

from engram_server.domain import wordnet
from engram_server.domain.text import ZH_ASPECT, zh_cut, zh_tagged

__all__ = ["OPPOSED_FUNCTION_WORDS", "ZH_SURNAMES", "contrasting", "opposite", "same_kind", "synonym_swapped"]

#: Senses of a word read, most frequent first: rarer senses make unrelated words kin (car is also
#: a cable car's cabin).
SENSES = 3
#: How far up the noun hierarchy a common kind may be, from one of the words (one step more from
#: the other).
NOUN_DEPTH = 4
#: Synsets this close to the root of the noun hierarchy are too general to be a kind.
MIN_KIND_DEPTH = 4
#: At most this many content words differ on each side for the texts to be one statement with a
#: changed word (more is a different sentence: the similarity decides).
MAX_CHANGED = 2

#: The most common Chinese surnames (single characters; the compound ones are rare in names
#: written without a dictionary entry). A closed class, like the function words.
ZH_SURNAMES = frozenset(
    "王李张刘陈杨黄赵吴周徐孙马朱胡郭何高林罗郑梁谢宋唐许韩冯邓曹彭曾肖田董袁潘于蒋蔡余杜叶程苏魏吕丁任"
    "沈姚卢姜崔钟谭陆汪范金石廖贾夏韦付方白邹孟熊秦邱江尹薛闫段雷侯龙史陶黎贺顾毛郝龚邵万钱严覃武戴莫"
    "孔向汤常温康施文牛樊葛邢安齐易乔伍庞颜倪庄聂章鲁岳翟殷詹申欧耿关兰焦俞左柳甘祝包宁尚符舒阮柯纪梅"
)
#: Function words that say opposite things ("before dinner" / "after dinner"): WordNet has no
#: antonyms for prepositions.
OPPOSED_FUNCTION_WORDS = frozenset(
    frozenset(pair)
    for pair in (
        ("before", "after"),
        ("above", "below"),
        ("over", "under"),
        ("since", "until"),
        ("inside", "outside"),
        ("into", "out"),
        ("from", "to"),
        ("前", "后"),
        ("之前", "之后"),
        ("以前", "以后"),
        ("上", "下"),
    )
)
_RE_CJK = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_RE_LATIN = re.compile(r"[a-z]+")
_RE_TOKEN = re.compile(
    r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+|[A-Za-z\u00c0-\u024f0-9]+(?:['’][A-Za-z]+)?"
)


def _pointers(pos: str, offset: int) -> list[tuple[str, str, int]]:
    wn = wordnet.open_wordnet()
    assert wn is not None
    return wn.synset(pos, offset)[1]


@lru_cache(maxsize=65536)
def _ancestors(pos: str, offset: int, depth: int) -> dict[int, int]:
    """The hypernyms of a synset up to ``depth`` steps (offset → steps)."""
    out: dict[int, int] = {}
    frontier = [(offset, 0)]
    while frontier:
        at, steps = frontier.pop()
        if steps >= depth:
            continue
        for sym, p, o in _pointers(pos, at):
            if sym in {"@", "@i"} and p == pos and (o not in out or out[o] > steps + 1):
                out[o] = steps + 1
                frontier.append((o, steps + 1))
    return out


@lru_cache(maxsize=65536)
def _root_depth(pos: str, offset: int) -> int:
    """Steps from the synset to the top of its hierarchy (the shortest way up)."""
    ups = [o for sym, p, o in _pointers(pos, offset) if sym in {"@", "@i"} and p == pos]
    return 0 if not ups else 1 + min(_root_depth(pos, o) for o in ups)


def _cluster_heads(offset: int) -> frozenset[int]:
    """An adjective's cluster: its head synsets (``&`` similar-to) or itself when it is one."""
    heads = {o for sym, p, o in _pointers("a", offset) if sym == "&" and p == "a"}
    return frozenset(heads) if heads else frozenset({offset})


@lru_cache(maxsize=65536)
def _lemmas(word: str) -> tuple[str, ...]:
    found = [lemma for forms in lemminflect.getAllLemmas(word).values() for lemma in forms]
    return tuple(dict.fromkeys([word, *found]))


@lru_cache(maxsize=65536)
def _unstemmed(stem: str) -> tuple[str, ...]:
    """The words a light stem can stand for (content words and CC-CEDICT glosses drop a final
    ``s``: "tenni" is tennis, "balconi" balcony), those WordNet has (or whose lemma it has:
    "bought")."""
    wn = wordnet.open_wordnet()
    forms = [stem, stem + "s", stem + "e", *([stem[:-1] + "y"] if stem.endswith("i") else [])]
    return tuple(
        f for f in forms if wn is not None and any(wn.offsets(p, w) for w in _lemmas(f) for p in "nva")
    )


def _parts_of_speech(lemmas: Sequence[str]) -> set[str]:
    """The parts of speech a word is commonly used as: those whose senses were tagged at least half
    as often as its most tagged one (drive is a verb far more often than a noun); all it has when
    none was tagged."""
    wn = wordnet.open_wordnet()
    assert wn is not None
    tagged = {p: sum(wn.entry(p, w)[0] for w in lemmas) for p in "nva"}
    top = max(tagged.values())
    if top == 0:
        return {p for p in "nva" if any(wn.offsets(p, w) for w in lemmas)}
    return {p for p, n in tagged.items() if n * 2 >= top}


def opposite(a: str, b: str) -> bool:
    """Whether WordNet makes English words ``a`` and ``b`` (or their lemmas) antonyms in some sense
    (buy / sell, sister / brother; :func:`engram_server.domain.wordnet.antonyms`)."""
    lb = set(_lemmas(b.casefold()))
    return any(not lb.isdisjoint(wordnet.antonyms(x)) for x in _lemmas(a.casefold()))


def _is_a(x: int, y: int) -> bool:
    """Whether one noun synset is a kind of the other, up to one step beyond :data:`NOUN_DEPTH`."""
    return y in _ancestors("n", x, NOUN_DEPTH + 1) or x in _ancestors("n", y, NOUN_DEPTH + 1)


def _kin(pos: str, x: int, y: int) -> bool:
    """Whether synsets ``x`` and ``y`` of part of speech ``pos`` are of one kind: nouns under a
    common hypernym that is not near the root, at most :data:`NOUN_DEPTH` steps up from one and
    one step more from the other, verbs with a common direct hypernym, adjectives in one
    cluster."""
    if pos == "n":
        # WordNet's branches differ in depth (aunt → kinswoman → relative, but mother → parent →
        # genitor → progenitor → ancestor → relative): one step more is allowed on one side.
        up_x, up_y = _ancestors("n", x, NOUN_DEPTH + 1), _ancestors("n", y, NOUN_DEPTH + 1)
        return any(
            _root_depth("n", c) >= MIN_KIND_DEPTH and min(up_x[c], up_y[c]) <= NOUN_DEPTH
            for c in up_x.keys() & up_y.keys()
        )
    if pos == "v":
        return bool(_ancestors("v", x, 1).keys() & _ancestors("v", y, 1).keys())
    return bool(_cluster_heads(x) & _cluster_heads(y))


@lru_cache(maxsize=65536)
def same_kind(a: str, b: str, *, nouns: bool = False) -> bool:
    """Whether English words ``a`` and ``b`` name different things of one kind, or opposites (see
    the module's description); False for synonyms, for one a kind of the other, for unknown words.
    ``nouns``: both are used as nouns (the sentence says so), whatever they are used as most."""
    wn = wordnet.open_wordnet()
    if wn is None or a == b:
        return False
    la, lb = _lemmas(a.casefold()), _lemmas(b.casefold())
    if set(la) & set(lb):
        return False
    if opposite(a, b):
        return True
    found = False
    common_pos = {"n"} if nouns else _parts_of_speech(la) & _parts_of_speech(lb)
    for pos in ("n", "v", "a"):
        if {o for w in la for o in wn.offsets(pos, w)} & {o for w in lb for o in wn.offsets(pos, w)}:
            return False  # synonyms in some sense
        top_a = {o for w in la for o in wn.offsets(pos, w)[:SENSES]}
        top_b = {o for w in lb for o in wn.offsets(pos, w)[:SENSES]}
        if not top_a or not top_b or pos not in common_pos:
            continue
        pairs = list(product(top_a, top_b))
        if pos == "n" and any(_is_a(x, y) for x, y in pairs):
            return False  # one is a kind of the other
        found = found or any(_kin(pos, x, y) for x, y in pairs)
    return found


def _of_kind(word: str, kinds: frozenset[str]) -> bool:
    """Whether some noun sense of ``word`` is, at most :data:`NOUN_DEPTH` steps up, a kind one of
    ``kinds`` names. CC-CEDICT often glosses a word with its kind beside it (银色 "silver (color)",
    黄色 "yellow; color"): the shared gloss says in which sense the two words differ."""
    wn = wordnet.open_wordnet()
    if wn is None or not kinds:
        return False
    targets = {o for k in kinds for o in wn.offsets("n", k)}
    return any(
        targets & _ancestors("n", o, NOUN_DEPTH).keys() for w in _lemmas(word) for o in wn.offsets("n", w)
    )


def _affixed(x: str, y: str) -> tuple[str, str, str] | None:
    """Two Chinese words that share a first or last part: (what only ``x`` has, what only ``y`` has,
    the shared part), when all three are dictionary words (银色 / 黄色 → 银, 黄, 色; jieba's 猫叫 / 狗叫
    → 猫, 狗, 叫)."""
    from engram_server.domain import crosslingual  # noqa: PLC0415 - crosslingual imports specifics

    d = crosslingual.dictionary()
    for n in range(min(len(x), len(y)) - 1, 0, -1):
        if x[-n:] == y[-n:] and all(w in d for w in (x[:-n], y[:-n], x[-n:])):
            return x[:-n], y[:-n], x[-n:]
        if x[:n] == y[:n] and all(w in d for w in (x[n:], y[n:], x[:n])):
            return x[n:], y[n:], x[:n]
    return None


def _pair_kind(xs: Iterable[str], ys: Iterable[str], *, nouns: bool = False) -> str | None:
    """``antonym`` when an English word of ``xs`` is the opposite of one of ``ys``, ``term`` when
    they name different things of one kind (:func:`same_kind`), else None."""
    pairs = list(product(xs, ys))
    if any(opposite(p, q) for p, q in pairs):
        return "antonym"
    if any(_co_senses(p, q) for p, q in pairs):
        return None  # everyday near synonyms WordNet keeps apart (job / position, laptop / notebook)
    return "term" if any(same_kind(p, q, nouns=nouns) for p, q in pairs) else None


def _co_senses(a: str, b: str) -> bool:
    """Whether English words ``a`` and ``b`` (or their lemmas) are given as senses of the same
    CC-CEDICT headwords (in at least two: "prefer" ~ "like", "job" ~ "position")."""
    from engram_server.domain import crosslingual  # noqa: PLC0415 - crosslingual imports specifics

    co = crosslingual.dictionary().synonyms
    return any(
        crosslingual.stem(v) in co.get(crosslingual.stem(u), ())
        for u in _lemmas(a.casefold())
        for v in _lemmas(b.casefold())
    )


def _zh_kin(x: str, y: str) -> str | None:
    """Whether Chinese words ``x`` and ``y`` are opposites (``antonym``) or name different things of
    one kind (``term``), by their CC-CEDICT glosses. Words that share a gloss are near synonyms
    (工作 / 上班 "to work") unless what differs is opposite (姐姐 / 哥哥: "older" sister / brother);
    otherwise some gloss of each must be of one kind with one of the other's (猫 "cat" / 狗 "dog").
    Words that share a part are compared by what differs (银色 / 黄色: 银 / 黄), and the shared part
    may name the kind (色 "color": silver and yellow are both colours)."""
    affixed = _affixed(x, y)
    if affixed is not None:
        cx, cy, part = affixed
        gx, gy, kinds = _glosses(cx), _glosses(cy), _glosses(part)
        if gx and gy and not gx & gy:
            kind = _pair_kind(gx, gy)
            if kind is not None:
                return kind
            if any(_of_kind(p, kinds) for p in gx) and any(_of_kind(q, kinds) for q in gy):
                return "term"
    gx, gy = _glosses(x), _glosses(y)
    if not gx or not gy:
        return None
    if gx & gy:
        return "antonym" if any(opposite(p, q) for p, q in product(gx - gy, gy - gx)) else None
    return _pair_kind(gx, gy)


def _zh_name(word: str) -> bool:
    """A personal name jieba does not tag: a common surname and one or two more characters, and no
    dictionary word."""
    from engram_server.domain import crosslingual  # noqa: PLC0415 - crosslingual imports specifics

    return 2 <= len(word) <= 3 and word[0] in ZH_SURNAMES and word not in crosslingual.dictionary()


@lru_cache(maxsize=65536)
def _zh_verb_senses(word: str) -> frozenset[str]:
    """A Chinese word's CC-CEDICT verb senses ("to read", "to take off": ``read``, ``take_off``)."""
    from engram_server.domain import crosslingual  # noqa: PLC0415 - crosslingual imports specifics

    d = crosslingual.dictionary()
    return d.entry(word).verbs if word in d else frozenset()


def _words_of(stems: list[str]) -> list[str]:
    """The WordNet verbs the stems of one-word senses stand for ("choos" → "choose")."""
    wn = wordnet.open_wordnet()
    if wn is None:
        return []
    forms = ((x, x + "e", x[:-1] + "y") if x.endswith("i") else (x, x + "e") for x in stems)
    return [f for group in forms for f in group if wn.offsets("v", f)]


@lru_cache(maxsize=65536)
def _glosses(word: str) -> frozenset[str]:
    """The English words of a Chinese word's CC-CEDICT glosses. The dictionary keeps them lightly
    stemmed ("tenni", "balconi"): each stem stands for the WordNet lemmas it can be cut from."""
    from engram_server.domain import crosslingual  # noqa: PLC0415 - crosslingual imports specifics

    d = crosslingual.dictionary()
    if word not in d:
        return frozenset()
    wn = wordnet.open_wordnet()
    out: set[str] = set()
    for stem in d.entry(word).glosses:
        forms = (
            [stem, stem + "s", stem + "e", stem[:-1] + "y"]
            if stem.endswith("i")
            else [stem, stem + "s", stem + "e"]
        )
        out.update(f for f in forms if wn is not None and any(wn.offsets(p, f) for p in "nva"))
    return frozenset(out)


def _contrast(x: str, y: str, *, nouns: bool = False) -> str | None:
    """``antonym``, ``term`` or ``name`` when words ``x`` and ``y`` (one script) name different
    things, else None. ``nouns``: both English words are used as nouns."""
    if frozenset((x, y)) in OPPOSED_FUNCTION_WORDS:
        return "antonym"
    if _RE_CJK.match(x) and _RE_CJK.match(y):
        if _zh_name(x) and _zh_name(y):
            return "name"
        return _zh_kin(x, y)
    if _RE_LATIN.fullmatch(x) and _RE_LATIN.fullmatch(y):
        return _pair_kind(_unstemmed(x), _unstemmed(y), nouns=nouns)
    return None


#: Words after which an English word is a noun, not a verb ("the walk", "her arm", "for lunch"):
#: determiners, possessive pronouns and prepositions (closed classes, like the function words).
_EN_NOUN_BEFORE_TEXT = """
    a an the this that these those my your his her its our their every each some any no
    in on at by for from of with without into onto over under after before during since until about"""
_EN_NOUN_BEFORE = frozenset(_EN_NOUN_BEFORE_TEXT.split())
#: How far up WordNet's verb hierarchy a more general verb may be and still name the same act
#: (buy → get: "bought the tickets" / "got the tickets").
VERB_DEPTH = 2
#: How many of a verb's most frequent WordNet senses (WordNet lists them by frequency) count when
#: two verbs are compared as one act: a rare sense makes near any two common verbs kin (teach /
#: learn through learn's fifth sense "impart skills", take / get through take's 42nd). Four keeps
#: book / reserve (reserve's fourth sense) and phone / call (call's third) one act; chosen by
#: probing everyday verb pairs, not from the pair sets that measure it.
ACT_SENSES = 4


@lru_cache(maxsize=4096)
def _zh_tags(text: str) -> tuple[tuple[str, str], ...]:
    return zh_tagged(text)


def _verb_at(text: str, i: int) -> bool:
    """Whether the word at index ``i`` of ``_tokens(text)`` is used as a verb there. English: a
    word lemminflect reads as a verb and WordNet has as one, not right after a determiner, a
    possessive or a preposition, nor after adjectives that follow one ("Tom sold his bike", but
    not "the walk", "her arm", "for lunch", "a final review").
    Chinese: a word right before an aspect particle (联系了) or one jieba tags as a verb."""
    toks = _tokens(text)
    word = toks[i][1]
    if _RE_CJK.match(word):
        if i + 1 < len(toks) and toks[i + 1][1] in ZH_ASPECT:
            return True
        return any(w == word and tag.startswith("v") for w, tag in _zh_tags(text))
    if not _RE_LATIN.fullmatch(word):
        return False
    wn = wordnet.open_wordnet()
    if wn is None or not any(wn.offsets("v", v) for v in _verb_lemmas(word)):
        return False
    return not _noun_at(text, i)


def _noun_at(text: str, i: int) -> bool:
    """Whether the English word at index ``i`` of ``_tokens(text)`` is a noun by its place: right
    after a determiner, a possessive or a preposition, or after adjectives that follow one ("the
    saddle", "Anna's bike", "a final review")."""
    toks = _tokens(text)
    if not _RE_LATIN.fullmatch(toks[i][1]):
        return False
    wn = wordnet.open_wordnet()
    k = i - 1
    while k >= 0 and toks[k][2] and wn is not None and _is_adjective(toks[k][1]):
        k -= 1
    before = toks[k][1] if k >= 0 else ""
    return before in _EN_NOUN_BEFORE or bool(_RE_POSSESSIVE.search(before))


def _is_adjective(word: str) -> bool:
    """A word WordNet has as an adjective that is no form of a verb ("final", "old"; not "used")."""
    wn = wordnet.open_wordnet()
    return wn is not None and bool(wn.offsets("a", word)) and not _verb_lemmas(word)[1:]


@lru_cache(maxsize=65536)
def _verb_lemmas(word: str) -> tuple[str, ...]:
    """The verbs an English word form can be (lemminflect: "sold" → sell, "lent" → lend)."""
    low = word.casefold()
    return tuple(dict.fromkeys([low, *lemminflect.getAllLemmas(low).get("VERB", ())]))


def _verb_senses(word: str, most: int | None = None) -> set[int]:
    """The WordNet verb synsets of ``word``'s lemmas (with ``most``: each lemma's ``most`` most
    frequent senses only)."""
    wn = wordnet.open_wordnet()
    assert wn is not None
    return {o for v in _verb_lemmas(word) for o in wn.offsets("v", v)[:most]}


@lru_cache(maxsize=65536)
def same_act(a: str, b: str) -> bool:
    """Whether English verbs ``a`` and ``b`` name one act in other words: a lemma in common, a
    WordNet verb synset in common in any sense (phone / call, mend / repair, begin / start),
    senses of the same CC-CEDICT headwords (like / prefer), or one a more general way of saying
    the other, at most :data:`VERB_DEPTH` steps up WordNet's verb hierarchy (buy → get)."""
    if set(_verb_lemmas(a)) & set(_verb_lemmas(b)) or _co_senses(a, b):
        return True
    sa, sb = _verb_senses(a, ACT_SENSES), _verb_senses(b, ACT_SENSES)
    if sa & sb:
        return True
    up_a = {h for o in sa for h in _ancestors("v", o, VERB_DEPTH)}
    up_b = {h for o in sb for h in _ancestors("v", o, VERB_DEPTH)}
    return not up_a.isdisjoint(sb) or not up_b.isdisjoint(sa)


def _light_verb(verb: str, other: str) -> bool:
    """Whether English ``verb`` says what the other text says with a light verb and a noun ("gave
    the draft a review" / "reviewed the draft", "took a walk" / "walked"): the other text has the
    verb's lemma as a content word."""
    from engram_server.domain import specifics  # noqa: PLC0415 - specifics imports this module

    keys = {k for k, _, content in _tokens(other) if content}
    return any(specifics.stem(w) in keys for w in _verb_lemmas(verb))


def _zh_same_act(x: str, y: str) -> bool:
    """Whether Chinese verbs ``x`` and ``y`` name one act: by their CC-CEDICT glosses, a gloss in
    common (修理 / 维修 "to repair") or two glosses that are one act (:func:`same_act`); words that
    share a part are compared by what differs (遛狗 / 喂狗: 遛 / 喂). When both have verb senses
    ("to …"), those alone are compared, a phrasal verb whole (放 "to put" is not 穿 "to put on"):
    one act is a sense in common (选 / 挑 "to choose", 买 / 购买 "to buy"), two one-word senses
    CC-CEDICT gives as senses of the same headwords (like / prefer), or a one-word sense that ends
    a phrase of the other (工作 "to work" / 上班 "to go to work"); not WordNet's kin, which one of a
    character's many senses nearly always reaches (看 / 听 via see / hear, 教 / 学 via teach /
    learn, 写 / 读 via 读 dòu "phrase marked by pause" → "mark")."""
    affixed = _affixed(x, y)
    if affixed is not None:
        x, y = affixed[0], affixed[1]
    vx, vy = _zh_verb_senses(x), _zh_verb_senses(y)
    if vx and vy:
        if vx & vy:
            return True
        ox, oy = [v for v in vx if "_" not in v], [v for v in vy if "_" not in v]
        if any(_co_senses(p, q) for p, q in product(_words_of(ox), _words_of(oy))):
            return True
        return any(v.rpartition("_")[2] in oy for v in vx if "_" in v) or any(
            v.rpartition("_")[2] in ox for v in vy if "_" in v
        )
    gx, gy = _glosses(x), _glosses(y)
    if not gx or not gy:
        return False
    if gx & gy:
        return True
    return any(same_act(p, q) for p, q in product(gx, gy))


def _action(existing: str, i: int, new: str, j: int) -> str | None:
    """``action`` when the word at ``i`` of ``existing`` and the one at ``j`` of ``new`` (the
    replaced pair of :func:`_swaps_at`) are both used as verbs and do not name one act
    (:func:`same_act`, :func:`_zh_same_act`, nor a light verb and its noun: :func:`_light_verb`):
    "Tom sold his bike" / "Tom lent his bike", "Anna called the dentist" / "Anna emailed the
    dentist", 我们取消了订阅 / 我们续订了订阅 — another act on the same thing. None otherwise."""
    x, y = _tokens(existing)[i][1], _tokens(new)[j][1]
    if wordnet.open_wordnet() is None or not (_verb_at(existing, i) and _verb_at(new, j)):
        return None
    if _RE_CJK.match(x) and _RE_CJK.match(y):
        return None if _zh_same_act(x, y) else "action"
    if _RE_LATIN.fullmatch(x) and _RE_LATIN.fullmatch(y):
        one = same_act(x, y) or _light_verb(y, existing) or _light_verb(x, new)
        return None if one else "action"
    return None


@lru_cache(maxsize=1024)
def _tokens(text: str) -> tuple[tuple[str, str, bool], ...]:
    """The words of ``text`` in order: (the key they are compared by, the word, whether it is a
    content word). Latin words are compared case-folded and lightly stemmed, Chinese words as jieba
    cuts them; punctuation is dropped. Cached: one pair's rules ask for each text's words many
    times (every replaced word is looked at as a noun and as a verb in its place)."""
    from engram_server.domain import specifics  # noqa: PLC0415 - specifics imports this module

    out: list[tuple[str, str, bool]] = []
    for m in _RE_TOKEN.finditer(text):
        word = m.group()
        if _RE_CJK.match(word):
            out.extend((w, w, w not in specifics.ZH_FUNCTION_WORDS) for w in zh_cut(word) if w.strip())
        else:
            low = word.casefold()
            out.append((specifics.stem(low), low, low not in specifics.EN_FUNCTION_WORDS))
    return tuple(out)


def _negating(word: str) -> bool:
    from engram_server.domain import specifics  # noqa: PLC0415 - specifics imports this module

    return specifics.extract(word).negations > 0


def _swaps(existing: str, new: str) -> list[tuple[str, str]] | None:
    """The words ``new`` replaces in ``existing`` (stored word, new word), when the two are the same
    sequence of words but for content words replaced one for one in place (each alone between
    unchanged words) and function words; opposed function words (before / after) count as
    replaced. None when words are added, dropped or rephrased, or a replaced word is a negation."""
    found = _swaps_at(existing, new)
    return None if found is None else [(x, y) for x, y, _, _ in found]


def _swaps_at(existing: str, new: str) -> list[tuple[str, str, int, int]] | None:
    """:func:`_swaps` with where each replaced word stands: (stored word, new word, its index in
    ``_tokens(existing)``, its index in ``_tokens(new)``)."""
    a, b = _tokens(existing), _tokens(new)
    matcher = SequenceMatcher(a=[key for key, _, _ in a], b=[key for key, _, _ in b], autojunk=False)
    swaps: list[tuple[str, str, int, int]] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        if not any(content for _, _, content in a[i1:i2] + b[j1:j2]):
            if tag == "replace" and i2 - i1 == j2 - j1:
                swaps.extend(
                    (a[i][1], b[j][1], i, j)
                    for i, j in zip(range(i1, i2), range(j1, j2), strict=True)
                    if frozenset((a[i][1], b[j][1])) in OPPOSED_FUNCTION_WORDS
                )
            continue  # only function words differ here
        if tag != "replace" or i2 - i1 != j2 - j1:
            return None  # words added, dropped or rephrased: not one sentence with words replaced
        pairs = list(zip(range(i1, i2), range(j1, j2), strict=True))
        if any(a[i][2] != b[j][2] for i, j in pairs):
            return None  # a content word for a function word: rephrased
        replaced = [(i, j) for i, j in pairs if a[i][2]]
        if len(replaced) != 1:
            return None  # several content words in a row: rephrased
        i, j = replaced[0]
        x, y = a[i][1], b[j][1]
        if _negating(x) or _negating(y):
            return None  # a negation is compared as such (specifics), not as a word
        swaps.append((x, y, i, j))
    return swaps


def contrasting(existing: str, new: str) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
    """Where ``new`` is ``existing`` with a word replaced by its opposite, by another thing of its
    kind or by a verb of another act, by kind (``antonym`` / ``term`` / ``name`` / ``action``, or
    ``order`` for two words trading places):
    (the stored text's words, the new text's words). The two texts, in one script, must be the
    same sequence of words but for at most :data:`MAX_CHANGED` content words replaced one for one
    in place, and function words; empty otherwise."""
    swaps = _swaps_at(existing, new)
    if not swaps or len(swaps) > MAX_CHANGED:
        return {}
    if len(swaps) == 2 and swaps[0][:2] == swaps[1][1::-1]:
        # two words trading places ("quit tennis and started chess" / "quit chess and started
        # tennis"), as two names do: an order conflict, listed in each text's order
        return {"order": (swaps[0][:2], swaps[1][:2])}
    found: dict[str, tuple[list[str], list[str]]] = {}
    for x, y, i, j in swaps:
        nouns = _noun_at(existing, i) and _noun_at(new, j)
        kind = (
            _contrast(x, y, nouns=nouns) or _action(existing, i, new, j) or _unknown_term(existing, new, x, y)
        )
        if kind is not None:
            old, added = found.setdefault(kind, ([], []))
            old.append(x)
            added.append(y)
    return {k: (tuple(old), tuple(added)) for k, (old, added) in found.items()}


def _known(word: str) -> bool:
    """Whether WordNet has English word ``word`` (or one of its lemmas) in any part of speech."""
    wn = wordnet.open_wordnet()
    return wn is not None and any(wn.offsets(p, w) for w in _lemmas(word) for p in "nvar")


def _named(text: str, word: str) -> bool:
    """Whether the specifics read ``word`` as a name in ``text`` (capitalised, not a function
    word): names are compared by their own rule (:func:`engram_server.domain.specifics.conflicts`)."""
    from engram_server.domain import specifics  # noqa: PLC0415 - specifics imports this module

    return word in specifics.extract(text).latin_names


def _unknown_term(existing: str, new: str, x: str, y: str) -> str | None:
    """``term`` when English words ``x`` and ``y``, one replaced by the other in place, are not one
    word written two ways and WordNet lacks at least one of them ("the onboarding service" / "the
    shipping service", "a bug in the frontend" / "… in the backend", "prefers postgres" / "prefers
    mysql"): nothing relates the two words, and a sentence about another thing states another
    fact. The jargon agents remember most (software, products, teams) is the vocabulary WordNet
    lacks, so "no known relation" must keep two texts apart rather than let the embedding call
    them one; a restatement that swaps in an unknown word is left in the near-duplicate zone,
    never refused. One word written two ways is no contrast: the same lemma, the same letters
    without case, or one the other's beginning of four letters or more (postgres / postgresql).
    Names are left to the specifics' name rule."""
    from engram_server.domain import specifics  # noqa: PLC0415 - specifics imports this module

    if not (_RE_LATIN.fullmatch(x) and _RE_LATIN.fullmatch(y)) or x == y:
        return None
    if {x, y} & specifics.MONTH_WORDS:
        return None  # a month or a weekday: a date, compared by the specifics
    if _known(x) and _known(y):
        return None
    shorter, longer = sorted((x, y), key=len)
    if len(shorter) >= 4 and longer.startswith(shorter):
        return None
    if set(_lemmas(x)) & set(_lemmas(y)) or _co_senses(x, y):
        return None
    if _named(existing, x) or _named(new, y):
        return None
    return "term"


def _synonyms(x: str, y: str) -> bool:
    """Whether words ``x`` and ``y`` (one script) are one thing: English words sharing a WordNet
    synset (for verbs, among their :data:`ACT_SENSES` most frequent senses) in a part of speech
    both are commonly used as (sofa / couch, flat / apartment) or given
    as senses of the same CC-CEDICT headwords (prefer / like), Chinese
    words one of whose CC-CEDICT glosses contains the other's (电脑 "computer" / 计算机 "computer;
    calculator"), or the same lemma ("bought" / "buys")."""
    if _RE_CJK.match(x) and _RE_CJK.match(y):
        gx, gy = _glosses(x), _glosses(y)
        return bool(gx) and bool(gy) and (gx <= gy or gy <= gx)
    if not (_RE_LATIN.fullmatch(x) and _RE_LATIN.fullmatch(y)):
        return False
    wn = wordnet.open_wordnet()
    if wn is None:
        return False
    for p, q in product(_unstemmed(x), _unstemmed(y)):
        la, lb = _lemmas(p), _lemmas(q)
        if set(la) & set(lb) or _co_senses(p, q):
            return True
        common = _parts_of_speech(la) & _parts_of_speech(lb)
        for pos in common:
            most = ACT_SENSES if pos == "v" else None  # (as for one act: a verb's rare senses don't count)
            if {o for w in la for o in wn.offsets(pos, w)[:most]} & {
                o for w in lb for o in wn.offsets(pos, w)[:most]
            }:
                return True
    return False


def synonym_swapped(existing: str, new: str) -> bool:
    """Whether ``new`` is ``existing`` with at most :data:`MAX_CHANGED` content words replaced in
    place by a synonym each ("Anna's new sofa is dark green." / "Anna's new couch is dark green.";
    小李的电脑坏了 / 小李的计算机坏了): the same sentence reworded."""
    swaps = _swaps(existing, new)
    if not swaps or len(swaps) > MAX_CHANGED:
        return False
    return all(_contrast(x, y) is None and _synonyms(x, y) for x, y in swaps)


def _phrasal(existing: str, new: str) -> tuple[str, str, bool] | None:
    """Where one text has a phrasal verb (a verb and its particle, one WordNet lemma: give_up,
    put_off, pick_up) and the other, the same words otherwise, a one-word verb in its place: (the
    stored text's words, the new text's words, whether WordNet puts the one-word verb in a synset
    of the phrasal one); None for any other pair."""
    wn = wordnet.open_wordnet()
    if wn is None:
        return None
    for phrasal_text, verb_text in ((existing, new), (new, existing)):
        a, b = _tokens(phrasal_text), _tokens(verb_text)
        if len(a) != len(b) + 1:
            continue
        keys_a, keys_b = [k for k, _, _ in a], [k for k, _, _ in b]
        for i in range(len(b)):
            if keys_a[:i] != keys_b[:i] or keys_a[i + 2 :] != keys_b[i + 1 :]:
                continue
            (_, verb, _), (_, particle, _), (_, single, _) = a[i], a[i + 1], b[i]
            if not all(_RE_LATIN.fullmatch(w) for w in (verb, particle, single)):
                continue
            phrasal = {o for v in _verb_lemmas(verb) for o in wn.offsets("v", f"{v}_{particle}")}
            if not phrasal or not _verb_at(verb_text, i) or _negating(single):
                continue
            same = bool(phrasal & _verb_senses(single))
            words = f"{verb} {particle}"
            return (words, single, same) if phrasal_text == existing else (single, words, same)
    return None


def phrasal_restated(existing: str, new: str) -> bool:
    """Whether one text has a phrasal verb where the other, the same words otherwise, has a
    one-word verb WordNet puts in one of its synsets ("The user gave up smoking." / "The user quit
    smoking.": give_up and quit share "discontinue, stop, cease, give up, quit"; "put off the
    meeting" / "postponed the meeting"). English only."""
    found = _phrasal(existing, new)
    return found is not None and found[2]


def phrasal_action(existing: str, new: str) -> tuple[str, str] | None:
    """The verbs, when one text has a phrasal verb and the other a one-word verb in its place that
    WordNet does not put in any of its synsets ("Tom picked up the kids." / "Tom dropped the
    kids."): another act on the same thing, as :func:`contrasting` finds for one-word verbs
    (``action``). None otherwise."""
    found = _phrasal(existing, new)
    return None if found is None or found[2] else (found[0], found[1])


#: The WordNet nouns an event is a kind of: a gathering of people ("meeting": "a formally arranged
#: gathering") and a social event ("party", "ceremony", "concert"); looked up by lemma and sense.
_EVENT_KINDS = (("gathering", 0), ("social_event", 0))


@lru_cache(maxsize=65536)
def zh_event_noun(word: str) -> bool:
    """Whether Chinese ``word`` names an event people hold: one of its CC-CEDICT glosses is, in one
    of its :data:`SENSES` most frequent WordNet noun senses, a kind of gathering or social event at
    most :data:`NOUN_DEPTH` steps up (会议 / 周会 / 例会 "meeting", 晚会 "party", 婚礼 "ceremony",
    演唱会 "concert"); not 门 "door", 空调, 公司 "company"."""
    wn = wordnet.open_wordnet()
    if wn is None or not _RE_CJK.match(word):
        return False
    kinds = {wn.offsets("n", lemma)[k] for lemma, k in _EVENT_KINDS if len(wn.offsets("n", lemma)) > k}
    for gloss in _glosses(word):
        for o in wn.offsets("n", gloss)[:SENSES]:
            if o in kinds or not kinds.isdisjoint(_ancestors("n", o, NOUN_DEPTH)):
                return True
    return False


#: The most words a Chinese verb's phrase sense is spelled out in by the other text
#: (:func:`zh_phrase_restated`: 戒烟 "to give up smoking" = 放弃 + 吸烟).
ZH_PHRASE_WORDS = 3


def _zh_senses(word: str) -> frozenset[str]:
    """What a Chinese word may contribute to a spelled-out verb phrase: its CC-CEDICT verb senses
    (``give_up``, ``smoke``) and its one-word glosses (烟 "cigarette; smoke"), as stems."""
    from engram_server.domain import crosslingual  # noqa: PLC0415 - crosslingual imports specifics

    d = crosslingual.dictionary()
    if word not in d:
        return frozenset()
    e = d.entry(word)
    return e.verbs | e.glosses


def _spells(phrase: list[str], run: Sequence[str], *, head: bool = True) -> bool:
    """Whether the words of ``phrase`` (stems, in order) split into ``len(run)`` consecutive
    non-empty parts, each a sense of the run's word in its place (:func:`_zh_senses`); the first
    part (the phrase's verb) a verb sense of the first word (放弃 "to give up", not 回合 "round")."""
    if not run:
        return not phrase
    senses = _zh_verb_senses(run[0]) if head else _zh_senses(run[0])
    last = len(phrase) - len(run) + 1
    return any(
        "_".join(phrase[:k]) in senses and _spells(phrase[k:], run[1:], head=False)
        for k in range(1, last + 1)
    )


#: English articles: no part of a spelled-out phrase ("to open a door" is 打开 "to open" + 门 "door").
_EN_ARTICLES = frozenset(("a", "an", "the"))


def _zh_phrase_of(word: str, run: Sequence[str]) -> bool:
    """Whether Chinese ``word`` has a CC-CEDICT verb sense of several words ("to give up smoking")
    that the words of ``run`` spell out in order, one part each (放弃 "to give up" + 吸烟 "to
    smoke"); articles in the sense are no part ("to open a door": 打开 + 门)."""
    phrases = ([p for p in sense.split("_") if p not in _EN_ARTICLES] for sense in _zh_verb_senses(word))
    return any(len(parts) >= len(run) and _spells(parts, run) for parts in phrases)


def zh_phrase_restated(existing: str, new: str) -> bool:
    """Whether one Chinese text has a word whose CC-CEDICT verb sense is a phrase ("to give up
    smoking" for 戒烟) where the other, the same content words in the same order otherwise, has
    two or three consecutive content words (grammar words such as 了 may stand between them)
    whose senses make up that phrase in order, one part each (放弃 "to give up" + 吸烟 "to
    smoke"): the compound says in one word what the other says in several ("用户去年放弃了吸烟。" /
    "用户去年戒烟了。"). Each part must be a whole verb sense or one-word gloss of its word, and the
    whole phrase must be covered: 开始 "to start" + 吸烟 is "start smoking", not 戒烟; 放弃 + 喝酒 is
    戒酒 "to give up drinking", not 戒烟. A negation among the words is compared as such
    (:func:`engram_server.domain.specifics.conflicts`), never as a part."""
    ta = [(k, w) for k, w, content in _tokens(existing) if content]
    tb = [(k, w) for k, w, content in _tokens(new) if content]
    for one, many in ((ta, tb), (tb, ta)):
        extra = len(many) - len(one)
        if not 1 <= extra < ZH_PHRASE_WORDS:
            continue
        keys_one, keys_many = [k for k, _ in one], [k for k, _ in many]
        for i in range(len(one)):
            if keys_one[:i] != keys_many[:i] or keys_one[i + 1 :] != keys_many[i + extra + 1 :]:
                continue
            word, run = one[i][1], [w for _, w in many[i : i + extra + 1]]
            if not all(_RE_CJK.match(w) for w in (word, *run)) or any(_negating(w) for w in (word, *run)):
                continue
            if _zh_phrase_of(word, run):
                return True
    return False


#: The copula after the possessed noun of "X's car is a …".
_EN_BE = frozenset(["is", "are", "was", "were"])
_RE_POSSESSIVE = re.compile(r"['’]s$", re.IGNORECASE)


#: WordNet verb lexicographer files of acts done *to* a thing rather than with it: changing it
#: (``verb.change``: repair, tune, paint), handling it (``verb.contact``: wash, clean, carry),
#: owning or trading it (``verb.possession``: sell, buy, lend) or dealing in it (``verb.social``:
#: rent). A sense of these is no use of the thing, whatever its definition names.
_NOT_USE_FILES = frozenset({30, 35, 40, 41})
#: How far up the noun hierarchy a kind named by a verb's definition may be from the possessed
#: noun (motorbike → motorcycle → motor vehicle → self-propelled vehicle → wheeled vehicle →
#: vehicle: five steps).
USE_DEPTH = 5


@lru_cache(maxsize=65536)
def done_with(verb: str, noun: str) -> bool:
    """Whether English ``verb`` is, by one of its :data:`SENSES` most frequent WordNet senses'
    definitions, what one does with any ``noun`` of its kind: the definition names a kind the
    noun is, at most :data:`USE_DEPTH` steps up and not near the root, by one of that word's
    :data:`SENSES` most frequent senses or by a word of the kind's synset (drive "operate or
    control a vehicle" / car; ride "be carried or travel on or in a vehicle" / bike, motorbike;
    play "play on an instrument" / guitar, a musical instrument). Not a sense that changes,
    handles, owns or trades the thing (:data:`_NOT_USE_FILES`: repair, tune, wash, carry, sell,
    rent), nor a definition naming the thing itself (clean "clean and tidy up the house" / house:
    one chore, not the use of a house)."""
    from engram_server.domain.specifics import EN_FUNCTION_WORDS  # noqa: PLC0415 - specifics imports this module

    wn = wordnet.open_wordnet()
    if wn is None:
        return False
    senses = {o for w in _lemmas(noun.casefold()) for o in wn.offsets("n", w)[:SENSES]}
    kinds = {
        a for o in senses for a in _ancestors("n", o, USE_DEPTH) if _root_depth("n", a) >= MIN_KIND_DEPTH
    } - senses
    kind_words = {w.casefold() for a in kinds for w in wn.synset("n", a)[0]}
    for v in _lemmas(verb.casefold()):
        for off in wn.offsets("v", v)[:SENSES]:
            if wn.lexical_file("v", off) in _NOT_USE_FILES:
                continue
            for word in _RE_LATIN.findall(wn.definition("v", off).casefold()):
                if word in EN_FUNCTION_WORDS:
                    continue
                if word in kind_words or not kinds.isdisjoint(wn.offsets("n", word)[:SENSES]):
                    return True
    return False


def light_verb_restated(existing: str, new: str) -> bool:
    """Whether one text says what a thing of someone's is ("The user's car is a blue Toyota.") and
    the other, the same words otherwise, says they do with it what one does with such a thing
    ("The user drives a blue Toyota."; :func:`done_with`): the possessed noun and the copula
    replaced in place by the verb, the possessor its subject. English only."""
    for noun_text, verb_text in ((existing, new), (new, existing)):
        a, b = _tokens(noun_text), _tokens(verb_text)
        if len(b) != len(a) - 1:
            continue
        keys_a, keys_b = [k for k, _, _ in a], [k for k, _, _ in b]
        for i in range(1, len(a) - 1):
            if not (a[i][2] and a[i + 1][0] in _EN_BE and _RE_POSSESSIVE.search(a[i - 1][1])):
                continue
            verb = b[i]
            if (
                keys_b == [*keys_a[:i], verb[0], *keys_a[i + 2 :]]
                and verb[2]
                and _RE_LATIN.fullmatch(verb[0])
                and not _negating(verb[1])
                and _same_tense(a[i + 1][1], verb[1])
                and done_with(verb[1], a[i][1])
            ):
                return True
    return False


def _same_tense(be: str, verb: str) -> bool:
    """Whether ``verb`` is in the tense of the copula ``be``: "is" / "drives", "was" / "drove" (not
    "is" / "drove": a trip then, not whose car it is)."""
    tag = ("VBZ", "VBP") if be.casefold() in {"is", "are"} else ("VBD",)
    low = verb.casefold()
    return any(low in lemminflect.getInflection(lemma, t) for lemma in _lemmas(low) for t in tag)


#: Light verbs, a closed class: with an indefinite article and a noun that names an act they say
#: that act, which the noun's own verb says alone ("took a walk" / "walked", "gave the report a
#: review" / "reviewed the report", "made a decision to move" / "decided to move", "had a look at
#: the logs" / "looked at the logs", "paid a visit to Oslo" / "visited Oslo").
LIGHT_VERBS = frozenset({"give", "make", "take", "have", "do", "pay"})
#: The light verbs of making and giving, after which the noun may also be the communication the
#: act makes ("made a call" / "called", "gave a talk" / "talked", "made a copy" / "copied"); after
#: have, take or pay such a noun is a thing held or paid for ("has a copy", "paid a bill").
LIGHT_MAKING_VERBS = frozenset({"give", "make", "do"})
#: WordNet lexicographer files of nouns that name an act: ``noun.act`` and ``noun.event``; and
#: ``noun.communication``, for the light verbs of making (:data:`LIGHT_MAKING_VERBS`).
_LEX_ACTS = frozenset({4, 11})
_LEX_COMMUNICATION = 10
#: Prepositions that bring in the act's object after its noun and go when the verb takes that
#: object directly ("paid a visit to Oslo" / "visited Oslo", "did a review of the budget" /
#: "reviewed the budget"); others stay ("had a look at the logs" / "looked at the logs").
_OBJECT_PREPOSITIONS = frozenset({"of", "to"})
_EN_INDEFINITE = frozenset({"a", "an"})
#: At most this many words between a light verb and its article: the thing the act is done to
#: ("gave the quarterly report a review").
_MAX_LIGHT_OBJECT = 4
#: At most this many adjectives before the act's noun ("a quick final review").
_MAX_LIGHT_ADJECTIVES = 2
_VERB_TAGS = ("VB", "VBD", "VBG", "VBN", "VBP", "VBZ")


@lru_cache(maxsize=65536)
def _verb_tags(word: str) -> frozenset[str]:
    """The Penn tags an English verb form can have (lemminflect): "gave" VBD, "reviews" VBZ,
    "read" VB, VBD, VBN, VBP."""
    low = word.casefold()
    lemmas = lemminflect.getAllLemmas(low).get("VERB") or (low,)
    return frozenset(t for lemma in lemmas for t in _VERB_TAGS if low in lemminflect.getInflection(lemma, t))


@lru_cache(maxsize=65536)
def act_noun(noun: str, verb: str, *, making: bool = False) -> bool:
    """Whether English ``noun`` names the act of ``verb``: one of the noun's :data:`SENSES` most
    frequent WordNet senses is an act or an event (lexicographer files ``noun.act``,
    ``noun.event``; with ``making``, also ``noun.communication``) that WordNet derives from one of
    the verb's :data:`ACT_SENSES` most frequent senses (a ``+`` pointer between the two words:
    review / review, decision / decide, shower "washing yourself …" / shower). Not a thing
    ("garden", "fish", "boat": owning one is not doing it) nor a possession ("fine", "fee")."""
    wn = wordnet.open_wordnet()
    if wn is None:
        return False
    lemmas = _verb_lemmas(verb)
    senses = {o for v in lemmas for o in wn.offsets("v", v)[:ACT_SENSES]}
    files = _LEX_ACTS | {_LEX_COMMUNICATION} if making else _LEX_ACTS
    for n in _lemmas(noun.casefold()):
        for off in wn.offsets("n", n)[:SENSES]:
            if wn.lexical_file("n", off) not in files:
                continue
            if any(p == "v" and to in senses and w in lemmas for p, to, w in wn.derived("n", off, n)):
                return True
    return False


@lru_cache(maxsize=65536)
def _adverb_of(adverb: str, adjective: str) -> bool:
    """Whether English ``adverb`` is the adverb of ``adjective`` (WordNet's pertainym: quickly /
    quick, carefully / careful)."""
    wn = wordnet.open_wordnet()
    if wn is None:
        return False
    for off in wn.offsets("r", adverb.casefold()):
        for sym, p, o in wn.synset("r", off)[1]:
            if sym == "\\" and p == "a" and adjective.casefold() in map(str.casefold, wn.synset("a", o)[0]):
                return True
    return False


def _light_verb_places(light_text: str, verb_text: str) -> list[tuple[str, str, bool]]:
    """Where ``verb_text`` is ``light_text`` with a light verb, an indefinite article and a noun
    replaced by one verb in the light verb's tense (the other words the same, see
    :func:`light_verb_noun_restated`): (the noun, the verb, whether the light verb is one of
    making), for each way the two texts line up."""
    a, b = _tokens(light_text), _tokens(verb_text)
    keys_b = [k for k, _, _ in b]
    out: list[tuple[str, str, bool]] = []
    for i, (_, word, _) in enumerate(a):
        light = set(_verb_lemmas(word)) & LIGHT_VERBS if _RE_LATIN.fullmatch(word) else set()
        if not light:
            continue
        making = bool(light & LIGHT_MAKING_VERBS)
        ends = range(i + 1, min(i + 2 + _MAX_LIGHT_OBJECT, len(a)))
        k = next((k for k in ends if a[k][1] in _EN_INDEFINITE), None)
        if k is None:
            continue
        prefix, thing = [x for x, _, _ in a[:i]], [x for x, _, _ in a[i + 1 : k]]
        for n in range(k + 1, min(k + 2 + _MAX_LIGHT_ADJECTIVES, len(a))):
            adjectives = [w for _, w, _ in a[k + 1 : n]]
            noun = a[n]
            if not noun[2] or not _RE_LATIN.fullmatch(noun[1]) or not all(map(_is_adjective, adjectives)):
                continue
            rest = [x for x, _, _ in a[n + 1 :]]
            rests = [rest, rest[1:]] if not thing and rest[:1] and rest[0] in _OBJECT_PREPOSITIONS else [rest]
            m = len(adjectives)
            for after in rests:
                # the adverbs of the adjectives right before the verb, or at the end
                for j, adverbs in ((len(prefix) + m, len(prefix)), (len(prefix), len(b) - m)):
                    if len(b) != len(prefix) + m + 1 + len(thing) + len(after):
                        continue
                    around = keys_b[:adverbs] + keys_b[adverbs + m :]
                    del around[j - (m if adverbs < j else 0)]
                    _, verb, content = b[j]
                    if (
                        around == prefix + thing + after
                        and content
                        and _RE_LATIN.fullmatch(verb)
                        and not _negating(verb)
                        and _verb_tags(verb) & _verb_tags(word)
                        and all(_adverb_of(b[adverbs + x][1], adj) for x, adj in enumerate(adjectives))
                    ):
                        out.append((noun[1], verb, making))
    return out


@lru_cache(maxsize=65536)
def _act_verbs(noun: str, *, making: bool) -> frozenset[str]:
    """The verbs WordNet derives ``noun``'s act senses from (as :func:`act_noun` reads them, any
    verb sense): review → review, decision → decide."""
    wn = wordnet.open_wordnet()
    if wn is None:
        return frozenset()
    files = _LEX_ACTS | {_LEX_COMMUNICATION} if making else _LEX_ACTS
    return frozenset(
        w
        for n in _lemmas(noun.casefold())
        for off in wn.offsets("n", n)[:SENSES]
        if wn.lexical_file("n", off) in files
        for p, _, w in wn.derived("n", off, n)
        if p == "v"
    )


def light_verb_noun_restated(existing: str, new: str) -> bool:
    """Whether one text says an act with a light verb (:data:`LIGHT_VERBS`), an indefinite article
    and the act's noun (:func:`act_noun`), and the other, the same words otherwise, says it with
    the noun's verb in the light verb's tense: "The user gave the report a review." / "The user
    reviewed the report.", "Anna took a shower." / "Anna showered.", "Tom made a decision to
    move." / "Tom decided to move.". The thing the act is done to may come between the light verb
    and the article ("gave the report a review"), or after the noun with "of" or "to", which the
    verb drops ("paid a visit to Oslo" / "visited Oslo"); an adjective before the noun is its
    adverb with the verb ("gave the draft a quick read" / "quickly read the draft"). Another tense
    ("gave" / "reviews"), another noun ("a rejection"), another object or person is not the same
    fact. English only."""
    return any(
        act_noun(noun, verb, making=making)
        for light_text, verb_text in ((existing, new), (new, existing))
        for noun, verb, making in _light_verb_places(light_text, verb_text)
    )


def light_verb_action(existing: str, new: str) -> tuple[str, str] | None:
    """The noun and the verb, when one text says an act with a light verb and its noun and the
    other, the same words otherwise, has in their place a verb of another act: not the noun's
    verb (:func:`act_noun`) nor one act with a verb WordNet derives the noun from
    (:func:`same_act`): "Priya gave the budget a review." / "Priya rejected the budget.", "Ines
    made a call to the landlord." / "Ines emailed the landlord." — another act on the same thing,
    as :func:`contrasting` finds for one-word verbs (``action``). None otherwise, and when the
    noun names no act WordNet derives from a verb."""
    for light_text, verb_text in ((existing, new), (new, existing)):
        for noun, verb, making in _light_verb_places(light_text, verb_text):
            acts = _act_verbs(noun, making=making)
            if not acts or act_noun(noun, verb, making=making) or not _verb_senses(verb):
                continue
            if not any(same_act(act, verb) for act in acts):
                return (noun, verb) if light_text == existing else (verb, noun)
    return None


#: WordNet lexicographer files of nouns that name a concrete thing: an artifact, an animal, a body
#: part, food, a natural object, a person, a plant, a substance, a place.
_LEX_THINGS = frozenset({5, 6, 8, 13, 15, 17, 18, 20, 27})


def thing_for_act(existing: str, new: str) -> tuple[str, str] | None:
    """A word one text uses as a verb and the other as a noun whose most frequent WordNet sense is
    a concrete thing (:data:`_LEX_THINGS`), in English: "The user has a garden." / "The user
    gardens.", "has a boat" / "boats", "has a fish" / "fishes" — having the thing is not doing
    what its verb says, though both texts have the same content words. (The noun's word, the
    verb's word) in the two texts' order, or None. A noun of an act, a plan or a message is no
    thing ("has a plan to move" / "plans to move")."""
    wn = wordnet.open_wordnet()
    if wn is None:
        return None
    a, b = _tokens(existing), _tokens(new)
    for i, (key, x, content) in enumerate(a):
        if not content or not _RE_LATIN.fullmatch(x):
            continue
        for j, (other, y, _) in enumerate(b):
            if other != key:
                continue
            for noun_text, n, noun, verb_text, v in (
                (existing, i, x, new, j),
                (new, j, y, existing, i),
            ):
                if not (_noun_at(noun_text, n) and _verb_at(verb_text, v)):
                    continue
                first = next((wn.offsets("n", w)[:1] for w in _lemmas(noun) if wn.offsets("n", w)), [])
                if first and wn.lexical_file("n", first[0]) in _LEX_THINGS:
                    return (x, y)
    return None
