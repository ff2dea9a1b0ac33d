"""The topic index (pure): memories clustered by embedding into a two-level tree of named topics.

**Space.** Raw cosines of a sentence model are a poor topic signal: every vector shares a large
common component, and multilingual-e5 puts a Chinese and an English sentence about one subject
further apart than two unrelated English ones. So vectors are *centred per script* before they are
compared: a memory's point is its unit embedding minus the mean embedding of the collection's
memories written in the same main script (:func:`engram_server.domain.text.script_of`), shrunk
towards zero while a script has few memories. On the labelled subject set (``eval/topics.py``) this
lifts leaf purity from 0.62 to 0.98 at the same number of topics and puts both languages of a
subject in one topic. Topic centroids are kept as raw sums with their per-script counts, so the
centred centroid is exact for the current means.

**Algorithm.** Leaves are built by *online leader clustering* over the centred points (each memory
joins the leaf whose centroid is nearest if the cosine is at least ``leaf_threshold``, else it
starts a new leaf), the incremental form of DP-means: one dot product per leaf per write, no fixed
number of topics, and a memory's topic only changes when the memory does. A full build runs that
pass in a deterministic order (oldest first) and then ``refine_passes`` k-means reassignments (every memory
to its nearest centroid) so the result does not depend much on the order. The second level groups
leaves: on a full build, leader clustering of the leaf centroids (largest first) at
``parent_threshold``, then each leaf to its nearest group; a leaf born between builds stays at the
top level until the next one. Centroids are kept as sums, so adding or removing a memory is exact and O(d).

**Stable ids.** A topic's id is minted once (``t`` + 10 hex digits of a hash of its first member)
and then kept: incremental writes never rename ids; a re-clustering seeds the leaves with the
current centroids (a memory near its old topic's centroid lands in it again) and any new cluster
that takes over most of an old one's members inherits its id, so ids survive re-clustering when
membership barely changes. A restart does not re-cluster: :meth:`TopicIndex.restore` puts every
memory back in the leaf the :meth:`TopicIndex.snapshot` recorded (sums are exact, so centroids and
names come out the same).

**Names.** Without an LLM a topic is named by its most salient terms, c-TF-IDF (class-based TF-IDF:
a term's frequency in the topic times ``log(1 + average words per topic / the term's frequency over
all topics)``), over words from :func:`terms` (Latin words lower-cased, Chinese segmented with
jieba, stop words dropped). The service asks the LLM (when configured) to replace the names of
topics that grew or shrank by half since they were named.
"""

from __future__ import annotations

import base64
import hashlib
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import rjieba

from engram_server.domain.text import script_of

__all__ = ["TopicIndex", "TopicParams", "TopicView", "clean_topic_name", "terms", "topic_state_key"]

_CJK_RUN = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_LATIN_WORD = re.compile(r"[A-Za-z\u00c0-\u024f][A-Za-z\u00c0-\u024f0-9]*(?:[-_.][A-Za-z0-9]+)*")

_EN_STOP = frozenset(
    """a about above after again against all also am an and any are as at be because been before being
    below between both but by can could did do does doing done down during each even every few for
    from further get gets got had has have having he her here hers herself him himself his how i if
    in into is it its itself just let like made make many may me might more most much must my myself
    new no nor not now of off on once one only or other our ours ourselves out over own per really
    same she should since so some still such than that the their theirs them themselves then there
    these they this those though through to too under until up upon us use used uses using very via
    was we well were what when where which while who whom why will with would yes yet you your yours
    yourself yourselves always never often usually something anything everything someone thing
    things want wants wanted know knows think thinks said says say going go goes went really okay ok
    lot last next first two three day days time times year years today yesterday tomorrow user
    users""".split()  # noqa: SIM905
)
_ZH_STOP = frozenset(
    """的 了 和 是 在 我 有 也 就 都 而 及 与 着 或 一个
    没有 我们 你们 他们 她们 它们 这个 那个 这些 那些 自己 什么 怎么 因为 所以 但是
    如果 已经 可以 需要 时候 现在 今天 还是 不是 一下 一些 进行 使用 用户 以及 并且
    然后 之后 之前 这样 那样 一直 非常 比较 还有 不要 应该 每次""".split()  # noqa: SIM905
)


def terms(text: str) -> list[str]:
    """The words a topic name can be made of: Latin words (lower-cased, at least 3 letters, not a
    stop word) and Chinese words of at least 2 characters segmented with jieba (not a stop word)."""
    out = [w.lower() for w in _LATIN_WORD.findall(text)]
    out = [w for w in out if len(w) >= 3 and w not in _EN_STOP]
    for run in _CJK_RUN.findall(text):
        out.extend(w for w in rjieba.cut(run) if len(w) >= 2 and w not in _ZH_STOP)
    return out


