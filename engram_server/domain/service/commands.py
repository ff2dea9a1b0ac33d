"""The service's policy, commands and results (plain data; no behaviour)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np
import numpy.typing as npt

from engram_server.domain.contradictions import Basis, ContradictionMode, ContradictionPolicy
from engram_server.domain.model import (
    DEFAULT_COLLECTION,
    Candidates,
    CollectionSpec,
    MemoryRecord,
    MemoryType,
    Source,
    SourceType,
    Vector,
)
from engram_server.domain.privacy import PrivacyFilter
from engram_server.domain.ranking import (
    Evidence,
    HybridParams,
    RescoreParams,
    Score,
    Weights,
)
from engram_server.domain.specifics import Conflict
from engram_server.domain.validation import (
    Limits,
)

MAX_PROVENANCE_HISTORY = 8
#: Most field violations one refused AddMemories lists (the rest are counted): the details
#: travel in the trailers, which gRPC caps at a few kilobytes.
MAX_LISTED_VIOLATIONS = 10


@dataclass(frozen=True, slots=True)
class Policy:
    """Tunable policy, on the calibrated similarity scale."""

    dedup_threshold: float = 0.92
    near_duplicate_threshold: float = 0.70
    #: Compare specifics (numbers, dates, ids, names, negation) before refusing a duplicate.
    check_specifics: bool = True
    #: With check_specifics: a pair at or above this calibrated similarity (the scale's
    #: "restatement" level) with the same content words and specifics is a duplicate too.
    restatement_threshold: float = 0.82
    #: A memory in the other script (Chinese / English) that the new content translates
    #: (:func:`engram_server.domain.crosslingual.translation_of`: every content word aligned through
    #: the dictionary, names by pinyin, the same specifics and roles) is a duplicate too, from this
    #: calibrated similarity up (chosen on the tune half of ``eval/pairs/cross_script.jsonl`` by
    #: ``python -m eval.cross_script``: the highest multiple of 0.05 keeping every aligned tune
    #: translation; 0.35 since the alignment reads "closed" as 不开门, at similarity 0.390).
    gate_translations: bool = True
    translation_floor: float = 0.35
    #: With check_specifics and gate_translations (the dictionaries): a pair in the same language
    #: at or above this calibrated similarity whose content words all restate one another
    #: (:func:`engram_server.domain.crosslingual.same_meaning`) with the same specifics is a
    #: duplicate too ("Frank likes concise commit messages." / "Frank prefers …"). Off by default
    #: (``gate_same_meaning``): on the held-out template family of ``bench/false_duplicates.py``
    #: it refused different facts (暖气 / 空调 share the gloss "air", a silver van / a grey car are
    #: relatives) while refusing no restatement pair of ``eval/pairs`` the embedding had not.
    gate_same_meaning: bool = False
    meaning_threshold: float = 0.82
    #: The write gate also asks the store for this many nearest memories in the other script
    #: (0: none), so a translation is found among many memories in the new one's language.
    translation_candidates: int = 4
    locate_min_threshold: float = 0.85
    #: UpdateMemory located by a question (:func:`engram_server.domain.text.reads_as_question`): the
    #: question is embedded as a search query and read on the relevance scale (with the cross-script
    #: offset, as search reads it); the best memory needs at least this relevance ...
    locate_question_min_relevance: float = 0.70
    #: ... a lead of at least this much over the runner-up: chosen on the tune half of
    #: eval/taskset/mixed_locate_v1.json, midway between the largest lead of a question that must be
    #: refused (0.019) and the smallest of one that must succeed (0.034); see docs/calibration.md ...
    locate_question_margin: float = 0.027
    #: ... and the new content must be about the located memory: nearer to it than to the
    #: question's other candidates, and their calibrated similarity (the write gate's scale) at
    #: least this much: the scale's "same topic" line, not tuned (an update changes the fact, so
    #: the new content need not restate it).
    locate_question_topic_min: float = 0.70
    delete_single_min_threshold: float = 0.70
    gate_candidates: int = 8
    max_near_duplicates: int = 5
    weights: Weights = field(default_factory=Weights)
    mmr_lambda: float = 0.5
    candidate_factor: int = 3
    #: The semantic side's pool: at least this many of the nearest memories (and at least
    #: ``candidate_factor × limit``). Without the cross-encoder a deeper pool changes nothing the
    #: fusion returns (LoCoMo tuning conversations conv-26/41/43, offline replay of the candidate
    #: stage, ``eval/locomo_stages.py``: R@10 within ±0.003 from 100 to 1000), so 100.
    min_candidates: int = 100
    #: …and when the search is reranked by the cross-encoder (which can lift a deep candidate):
    #: 150, chosen on the same data: reranked R@10 0.808 at 100, 0.815 at 150, 0.814 at 200 (300
    #: with 150 lexical: 0.816). The 50 extra candidates cost well under a millisecond next to the
    #: model's pass; the lexical side's 50 stays (100 adds 0.001). See docs/concepts/ranking.md.
    min_reranked_candidates: int = 150
    min_lexical_candidates: int = 50
    search_cache_entries: int = 256
    access_flush_seconds: float = 1.0
    hybrid: HybridParams = field(default_factory=HybridParams)
    #: Query-time rescoring of the best candidates from their text (see ranking.rescore).
    rescore: RescoreParams = field(default_factory=RescoreParams)
    #: How many of an English query's best results the cross-encoder reorders (0 = off; the
    #: service needs a reranker too).
    rerank_depth: int = 30
    ambiguity_margin: float = 0.02
    default_collection: str = DEFAULT_COLLECTION
    #: How long deleted memories and collections stay restorable; 0: deletes are final.
    trash_retention_seconds: float = 7 * 24 * 3600.0
    #: Most collections, live and trashed (each holds a storage shard), before creating one more
    #: is refused with CollectionLimit; 0 = no limit (``ENGRAM_MAX_COLLECTIONS``: the app always
    #: sets one).
    max_collections: int = 0
    limits: Limits = field(default_factory=Limits)
    #: Secrets and ``<private>`` spans removed from content and metadata values before anything
    #: is embedded or stored (every write path).
    privacy: PrivacyFilter = field(default_factory=PrivacyFilter)
    #: Contradictions: supersede the older memory, only report, or off (see domain/contradictions.py).
    contradictions: ContradictionPolicy = field(default_factory=ContradictionPolicy)


# ---------------------------------------------------------------- commands and results


@dataclass(frozen=True, slots=True)
class AddCommand:
    content: str
    collection: str = ""
    type: MemoryType = MemoryType.EVENT
    importance: int | None = None
    tags: tuple[str, ...] = ()
    source: Source = Source.AGENT
    source_type: SourceType = SourceType.UNKNOWN
    metadata: Mapping[str, str] = field(default_factory=dict)
    created_at: float | None = None
    valid_until: float | None = None
    request_id: str = ""
    #: Write even when the gate finds a duplicate (the result names it among the near duplicates).
    allow_duplicate: bool = False
    #: The agent session and the agent writing the memory ("" = not given).
    session_id: str = ""
    agent_id: str = ""
    #: What to do with a stored memory the new one contradicts; None: the policy's mode.
    contradictions: ContradictionMode | None = None


class AddOutcome(StrEnum):
    CREATED = "created"
    DUPLICATE = "duplicate"


class GateReason(StrEnum):
    """Why the write gate answered as it did when the similarity alone would have said otherwise."""

    NONE = ""
    #: Above the duplicate threshold, but the specifics (numbers, ids, dates, names, negation) differ:
    #: a different fact, written and reported as a near duplicate.
    CONFLICTING_SPECIFICS = "conflicting_specifics"
    #: A duplicate exists, but the caller asked to write anyway (``allow_duplicate``).
    ALLOW_DUPLICATE = "allow_duplicate"
    #: DUPLICATE below the duplicate threshold: at least a restatement (``restatement_threshold``),
    #: with the same content words and the same specifics (the same sentence reordered).
    SAME_WORDS = "same_words"
    #: DUPLICATE of a memory in the other script (zh↔en) that the new content translates: every
    #: content word aligns through the dictionary, and the specifics and roles agree.
    TRANSLATION = "translation"
    #: DUPLICATE below the duplicate threshold: at least ``meaning_threshold``, in the same language,
    #: every content word restated by a word of the same meaning (a lemma, a dictionary synonym, a
    #: WordNet relative, a Chinese word sharing a CC-CEDICT gloss), none opposed, the same specifics.
    SAME_MEANING = "same_meaning"
    #: DUPLICATE that the rules left undecided (at least at the restatement level, or a translation above
    #: the translation floor, the specifics agreeing) and the LLM judged a restatement (``gate_llm``).
    JUDGED_SAME = "judged_same"


@dataclass(frozen=True, slots=True)
class Similar:
    record: MemoryRecord
    similarity: float
    #: For a memory above the duplicate threshold that was not treated as a duplicate: why.
    reason: GateReason = GateReason.NONE
    #: For CONFLICTING_SPECIFICS: the specifics that differ (existing = this memory's values).
    conflicts: tuple[Conflict, ...] = ()


@dataclass(frozen=True, slots=True)
class Contradiction:
    """A stored memory the new one contradicts (same subject, another value), and what was done."""

    record: MemoryRecord
    similarity: float
    basis: Basis
    conflicts: tuple[Conflict, ...]
    explanation: str
    #: The stored memory is now superseded by the new one.
    superseded: bool


@dataclass(frozen=True, slots=True)
class AddResult:
    memory: MemoryRecord
    outcome: AddOutcome
    duplicate_similarity: float = 0.0
    near_duplicates: tuple[Similar, ...] = ()
    replayed: bool = False
    #: For a DUPLICATE of a memory an earlier item of the same batch created: that item's index.
    duplicate_of: int | None = None
    #: CREATED although a memory was above the duplicate threshold: why (see :class:`GateReason`).
    reason: GateReason = GateReason.NONE
    #: CREATED: the stored memories the new one contradicts (superseded or only reported).
    contradictions: tuple[Contradiction, ...] = ()


@dataclass(frozen=True, slots=True)
class _AddItem:
    """One validated add, with its defaults applied."""

    cmd: AddCommand
    importance: int
    tags: tuple[str, ...]
    created_at: float
    request_hash: str | None


@dataclass(frozen=True, slots=True)
class SearchFilter:
    types: tuple[MemoryType, ...] = ()
    tags_any: tuple[str, ...] = ()
    created_after: float | None = None
    created_before: float | None = None
    min_importance: int = 0
    source_types: tuple[SourceType, ...] = ()
    session_ids: tuple[str, ...] = ()
    agent_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SearchQuery:
    query: str
    #: The collections to search; empty: every existing collection ``readable`` allows.
    collections: tuple[str, ...] = ()
    limit: int = 0
    filter: SearchFilter = field(default_factory=SearchFilter)
    weights: Weights | None = None
    diversify: bool = False
    mmr_lambda: float | None = None
    min_relevance: float = 0.0
    #: Which collections the caller may read, for a search that names none (None: all of them).
    readable: Callable[[str], bool] | None = None
    #: At most this many results from one session (0: no cap); memories without a session are
    #: not capped.
    max_per_session: int = 0
    #: How the query text is read: True a statement (the gate's reading), False a query, None by
    #: its form (:func:`engram_server.domain.text.reads_as_statement`).
    as_statement: bool | None = None
    #: Whether the cross-encoder reorders the best results (an English query, a server with the
    #: model): False never, True or None (the server's default) when the server reranks.
    rerank: bool | None = None


@dataclass(frozen=True, slots=True)
class SearchHit:
    memory: MemoryRecord
    score: Score


@dataclass(frozen=True, slots=True, eq=False)
class _Pool:
    """One collection's candidates for one query, with what ranking needs that does not depend on
    the time of the search (cached with the candidates)."""

    found: Candidates
    evidence: Evidence
    decay: npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class _Ranked:
    """A ranked search candidate: where it lives, its score, its vector (for MMR) if fetched."""

    collection: str
    id: str
    score: Score
    vector: Vector | None
    #: The script tag of the memory's text (see :func:`engram_server.domain.text.script_tag`).
    script: str = ""
    #: Its BM25 score over the best BM25 score of its collection's candidates (0–1).
    lexical_norm: float = 0.0


@dataclass(frozen=True, slots=True)
class Locator:
    content: str
    threshold: float = 0.0
    #: Whether the caller set the threshold (else it is the policy's default).
    explicit: bool = False


@dataclass(frozen=True, slots=True)
class UpdateCommand:
    collection: str = ""
    id: str | None = None
    locate: Locator | None = None
    content: str = ""
    type: MemoryType | None = None
    importance: int | None = None
    tags: tuple[str, ...] | None = None
    metadata: Mapping[str, str] | None = None
    valid_until: float | None = None
    dry_run: bool = False


@dataclass(frozen=True, slots=True)
class UpdateResult:
    memory: MemoryRecord
    previous: MemoryRecord
    similarity: float
    changed: bool
    dry_run: bool


@dataclass(frozen=True, slots=True)
class DeleteCommand:
    collection: str = ""
    id: str | None = None
    query: str | None = None
    threshold: float = 0.0
    limit: int = 0
    force: bool = False
    dry_run: bool = False


@dataclass(frozen=True, slots=True)
class DeleteResult:
    deleted: tuple[MemoryRecord, ...]
    dry_run: bool


@dataclass(frozen=True, slots=True)
class CollectionStats:
    spec: CollectionSpec
    memory_count: int