@dataclass(frozen=True, slots=True)
class TopicParams:
    #: Cosine (between centred points, see the module doc) to a leaf's centroid at or above which
    #: a memory joins it; chosen on ``eval/topics.py``'s subject set (multilingual-e5-small).
    leaf_threshold: float = 0.25
    #: Average cosine between centred leaf centroids at or above which leaves share a parent.
    parent_threshold: float = 0.15
    #: k-means reassignment passes after the leader pass of a full build.
    refine_passes: int = 2
    #: Words in a salient-terms name.
    name_terms: int = 3


@dataclass(slots=True)
class _Topic:
    id: str
    level: int  # 1 leaf, 2 parent
    total: Arr  # sum of the members' raw unit vectors (a parent: of its leaves' members); float64
    size: int = 0
    scripts: Counter[str] = field(default_factory=Counter)  # members per main script
    parent: str | None = None
    name: str = ""
    #: "llm" when the LLM named it, "terms" otherwise; named_size: the size when it was named.
    named_by: str = "terms"
    named_size: int = 0
    words: Counter[str] = field(default_factory=Counter)
    created_at: float = 0.0


@dataclass(frozen=True, slots=True)
class TopicView:
    """A topic as the API shows it."""

    id: str
    level: int
    name: str
    named_by: str
    size: int
    parent_id: str
    children: tuple[str, ...]
    terms: tuple[str, ...]
    created_at: float


#: Vectors of any float dtype (embeddings come as float32; sums are kept in float64).
Arr = npt.NDArray[Any]

#: A script's mean borrows this many memories' worth of the all-scripts mean (a script with few
#: memories is centred mostly by the collection's mean).
_PRIOR = 4
#: Member = (leaf id, raw unit vector (float16), words, valid_until, updated_at, created_at, script)
#: Below this many writes since the last build, no automatic re-clustering.
_MIN_REBUILD = 16
Member = tuple[str, Arr, tuple[str, ...], float, float, float, str]


def _mint(seed: str) -> str:
    return "t" + hashlib.sha256(seed.encode()).hexdigest()[:10]


def _unit(v: Arr) -> Arr:
    n = float(np.linalg.norm(v))
    return v / n if n > 0 else v


def _member_vector(v: Arr) -> Arr:
    """A member's unit vector as the index keeps it (float16) and sums it (float64): adding and
    removing a member change the sums by exactly the same amount, so they never drift."""
    return _unit(np.asarray(v, dtype=np.float64)).astype(np.float16).astype(np.float64)


def encode_vector(v: Arr) -> str:
    return base64.b64encode(np.asarray(v, dtype=np.float16).tobytes()).decode()


def decode_vector(s: str) -> Arr:
    return np.frombuffer(base64.b64decode(s), dtype=np.float16).astype(np.float64)


class TopicIndex:
    """One collection's topic index, in memory. Not thread-safe: the service serialises access."""

    def __init__(self, dimension: int, params: TopicParams | None = None) -> None:
        self.dim = dimension
        self.params = params or TopicParams()
        self._topics: dict[str, _Topic] = {}
        self._members: dict[str, Member] = {}
        #: memory ids per leaf (GetTopic pages over them).
        self._leaf_members: dict[str, set[str]] = {}
        #: parent id -> its leaves
        self._kids: dict[str, set[str]] = {}
        self._script_sum: dict[str, Arr] = {}
        self._script_n: Counter[str] = Counter()
        self._leaf_ids: list[str] = []
        self._leaf_matrix: Arr | None = None  # centred unit centroids of _leaf_ids
        self._matrix_age = 0  # member changes since _leaf_matrix was computed
        self._names_dirty = True
        self._idf: dict[int, dict[str, float]] = {}
        #: Writes applied since the last full build (the service rebuilds when they pile up).
        self.changes_since_build = 0
        #: The top-level views (what a context pack shows), until the next change.
        self._roots: list[TopicView] | None = None
        #: The earliest ``valid_until`` of the members; None: to be computed.
        self._next_expiry: float | None = None
        #: Bumped by every change (the service persists a snapshot when it moved).
        self.revision = 0

    # ------------------------------------------------------------------ reading

    def __len__(self) -> int:
        return len(self._members)

    def __contains__(self, memory_id: str) -> bool:
        return memory_id in self._members

    def topic_count(self) -> tuple[int, int]:
        """(leaves, parents)."""
        leaves = sum(1 for t in self._topics.values() if t.level == 1)
        return leaves, len(self._topics) - leaves

    def member_state(self) -> Mapping[str, Member]:
        return self._members

    def items(self) -> list[tuple[str, Arr, tuple[str, ...], float, float, float]]:
        """The members as :meth:`rebuild` takes them (re-clustering without reading the store)."""
        return [(mid, m[1], m[2], m[3], m[4], m[5]) for mid, m in self._members.items()]

    def scripts(self) -> dict[str, str]:
        return {mid: m[6] for mid, m in self._members.items()}

    def leaf_ids(self) -> list[str]:
        return sorted(t.id for t in self._topics.values() if t.level == 1)

    def centroid(self, topic_id: str) -> Arr:
        """The topic's centred unit centroid."""
        return self._centre(self._topics[topic_id])

    def llm_names(self) -> list[tuple[str, str, int]]:
        return [(t.id, t.name, t.named_size) for t in self._topics.values() if t.named_by == "llm"]

    def set_named_size(self, topic_id: str, named_size: int) -> None:
        t = self._topics.get(topic_id)
        if t is not None:
            t.named_size = named_size
            self._roots = None
            self.revision += 1

    def topic_of(self, memory_id: str) -> str | None:
        m = self._members.get(memory_id)
        return m[0] if m else None

    def has(self, topic_id: str) -> bool:
        return topic_id in self._topics

    def view(self, topic_id: str) -> TopicView | None:
        t = self._topics.get(topic_id)
        if t is None:
            return None
        self._ensure_names()
        children = tuple(sorted(self._children(t.id), key=lambda c: (-self._topics[c].size, c)))
        return TopicView(
            id=t.id,
            level=t.level,
            name=t.name,
            named_by=t.named_by,
            size=t.size,
            parent_id=t.parent or "",
            children=children,
            terms=tuple(self._salient(t)),
            created_at=t.created_at,
        )

    def roots(self) -> list[TopicView]:
        """Top-level topics (parents, and leaves without a parent), largest first, then by id.
        Kept until the index changes (a context pack reads them at every session start)."""
        if self._roots is None:
            out = [self.view(t.id) for t in self._topics.values() if t.parent is None]
            self._roots = sorted((v for v in out if v is not None), key=lambda v: (-v.size, v.id))
        return list(self._roots)

    def members(self, topic_id: str) -> list[str]:
        """The memory ids of a topic (a parent's are its leaves'), nearest to the centroid first."""
        t = self._topics[topic_id]
        leaves = [t.id] if t.level == 1 else self._children(t.id)
        ids = sorted(m for leaf in leaves for m in self._leaf_members.get(leaf, ()))
        if not ids:
            return []
        centre = self._centre(t)
        sims = [float(self._point(self._members[m][1], self._members[m][6]) @ centre) for m in ids]
        order = sorted(range(len(ids)), key=lambda i: (-round(sims[i], 6), ids[i]))
        return [ids[i] for i in order]

    # ------------------------------------------------------------------ writing

    def upsert(
        self,
        memory_id: str,
        vector: Arr,
        text: str,
        *,
        valid_until: float,
        updated_at: float,
        now: float,
        created_at: float | None = None,
    ) -> None:
        """Add a memory or move an updated one (the old vector comes out of its topic first)."""
        if memory_id in self._members:
            self.remove(memory_id)
        v = _member_vector(vector)
        script = script_of(text)
        words = tuple(terms(text))
        leaf = self._nearest_leaf(self._point(v, script))
        self._count_script(v, script, +1)
        if leaf is None:
            leaf = self._new_leaf(memory_id, now)
        self._join(
            leaf,
            memory_id,
            v,
            words,
            valid_until,
            updated_at,
            now if created_at is None else created_at,
            script,
        )
        self.changes_since_build += 1
        if self.changes_since_build * 2 > max(len(self._members), _MIN_REBUILD):
            self.recluster(now)

    def recluster(self, now: float) -> None:
        """Re-cluster from the members held (no store read), keeping ids: done by :meth:`upsert`
        whenever the writes since the last build reach half the index (so the script means the
        points are centred with, which move as memories arrive, are re-applied to every member
        at a geometric pace: O(1) builds per member amortised)."""
        seeds = [(t, self.centroid(t), self._topics[t].created_at) for t in self.leaf_ids()]
        names = {t: (n, s) for t, n, s in self.llm_names()}
        self.rebuild(self.items(), now=now, seeds=seeds, scripts=self.scripts())
        for tid, (name, named_size) in names.items():
            if self.has(tid):
                self.rename(tid, name)
                self.set_named_size(tid, named_size)

    def remove(self, memory_id: str) -> None:
        m = self._members.pop(memory_id, None)
        if m is None:
            return
        if self._next_expiry is not None and m[3] <= self._next_expiry:
            self._next_expiry = None
        leaf_id, vec, words, script = m[0], m[1].astype(np.float64), m[2], m[6]
        self._count_script(vec, script, -1)
        leaf = self._topics[leaf_id]
        self._leaf_members[leaf_id].discard(memory_id)
        for t in (leaf, self._topics[leaf.parent]) if leaf.parent is not None else (leaf,):
            t.total = t.total - vec
            t.size -= 1
            t.scripts[script] -= 1
            t.words.subtract(words)
            t.words += Counter()  # drop non-positive counts
        if leaf.size <= 0:
            self._drop_leaf(leaf_id)
        else:
            self._touch(leaf_id)
        self._names_dirty = True
        self._roots = None
        self.revision += 1
        self.changes_since_build += 1

    def expired(self, now: float) -> list[str]:
        """Members whose ``valid_until`` has passed (no scan before the earliest one)."""
        if self._next_expiry is None:
            self._next_expiry = min((m[3] for m in self._members.values()), default=math.inf)
        if now < self._next_expiry:
            return []
        return [mid for mid, m in self._members.items() if m[3] <= now]

    def rebuild(
        self,
        items: Sequence[tuple[str, Arr, str | tuple[str, ...], float, float, float]],
        *,
        now: float,
        seeds: Sequence[tuple[str, Arr, float]] = (),
        scripts: Mapping[str, str] | None = None,
    ) -> None:
        """A full build from ``(id, vector, text or its terms, valid_until, updated_at, created_at)``
        (``scripts`` gives each id's main script when the items carry terms instead of text):
        leader pass (oldest first) seeded with ``(topic id, centred centroid, created_at)`` from
        the previous index, k-means refinement, then the parent level. Ids are kept as described
        in the module doc."""
        old_members = {lid: set(ms) for lid, ms in self._leaf_members.items()}
        old_created = {t.id: t.created_at for t in self._topics.values()}
        old_names = {
            t.id: (t.name, t.named_by, t.named_size) for t in self._topics.values() if t.named_by == "llm"
        }
        old_parents = {t.id: set(self._children(t.id)) for t in self._topics.values() if t.level == 2}
        self._topics.clear()
        self._members.clear()
        self._next_expiry = None
        self._leaf_members.clear()
        self._kids.clear()
        self._script_sum.clear()
        self._script_n.clear()
        self._leaf_ids = []
        self._leaf_matrix = None
        self._names_dirty = True
        self._roots = None
        self.revision += 1
        self.changes_since_build = 0
        ordered = sorted(items, key=lambda it: (it[5], it[0]))
        n = len(ordered)
        if n == 0:
            return
        raw = np.stack([_member_vector(it[1]) for it in ordered])
        scr = [
            (scripts or {}).get(it[0], "") if isinstance(it[2], tuple) else script_of(it[2]) for it in ordered
        ]
        for i in range(n):
            self._count_script(raw[i], scr[i], +1)
        pts = np.stack([self._point(raw[i], scr[i]) for i in range(n)])
        # 1. leader pass, seeded with the previous centroids (empty seeds vanish below)
        ids: list[str] = [s[0] for s in seeds]
        sums: list[Arr] = [np.zeros(self.dim) for _ in seeds]
        counts: list[int] = [0] * len(seeds)
        # centroid rows, preallocated (rows past len(ids) are unused)
        matrix = np.zeros((len(seeds) + n, self.dim))
        for k, seed in enumerate(seeds):
            matrix[k] = _unit(np.asarray(seed[1], dtype=np.float64))
        assign = np.empty(n, dtype=np.int64)
        for i in range(n):
            p = pts[i]
            best = -1
            if ids:
                sims = matrix[: len(ids)] @ p
                j = int(np.argmax(sims))
                if sims[j] >= self.params.leaf_threshold:
                    best = j
            if best < 0:
                ids.append("")
                sums.append(np.zeros(self.dim))
                counts.append(0)
                best = len(ids) - 1
                matrix[best] = p
            assign[i] = best
            sums[best] = sums[best] + p
            counts[best] += 1
            matrix[best] = _unit(sums[best])
        # 2. refinement: every memory to its nearest non-empty centroid
        for _ in range(self.params.refine_passes):
            live = [j for j in range(len(ids)) if counts[j] > 0]
            m = np.stack([_unit(sums[j]) for j in live])
            nearest = np.argmax(pts @ m.T, axis=1)
            new_assign = np.array([live[k] for k in nearest], dtype=np.int64)
            if np.array_equal(new_assign, assign):
                break
            assign = new_assign
            sums = [np.zeros(self.dim) for _ in ids]
            counts = [0] * len(ids)
            for i, j in enumerate(assign.tolist()):
                sums[j] = sums[j] + pts[i]
                counts[j] += 1
        # 3. leaves with stable ids: a seed keeps its id; a new cluster inherits the id of the old
        # leaf most of whose members it holds, else mints one from its oldest member.
        groups: dict[int, list[int]] = {}
        for i, j in enumerate(assign.tolist()):
            groups.setdefault(j, []).append(i)
        taken: set[str] = set()
        for j in sorted(groups, key=lambda j: (ids[j] == "", groups[j][0])):
            rows = groups[j]
            mids = [ordered[i][0] for i in rows]
            tid = ids[j] if ids[j] not in taken else ""
            if not tid:
                overlap = Counter(lid for lid, ms in old_members.items() for mid in mids if mid in ms)
                for lid, cnt in sorted(overlap.items(), key=lambda x: (-x[1], x[0])):
                    if lid not in taken and cnt * 2 > len(old_members[lid]):
                        tid = lid
                        break
            if not tid:
                tid = _mint(mids[0])
                while tid in taken:
                    tid = _mint(tid)
            taken.add(tid)
            self._topics[tid] = _Topic(
                id=tid, level=1, total=np.zeros(self.dim), created_at=old_created.get(tid, now)
            )
            self._leaf_members[tid] = set()
            for i in rows:
                it = ordered[i]
                words = it[2] if isinstance(it[2], tuple) else tuple(terms(it[2]))
                self._join(tid, it[0], raw[i], words, it[3], it[4], it[5], scr[i])
            if tid in old_names:
                t = self._topics[tid]
                t.name, t.named_by, t.named_size = old_names[tid]
        # 4. parents: groups of leaf centroids
        self._build_parents(now, old_parents, old_created, old_names)
        self._leaf_matrix = None
        self._names_dirty = True
        self._roots = None
        self.revision += 1

    def rename(self, topic_id: str, name: str) -> None:
        """Set an LLM-given name."""
        t = self._topics.get(topic_id)
        if t is None:
            return
        t.name, t.named_by, t.named_size = name, "llm", t.size
        self._roots = None
        self.revision += 1

    def stale_names(self, min_size: int = 3) -> list[str]:
        """Topics the LLM should (re)name: never LLM-named, or grown / shrunk by half since."""
        out = []
        for t in self._topics.values():
            if t.size < min_size:
                continue
            if t.named_by != "llm" or t.size >= 1.5 * t.named_size or t.size * 2 <= t.named_size:
                out.append(t.id)
        return sorted(out, key=lambda i: (-self._topics[i].size, i))

    # ------------------------------------------------------------------ persistence

    def snapshot(self) -> dict[str, Any]:
        """What survives a restart: each topic's id, centred centroid, parent and LLM name, each
        leaf's member ids, the newest member ``updated_at`` (the membership's watermark) and the
        writes since the last build. :meth:`restore` rebuilds the same index from it and the
        store's memories; the store stays the truth for which memories exist and their vectors."""
        self._ensure_names()
        watermark = max((m[4] for m in self._members.values()), default=0.0)
        return {
            "version": 2,
            "dimension": self.dim,
            "watermark": watermark,
            "changes_since_build": self.changes_since_build,
            "topics": [
                {
                    "id": t.id,
                    "level": t.level,
                    "parent": t.parent,
                    "centroid": encode_vector(self._centre(t)),
                    "created_at": t.created_at,
                    "name": t.name if t.named_by == "llm" else "",
                    "named_size": t.named_size if t.named_by == "llm" else 0,
                    **({"members": sorted(self._leaf_members.get(t.id, ()))} if t.level == 1 else {}),
                }
                for t in sorted(self._topics.values(), key=lambda t: t.id)
            ],
        }

    @staticmethod
    def seeds_from(
        snapshot: Mapping[str, Any] | None, dimension: int
    ) -> tuple[list[tuple[str, Arr, float]], dict[str, tuple[str, int]]]:
        """The leaf seeds and LLM names of a :meth:`snapshot` (empty when it does not fit)."""
        if not _fits(snapshot, dimension):
            return [], {}
        assert snapshot is not None
        seeds = []
        names = {}
        for t in snapshot.get("topics", []):
            if t.get("level") == 1:
                seeds.append((str(t["id"]), decode_vector(t["centroid"]), float(t.get("created_at", 0.0))))
            if t.get("name"):
                names[str(t["id"])] = (str(t["name"]), int(t.get("named_size", 0)))
        return seeds, names

    def restore(
        self,
        items: Sequence[tuple[str, Arr, str, float, float, float]],
        snapshot: Mapping[str, Any] | None,
        *,
        now: float,
    ) -> None:
        """Rebuild the index a :meth:`snapshot` was taken of from the store's live memories
        ``(id, vector, text, valid_until, updated_at, created_at)``: a memory the snapshot holds,
        unchanged since (``updated_at`` not past the watermark), joins its leaf again; the others
        (written after the snapshot, e.g. before a crash) are added as writes are, oldest first.
        A snapshot without membership (an older release's) or of another dimension: a full
        :meth:`rebuild` seeded with its centroids."""
        if not _fits(snapshot, dimension=self.dim) or snapshot is None or snapshot.get("version") != 2:
            seeds, names = self.seeds_from(snapshot, self.dim)
            self.rebuild(items, now=now, seeds=seeds)
            for tid, (name, named_size) in names.items():
                if self.has(tid):
                    self.rename(tid, name)
                    self.set_named_size(tid, named_size)
            return
        self.rebuild([], now=now)  # clears
        watermark = float(snapshot.get("watermark", 0.0))
        home: dict[str, str] = {}
        for t in snapshot.get("topics", []):
            tid = str(t["id"])
            topic = _Topic(
                id=tid,
                level=int(t["level"]),
                total=np.zeros(self.dim),
                created_at=float(t.get("created_at", now)),
            )
            if t.get("name"):
                topic.name, topic.named_by, topic.named_size = (
                    str(t["name"]),
                    "llm",
                    int(t.get("named_size", 0)),
                )
            self._topics[tid] = topic
            if topic.level == 1:
                self._leaf_members[tid] = set()
                for mid in t.get("members", ()):
                    home[str(mid)] = tid
        for t in snapshot.get("topics", []):
            parent = t.get("parent")
            if t["level"] == 1 and parent in self._topics and self._topics[parent].level == 2:
                self._topics[str(t["id"])].parent = parent
                self._kids.setdefault(parent, set()).add(str(t["id"]))
        later = []
        for it in sorted(items, key=lambda it: (it[5], it[0])):
            leaf = home.get(it[0])
            if leaf is None or it[4] > watermark:
                later.append(it)
                continue
            v = _member_vector(it[1])
            script = script_of(it[2])
            self._count_script(v, script, +1)
            self._join(leaf, it[0], v, tuple(terms(it[2])), it[3], it[4], it[5], script)
        for tid in [t.id for t in self._topics.values() if t.level == 1 and t.size == 0]:
            self._drop_leaf(tid)
        for pid in [
            t.id for t in self._topics.values() if t.level == 2 and len(self._kids.get(t.id, ())) < 2
        ]:
            for k in self._kids.pop(pid, set()):
                self._topics[k].parent = None
            self._topics.pop(pid)
        self._leaf_matrix = None
        self._names_dirty = True
        self._roots = None
        self.revision += 1
        self.changes_since_build = int(snapshot.get("changes_since_build", 0))
        for it in later:
            self.upsert(it[0], it[1], it[2], valid_until=it[3], updated_at=it[4], now=now, created_at=it[5])

    # ------------------------------------------------------------------ internals

    def _mean(self, script: str) -> Arr:
        n_all = sum(self._script_n.values())
        if n_all <= 0:
            return np.zeros(self.dim)
        overall: Arr = np.asarray(np.sum(list(self._script_sum.values()), axis=0)) / (n_all + 1)
        total = self._script_sum.get(script)
        if total is None:
            return overall
        mean: Arr = (total + _PRIOR * overall) / (self._script_n[script] + _PRIOR + 1)
        return mean

    def _point(self, raw: Arr, script: str) -> Arr:
        """A memory's centred unit point."""
        return _unit(np.asarray(raw, dtype=np.float64) - self._mean(script))

    def _centre(self, t: _Topic) -> Arr:
        """A topic's centred unit centroid, for the current script means."""
        c = t.total.copy()
        for script, n in t.scripts.items():
            if n > 0:
                c -= n * self._mean(script)
        return _unit(c)

    def _count_script(self, v: Arr, script: str, sign: int) -> None:
        if script not in self._script_sum:
            self._script_sum[script] = np.zeros(self.dim)
        self._script_sum[script] = self._script_sum[script] + sign * v
        self._script_n[script] += sign
        self._matrix_age += 1

    def _children(self, parent_id: str) -> list[str]:
        return sorted(self._kids.get(parent_id, ()))

    def _matrix(self) -> Arr:
        # The means move by ~1/n per write: recompute every centroid once they moved by ~2%.
        if self._leaf_matrix is not None and self._matrix_age > max(8, len(self._members) // 50):
            self._leaf_matrix = None
        if self._leaf_matrix is None:
            self._leaf_ids = [t.id for t in self._topics.values() if t.level == 1]
            means = {sc: self._mean(sc) for sc in self._script_n}
            rows = np.zeros((len(self._leaf_ids), self.dim))
            for k, tid in enumerate(self._leaf_ids):
                t = self._topics[tid]
                rows[k] = t.total
                for sc, cnt in t.scripts.items():
                    if cnt > 0:
                        rows[k] -= cnt * means[sc]
            norms = np.linalg.norm(rows, axis=1, keepdims=True)
            self._leaf_matrix = rows / np.where(norms > 0, norms, 1.0)
            self._matrix_age = 0
        return self._leaf_matrix

    def _touch(self, leaf_id: str) -> None:
        """Refresh one leaf's row of the centroid matrix."""
        if self._leaf_matrix is not None:
            try:
                self._leaf_matrix[self._leaf_ids.index(leaf_id)] = self._centre(self._topics[leaf_id])
            except ValueError:
                self._leaf_matrix = None

    def _nearest_leaf(self, p: Arr) -> str | None:
        m = self._matrix()
        if not len(m):
            return None
        sims = m @ p
        j = int(np.argmax(sims))
        return self._leaf_ids[j] if sims[j] >= self.params.leaf_threshold else None

    def _new_leaf(self, seed: str, now: float) -> str:
        tid = _mint(seed)
        while tid in self._topics:
            tid = _mint(tid)
        self._topics[tid] = _Topic(id=tid, level=1, total=np.zeros(self.dim), created_at=now)
        self._leaf_members[tid] = set()
        self._leaf_matrix = None
        return tid

    def _join(  # noqa: PLR0917
        self,
        leaf_id: str,
        memory_id: str,
        v: Arr,
        words: tuple[str, ...],
        valid_until: float,
        updated_at: float,
        created_at: float,
        script: str,
    ) -> None:
        leaf = self._topics[leaf_id]
        for t in (leaf, self._topics[leaf.parent]) if leaf.parent is not None else (leaf,):
            t.total = t.total + v
            t.size += 1
            t.scripts[script] += 1
            t.words.update(words)
        if self._next_expiry is not None:
            self._next_expiry = min(self._next_expiry, valid_until)
        self._members[memory_id] = (
            leaf_id,
            v.astype(np.float16),
            words,
            valid_until,
            updated_at,
            created_at,
            script,
        )
        self._leaf_members[leaf_id].add(memory_id)
        self._touch(leaf_id)
        self._names_dirty = True
        self._roots = None
        self.revision += 1

    def _drop_leaf(self, leaf_id: str) -> None:
        leaf = self._topics.pop(leaf_id)
        self._leaf_members.pop(leaf_id, None)
        self._leaf_matrix = None
        if leaf.parent is not None:
            kids = self._kids.get(leaf.parent, set())
            kids.discard(leaf_id)
            if len(kids) <= 1:  # a parent of one leaf is no group: the leaf goes back to the top
                for k in kids:
                    self._topics[k].parent = None
                self._topics.pop(leaf.parent, None)
                self._kids.pop(leaf.parent, None)

    def _build_parents(
        self,
        now: float,
        old_parents: Mapping[str, set[str]],
        old_created: Mapping[str, float],
        old_names: Mapping[str, tuple[str, str, int]],
    ) -> None:
        leaves = sorted((t for t in self._topics.values() if t.level == 1), key=lambda t: t.id)
        if len(leaves) < 2:
            return
        # Leader clustering of the leaf centres, largest leaf first, then every leaf to its nearest
        # group centre: O(leaves x groups), like the leaves (average linkage was cubic).
        leaves.sort(key=lambda t: (-t.size, t.id))
        cents = np.stack([self._centre(t) for t in leaves])
        weights = np.array([t.size for t in leaves], dtype=np.float64)
        sums = np.zeros((len(leaves), self.dim))
        mat = np.zeros((len(leaves), self.dim))
        g = 0
        for i in range(len(leaves)):
            if g:
                sims = mat[:g] @ cents[i]
                j = int(np.argmax(sims))
                if sims[j] >= self.params.parent_threshold:
                    sums[j] += weights[i] * cents[i]
                    mat[j] = _unit(sums[j])
                    continue
            sums[g] = weights[i] * cents[i]
            mat[g] = cents[i]
            g += 1
        m = mat[:g]
        nearest = np.argmax(cents @ m.T, axis=1).tolist()
        grouped: dict[int, list[int]] = {}
        for i, g in enumerate(nearest):
            grouped.setdefault(g, []).append(i)
        clusters = list(grouped.values())
        taken: set[str] = set()
        for group in sorted((c for c in clusters if len(c) > 1), key=lambda c: min(leaves[i].id for i in c)):
            kids = {leaves[i].id for i in group}
            pid = ""
            for old, old_kids in sorted(old_parents.items()):
                if old not in taken and len(kids & old_kids) * 2 > len(old_kids):
                    pid = old
                    break
            if not pid:
                pid = _mint("p" + min(kids))
                while pid in taken or pid in self._topics:
                    pid = _mint(pid)
            taken.add(pid)
            parent = _Topic(id=pid, level=2, total=np.zeros(self.dim), created_at=old_created.get(pid, now))
            self._kids[pid] = set()
            for i in group:
                leaf = leaves[i]
                leaf.parent = pid
                self._kids[pid].add(leaf.id)
                parent.total = parent.total + leaf.total
                parent.size += leaf.size
                parent.scripts.update(leaf.scripts)
                parent.words.update(leaf.words)
            if pid in old_names:
                parent.name, parent.named_by, parent.named_size = old_names[pid]
            self._topics[pid] = parent

    def _ensure_names(self) -> None:
        if not self._names_dirty:
            return
        self._names_dirty = False
        for level in (1, 2):
            group = [t for t in self._topics.values() if t.level == level]
            self._idf[level] = _ctfidf_idf([t.words for t in group])
            for t in group:
                if t.named_by != "llm":
                    t.name = " · ".join(self._salient(t)) or "(no words)"

    def _salient(self, t: _Topic) -> list[str]:
        self._ensure_names()
        idf = self._idf.get(t.level, {})
        total = sum(t.words.values()) or 1
        scored = sorted(
            ((c / total * idf.get(w, 0.0), w) for w, c in t.words.items()),
            key=lambda x: (-x[0], x[1]),
        )
        return [w for _, w in scored[: self.params.name_terms]]


def _fits(snapshot: Mapping[str, Any] | None, dimension: int) -> bool:
    if not snapshot:
        return False
    return snapshot.get("version") in {1, 2} and snapshot.get("dimension") == dimension


def _ctfidf_idf(groups: Iterable[Counter[str]]) -> dict[str, float]:
    """c-TF-IDF's class-based IDF: ``log(1 + A / f(t))``, A the average word count per topic."""
    groups = list(groups)
    if not groups:
        return {}
    freq: Counter[str] = Counter()
    for g in groups:
        freq.update(g)
    avg = sum(freq.values()) / len(groups)
    return {w: math.log(1 + avg / f) for w, f in freq.items() if f > 0}


_PLAIN_NAME = re.compile(r"[a-z0-9_-]{1,64}")


def topic_state_key(collection: str) -> str:
    """The store state document of a collection's topic index: ``topics.<collection>`` for a
    lower-case name (state keys are lower-case), else ``topics.h.<hash of the name>``."""
    if _PLAIN_NAME.fullmatch(collection):
        return f"topics.{collection}"
    return "topics.h." + hashlib.sha256(collection.encode()).hexdigest()[:40]


#: An LLM-given topic name is cut to this many characters (at a word boundary) and words.
MAX_NAME_CHARS = 60
MAX_NAME_WORDS = 8
_NAME_EDGE = "\"'`*_#>[](){}<>.,;:!?-–—·•「」『』“”‘’。，；：！？、"


def clean_topic_name(raw: object) -> str | None:
    """An LLM's topic name made safe to show (one line of plain text in the Markdown pack): control
    and format characters and backticks removed, white space collapsed, quotes, Markdown markers
    and punctuation trimmed from both ends, at most :data:`MAX_NAME_WORDS` words and
    :data:`MAX_NAME_CHARS` characters (cut at a word boundary where there is one). None when
    nothing usable is left (the salient-terms name stays)."""
    if not isinstance(raw, str):
        return None
    kept = "".join(
        " " if ch.isspace() else ch
        for ch in raw
        if ch.isspace() or (not unicodedata.category(ch).startswith("C") and ch != "`")
    )
    words = kept.split()[:MAX_NAME_WORDS]
    name = " ".join(words).strip(_NAME_EDGE + " ")
    if len(name) > MAX_NAME_CHARS:
        cut = name[:MAX_NAME_CHARS]
        space = cut.rfind(" ")
        name = (cut[:space] if space > MAX_NAME_CHARS // 2 else cut).strip(_NAME_EDGE + " ")
    return name or None
