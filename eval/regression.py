"""The regression taskset runner: replays ``eval/taskset/*.json`` through the gRPC API of a live
Engram server and scores every case.

Nothing here touches storage or ranking code: fixtures are written with ``AddMemory`` (so the write
gate runs for real), questions are asked with ``SearchMemories`` (so the fusion ranking runs for
real), and trajectories are replayed with Add / Update / Delete / Get / List calls.

Time is reproducible: every fixture and step carries its own ``created_at``, and the taskset names
its ``now``. In-process (the default) the server runs on a :class:`ManualClock` pinned to that
``now``; against an external server (``--address``) every timestamp is shifted by
``server_now - taskset_now`` so ages (and therefore recency and TTL) are the same.

    python -m eval.regression                       # in-process server, reports under results/eval/
    python -m eval.regression --address host:50051  # an already running server (its system clock)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from engram_client import (
    AddOutcome,
    AddResult,
    AsyncEngramClient,
    EngramError,
    MemoryFilter,
    SearchResult,
)

TASKSET_DIR = Path(__file__).resolve().parent / "taskset"
DEFAULT_TASKSET = TASKSET_DIR / "core_v1.json"
#: Categories every run must have cases in (the reference design's five).
REQUIRED_CATEGORIES = (
    "retrieve_precision",
    "dedup_accuracy",
    "recency_bias",
    "cross_collection",
    "trajectory_replay",
)
#: Every known category: the required ones, ``relevance_scale`` (a search's relevance means what the
#: write gate's similarity means), ``kept_apart`` (different facts are never refused as duplicates)
#: and the ``locate_*`` ones of UpdateMemory's locate (by a question, by a statement, a question with
#: no clear answer, mixed-script text).
CATEGORIES = (
    *REQUIRED_CATEGORIES,
    "relevance_scale",
    "kept_apart",
    "locate_question",
    "locate_statement",
    "locate_unclear",
    "locate_mixed",
)
#: A case's ``split``: ``tune`` cases may be used to choose a threshold, ``report`` cases check it.
SPLITS = ("tune", "report")

Json = dict[str, Any]


class StepFailed(Exception):
    """An unexpected error in a step: later steps of the case depend on it, so the case stops."""


def parse_time(text: str) -> datetime:
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if value.tzinfo is None:
        raise ValueError(f"timestamp without a time zone: {text!r}")
    return value.astimezone(UTC)


def _short(text: str, n: int = 48) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


# ---------------------------------------------------------------------------------------------
# Results


@dataclass
class CaseResult:
    id: str
    category: str
    lang: str
    description: str
    passed: bool
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0
    #: ``tune`` or ``report`` when the taskset splits its cases (see SPLITS), else "".
    split: str = ""


@dataclass
class CategoryScore:
    passed: int
    total: int

    @property
    def rate(self) -> float:
        return self.passed / self.total if self.total else 0.0


@dataclass
class Report:
    taskset: str
    started_at: str
    server: str
    now: str
    gate_overall: float
    gate_per_category: float
    cases: list[CaseResult]
    fixture_notes: list[str]
    seconds: float

    @property
    def requires_all(self) -> bool:
        """The core taskset must cover every required category; a focused one (kept_apart_v1) not."""
        return self.taskset == DEFAULT_TASKSET.name

    @property
    def passed(self) -> int:
        return sum(c.passed for c in self.cases)

    @property
    def overall(self) -> float:
        return self.passed / len(self.cases) if self.cases else 0.0

    def categories(self) -> dict[str, CategoryScore]:
        out: dict[str, CategoryScore] = {}
        present = {c.category for c in self.cases}
        for name in [*CATEGORIES, *sorted(present - set(CATEGORIES))]:
            if name not in present and (name not in REQUIRED_CATEGORIES or not self.requires_all):
                continue
            cases = [c for c in self.cases if c.category == name]
            out[name] = CategoryScore(passed=sum(c.passed for c in cases), total=len(cases))
        return out

    def splits(self) -> dict[str, CategoryScore]:
        """Passed/total per split (``tune``, ``report``), for a taskset whose cases name one."""
        out: dict[str, CategoryScore] = {}
        for name in SPLITS:
            cases = [c for c in self.cases if c.split == name]
            if cases:
                out[name] = CategoryScore(passed=sum(c.passed for c in cases), total=len(cases))
        return out

    def gate_failures(self) -> list[str]:
        reasons: list[str] = []
        if self.overall < self.gate_overall:
            reasons.append(f"overall {self.overall:.1%} < {self.gate_overall:.0%}")
        for name, score in self.categories().items():
            if score.total and score.rate < self.gate_per_category:
                reasons.append(f"{name} {score.rate:.1%} < {self.gate_per_category:.0%}")
            elif not score.total and name in REQUIRED_CATEGORIES and self.requires_all:
                reasons.append(f"{name} has no cases")
        return reasons

    @property
    def gate_passed(self) -> bool:
        return not self.gate_failures()

    def to_json(self) -> Json:
        return {
            "taskset": self.taskset,
            "started_at": self.started_at,
            "server": self.server,
            "now": self.now,
            "seconds": round(self.seconds, 2),
            "overall": {"passed": self.passed, "total": len(self.cases), "rate": round(self.overall, 4)},
            "categories": {
                k: {"passed": v.passed, "total": v.total, "rate": round(v.rate, 4)}
                for k, v in self.categories().items()
            },
            "splits": {
                k: {"passed": v.passed, "total": v.total, "rate": round(v.rate, 4)}
                for k, v in self.splits().items()
            },
            "gate": {
                "overall_min": self.gate_overall,
                "per_category_min": self.gate_per_category,
                "passed": self.gate_passed,
                "failures": self.gate_failures(),
            },
            "fixture_notes": self.fixture_notes,
            "cases": [asdict(c) | {"seconds": round(c.seconds, 3)} for c in self.cases],
        }

    def to_markdown(self) -> str:
        lines = [
            f"# Regression taskset `{self.taskset}`",
            "",
            f"Run {self.started_at} against {self.server}; taskset now = {self.now}; {self.seconds:.1f} s.",
            "",
            f"**Gate: {'PASSED' if self.gate_passed else 'FAILED'}** "
            f"(≥ {self.gate_overall:.0%} overall, ≥ {self.gate_per_category:.0%} per category)"
            + (f" — {'; '.join(self.gate_failures())}" if not self.gate_passed else ""),
            "",
            "| category | passed | total | rate |",
            "|---|---|---|---|",
        ]
        for name, score in self.categories().items():
            lines.append(f"| {name} | {score.passed} | {score.total} | {score.rate:.1%} |")
        lines.append(f"| **overall** | **{self.passed}** | **{len(self.cases)}** | **{self.overall:.1%}** |")
        for name, score in self.splits().items():
            lines.append(f"| split {name} | {score.passed} | {score.total} | {score.rate:.1%} |")
        failed = [c for c in self.cases if not c.passed]
        lines += ["", f"## Failures ({len(failed)})", ""]
        if not failed:
            lines.append("None.")
        for c in failed:
            lines.append(f"### {c.id} ({c.category}, {c.lang}) — {c.description}")
            lines.append("")
            lines += [f"- {f}" for f in c.failures]
            lines.append("")
        if self.fixture_notes:
            lines += ["## Fixture notes", "", *[f"- {n}" for n in self.fixture_notes], ""]
        lines += ["## All cases", "", "| case | category | lang | result |", "|---|---|---|---|"]
        for c in self.cases:
            lines.append(f"| {c.id} | {c.category} | {c.lang} | {'pass' if c.passed else 'FAIL'} |")
        return "\n".join(lines) + "\n"


def write_report(report: Report, out_dir: Path) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = Path(report.taskset).stem
    json_path = out_dir / f"{stem}.json"
    md_path = out_dir / f"{stem}.md"
    json_path.write_text(json.dumps(report.to_json(), ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    md_path.write_text(report.to_markdown(), encoding="utf-8")
    return json_path, md_path


# ---------------------------------------------------------------------------------------------
# Loading and checking a taskset


def load_taskset(path: Path) -> Json:
    data: Json = json.loads(path.read_text(encoding="utf-8"))
    data["_fixtures"] = [
        json.loads((path.parent / rel).read_text(encoding="utf-8")) for rel in data.get("fixtures", [])
    ]
    return data


def validate_taskset(data: Json) -> list[str]:
    """Static checks: ids unique, categories known, every referenced key defined before use."""
    problems: list[str] = []
    fixture_keys = {
        f"{fx['name']}.{m['key']}"
        for fx in data["_fixtures"]
        for memories in fx["collections"].values()
        for m in memories
    }
    seen: set[str] = set()
    for case in data["cases"]:
        cid = case["id"]
        if cid in seen:
            problems.append(f"{cid}: duplicate case id")
        seen.add(cid)
        if case["category"] not in CATEGORIES:
            problems.append(f"{cid}: unknown category {case['category']!r}")
        if any("split" in c for c in data["cases"]):  # a split taskset: every case names its split and why
            if case.get("split") not in SPLITS:
                problems.append(f"{cid}: split must be one of {', '.join(SPLITS)}")
            if not case.get("reason"):
                problems.append(f"{cid}: a split taskset gives every case a reason")
        keys: set[str] = set()
        for i, step in enumerate(case["steps"]):
            refs: list[str] = []
            expect: Json = step.get("expect", {})
            for name in ("top1", "same_id", "different_id", "near_duplicate_of", "target"):
                if isinstance(expect.get(name), str):
                    refs.append(expect[name])
            if "target" in step:
                refs.append(step["target"])
            refs += (
                list(expect.get("in_top", {})) + expect.get("order", []) + list(expect.get("relevance", {}))
            )
            same_scale = expect.get("relevance_equals_gate")
            if same_scale:
                refs += [same_scale["target"], same_scale["gate_of"]]
            refs += expect.get("absent", []) if step["op"] == "search" else []
            refs += expect.get("keys", []) + list(expect.get("versions", {})) if step["op"] == "list" else []
            for ref in refs:
                if ref not in keys and ref not in fixture_keys:
                    problems.append(f"{cid} step {i}: unknown memory key {ref!r}")
            if step["op"] == "add":
                keys.add(step["key"])
            if same_scale and same_scale["gate_add"] not in keys:
                problems.append(f"{cid} step {i}: gate_add {same_scale['gate_add']!r} is not an earlier add")
    return problems


# ---------------------------------------------------------------------------------------------
# Running


def _outcome(result: AddResult) -> str:
    """created / near_duplicate / duplicate, as in the write gate's table (docs/concepts/gate.md)."""
    if result.outcome == AddOutcome.DUPLICATE:
        return "duplicate"
    return "near_duplicate" if result.near_duplicates else "created"


@dataclass
class _Ref:
    id: str
    collection: str


class TasksetRunner:
    def __init__(self, client: AsyncEngramClient, data: Json, *, shift: timedelta, prefix: str) -> None:
        self.client = client
        self.data = data
        self.shift = shift
        self.prefix = prefix
        self.nonce = uuid.uuid4().hex
        self.globals: dict[str, _Ref] = {}
        self.created_collections: set[str] = set()
        self.fixture_notes: list[str] = []
        #: (case id, add key) -> {memory id: calibrated similarity the write gate reported}
        self.gate_similarity: dict[tuple[str, str], dict[str, float]] = {}

    # -- names -------------------------------------------------------------------------------

    def collection(self, logical: str, case_id: str) -> str:
        if logical.startswith("fx."):
            name = f"{self.prefix}fx-{logical[3:]}"
        else:
            name = f"{self.prefix}{case_id}-{logical}"
        self.created_collections.add(name)
        return name

    def at(self, text: str) -> datetime:
        return parse_time(text) + self.shift

    # -- fixtures ------------------------------------------------------------------------------

    async def load_fixtures(self) -> None:
        """Write every fixture memory through AddMemory. Memories of one collection are sent
        together (the embedder micro-batches them); fixture memories are distinct facts, and any
        the gate refuses anyway is listed in the report's fixture notes."""
        for fx in self.data["_fixtures"]:
            for logical, memories in fx["collections"].items():
                coll = self.collection(f"fx.{logical}", "")
                results = await asyncio.gather(
                    *(
                        self.client.add(
                            m["content"],
                            collection=coll,
                            type=m["type"],
                            importance=m["importance"],
                            tags=m.get("tags", ()),
                            created_at=self.at(m["created_at"]),
                            metadata={"fixture_key": f"{fx['name']}.{m['key']}"},
                        )
                        for m in memories
                    )
                )
                for m, res in zip(memories, results, strict=True):
                    key = f"{fx['name']}.{m['key']}"
                    self.globals[key] = _Ref(res.memory.id, coll)
                    if res.outcome == AddOutcome.DUPLICATE:
                        self.fixture_notes.append(
                            f"fixture {key} was refused by the write gate as a duplicate of "
                            f"{res.memory.metadata.get('fixture_key', res.memory.id)} "
                            f"(similarity {res.duplicate_similarity})"
                        )

    # -- cases ---------------------------------------------------------------------------------

    async def run_case(self, case: Json) -> CaseResult:
        started = time.perf_counter()
        cid = case["id"]
        keys: dict[str, _Ref] = {}
        failures: list[str] = []

        def ref(key: str) -> _Ref:
            if key in keys:
                return keys[key]
            return self.globals[key]

        def name_of(memory_id: str) -> str:
            for k, r in [*keys.items(), *self.globals.items()]:
                if r.id == memory_id:
                    return k
            return memory_id[:8]

        def describe(results: Sequence[SearchResult]) -> str:
            if not results:
                return "no results"
            return "; ".join(
                f"#{i + 1} {name_of(r.memory.id)} [{r.memory.type.value}] '{_short(r.memory.content)}' "
                f"final {r.score.final:.3f} = rel {r.score.relevance:.3f} + rec {r.score.recency:.3f}"
                f" + imp {r.score.importance:.2f}"
                for i, r in enumerate(results[:5])
            )

        try:
            for i, step in enumerate(case["steps"]):
                tag = f"step {i + 1} ({step['op']})"
                expect: Json = step.get("expect", {})
                try:
                    fails = await self._step(
                        cid, step, expect=expect, keys=keys, ref=ref, name_of=name_of, describe=describe
                    )
                except EngramError as err:
                    wanted = expect.get("error")
                    if err.reason is not None and (
                        err.reason == wanted or (isinstance(wanted, list) and err.reason in wanted)
                    ):
                        meta = {k: err.metadata.get(k) for k in expect.get("error_metadata", {})}
                        if meta != expect.get("error_metadata", meta):
                            failures.append(
                                f"{tag}: {err.reason} with metadata {meta}, "
                                f"expected {expect['error_metadata']}"
                            )
                        continue
                    raise StepFailed(
                        f"{tag}: unexpected error {err.reason or err.code}: {err.message}"
                    ) from err
                if "error" in expect:
                    fails.insert(0, f"expected error {expect['error']}, the call succeeded")
                failures += [f"{tag}: {f}" for f in fails]
        except StepFailed as stop:
            failures.append(f"{stop} (case stopped)")
        return CaseResult(
            id=cid,
            category=case["category"],
            lang=case.get("lang", ""),
            description=case.get("description", ""),
            passed=not failures,
            failures=failures,
            seconds=time.perf_counter() - started,
            split=case.get("split", ""),
        )

    async def _step(
        self,
        cid: str,
        step: Json,
        *,
        expect: Json,
        keys: dict[str, _Ref],
        ref: Callable[[str], _Ref],
        name_of: Callable[[str], str],
        describe: Callable[[Sequence[SearchResult]], str],
    ) -> list[str]:
        op = step["op"]
        c = self.client
        fails: list[str] = []
        if op == "add":
            coll = self.collection(step["collection"], cid)
            rid = step.get("request_id")
            res = await c.add(
                step["content"],
                collection=coll,
                type=step.get("type"),
                importance=step.get("importance"),
                tags=step.get("tags", ()),
                created_at=self.at(step["created_at"]) if "created_at" in step else None,
                request_id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"{self.nonce}/{cid}/{rid}")) if rid else None,
            )
            keys[step["key"]] = _Ref(res.memory.id, coll)
            reported = {n.id: n.similarity for n in res.near_duplicates}
            if res.outcome == AddOutcome.DUPLICATE:
                reported[res.memory.id] = res.duplicate_similarity or 0.0
            self.gate_similarity[(cid, step["key"])] = reported
            got = _outcome(res)
            sims = ", ".join(f"{name_of(n.id)} {n.similarity:.3f}" for n in res.near_duplicates)
            detail = (
                f"outcome {got}"
                + (
                    f" (duplicate similarity {res.duplicate_similarity:.3f})"
                    if res.duplicate_similarity
                    else ""
                )
                + (f", near duplicates: {sims}" if sims else "")
            )
            if "outcome" in expect and got != expect["outcome"]:
                fails.append(f"expected outcome {expect['outcome']}, got {detail}")
            if "outcome_not" in expect and got == expect["outcome_not"]:
                fails.append(f"expected an outcome other than {expect['outcome_not']}, got {detail}")
            if "same_id" in expect and res.memory.id != ref(expect["same_id"]).id:
                fails.append(
                    f"expected the existing memory {expect['same_id']}, got {name_of(res.memory.id)}"
                )
            if "different_id" in expect and res.memory.id == ref(expect["different_id"]).id:
                fails.append(f"expected a new memory, got {expect['different_id']} back")
            if "near_duplicate_of" in expect and ref(expect["near_duplicate_of"]).id not in {
                n.id for n in res.near_duplicates
            }:
                fails.append(f"expected {expect['near_duplicate_of']} among the near duplicates; {detail}")
            if "replayed" in expect and res.replayed != expect["replayed"]:
                fails.append(f"expected replayed={expect['replayed']}, got {res.replayed}")
        elif op == "search":
            colls = [self.collection(n, cid) for n in step["collections"]]
            flt = step.get("filter")
            results = await c.search(
                step["query"],
                collections=colls,
                limit=step.get("limit", 5),
                filter=MemoryFilter(types=flt.get("types", ()), tags_any=flt.get("tags_any", ()))
                if flt
                else None,
                min_relevance=step.get("min_relevance", 0.0),
            )
            fails += self._check_search(cid, expect, results, ref)
            fails += self._check_relevance(cid, expect, results, ref)
            if fails:
                fails.append(f"returned: {describe(results)}")
        elif op == "update":
            target = ref(step["target"]) if "target" in step else None
            where = self.collection(step["collection"], cid) if "collection" in step else None
            res_u = await c.update(
                target.id if target else None,
                locate=step.get("locate"),
                collection=where or (target.collection if target else None),
                content=step.get("content"),
                type=step.get("type"),
                importance=step.get("importance"),
            )
            if "same_id" in expect and res_u.memory.id != ref(expect["same_id"]).id:
                fails.append(
                    f"expected to update {expect['same_id']}, updated {name_of(res_u.memory.id)} "
                    f"'{_short(res_u.previous.content if res_u.previous else '')}'"
                )
            if "version" in expect and res_u.memory.version != expect["version"]:
                fails.append(f"expected version {expect['version']}, got {res_u.memory.version}")
            if "changed" in expect and res_u.changed != expect["changed"]:
                fails.append(f"expected changed={expect['changed']}, got {res_u.changed}")
        elif op == "delete":
            target = ref(step["target"])
            res_d = await c.delete(target.id, collection=target.collection, force=step.get("force", False))
            if "deleted" in expect and len(res_d.deleted) != expect["deleted"]:
                fails.append(f"expected {expect['deleted']} deleted, got {len(res_d.deleted)}")
        elif op == "get":
            target = ref(step["target"])
            res_g = await c.get(
                target.id, collection=target.collection, include_history=step.get("include_history", False)
            )
            m = res_g.memory
            if "version" in expect and m.version != expect["version"]:
                fails.append(f"expected version {expect['version']}, got {m.version}")
            if "contains" in expect and expect["contains"] not in m.content:
                fails.append(f"expected content containing {expect['contains']!r}, got {m.content!r}")
            if "history" in expect and len(res_g.history) != expect["history"]:
                fails.append(f"expected {expect['history']} history versions, got {len(res_g.history)}")
            if "history_contains" in expect and not any(
                expect["history_contains"] in h.content for h in res_g.history
            ):
                fails.append(f"no history version contains {expect['history_contains']!r}")
        elif op == "list":
            coll = self.collection(step["collection"], cid)
            memories = [m async for m in c.iter_memories(collection=coll)]
            got_ids = {m.id for m in memories}
            if "keys" in expect:
                want = {ref(k).id for k in expect["keys"]}
                if got_ids != want:
                    fails.append(
                        f"expected exactly {sorted(expect['keys'])}, got "
                        f"{sorted(name_of(m.id) + ': ' + _short(m.content, 30) for m in memories)}"
                    )
            for key, version in expect.get("versions", {}).items():
                found = [m for m in memories if m.id == ref(key).id]
                if not found or found[0].version != version:
                    fails.append(
                        f"expected {key} at version {version}, got {found[0].version if found else None}"
                    )
        elif op == "delete_collection":
            await c.delete_collection(self.collection(step["collection"], cid))
        elif op == "list_collections":
            names = {info.name for info in await c.list_collections()}
            for logical in expect.get("absent", []):
                if self.collection(logical, cid) in names:
                    fails.append(f"collection {logical} still listed")
            for logical in expect.get("present", []):
                if self.collection(logical, cid) not in names:
                    fails.append(f"collection {logical} not listed")
        else:
            raise ValueError(f"{cid}: unknown op {op!r}")
        return fails

    def _check_search(
        self, cid: str, expect: Json, results: Sequence[SearchResult], ref: Callable[[str], _Ref]
    ) -> list[str]:
        fails: list[str] = []
        ids = [r.memory.id for r in results]

        def pos(key: str) -> int | None:
            rid = ref(key).id
            return ids.index(rid) + 1 if rid in ids else None

        if "top1" in expect and (not ids or ids[0] != ref(expect["top1"]).id):
            fails.append(f"expected {expect['top1']} first, it is at {pos(expect['top1']) or 'absent'}")
        for key, k in expect.get("in_top", {}).items():
            p = pos(key)
            if p is None or p > k:
                fails.append(f"expected {key} in the top {k}, it is at {p or 'absent'}")
        order: list[str] = expect.get("order", [])
        if order:
            # A key that was not returned ranks below every returned one; the first must be returned.
            positions = [pos(k) for k in order]
            ranks = [p if p is not None else len(ids) + 1 for p in positions]
            if positions[0] is None or any(a >= b for a, b in itertools.pairwise(ranks) if a <= len(ids)):
                fails.append(
                    "expected order "
                    + " > ".join(order)
                    + ", got positions "
                    + ", ".join(f"{k}={p or 'absent'}" for k, p in zip(order, positions, strict=True))
                )
        for key in expect.get("absent", []):
            if pos(key) is not None:
                fails.append(f"expected {key} absent, it is at {pos(key)}")
        if "count" in expect and len(results) != expect["count"]:
            fails.append(f"expected {expect['count']} results, got {len(results)}")
        if "all_collections" in expect:
            allowed = {self.collection(n, cid) for n in expect["all_collections"]}
            leaked = {r.memory.collection for r in results} - allowed
            if leaked:
                fails.append(f"results from other collections: {sorted(leaked)}")
        if "all_types" in expect:
            wrong = {r.memory.type.value for r in results} - set(expect["all_types"])
            if wrong:
                fails.append(f"results of other types: {sorted(wrong)}")
        if "top1_collection" in expect:
            want = self.collection(expect["top1_collection"], cid)
            if not results or results[0].memory.collection != want:
                fails.append(
                    f"expected the first result from {want}, "
                    f"got {results[0].memory.collection if results else None}"
                )
        if "top1_contains" in expect and (
            not results or expect["top1_contains"] not in results[0].memory.content
        ):
            fails.append(f"expected the first result to contain {expect['top1_contains']!r}")
        if "none_contains" in expect and any(expect["none_contains"] in r.memory.content for r in results):
            fails.append(f"a result contains {expect['none_contains']!r}")
        if expect.get("sorted"):
            finals = [r.score.final for r in results]
            if finals != sorted(finals, reverse=True):
                fails.append(f"results not sorted by final score: {finals}")
        return fails

    def _check_relevance(
        self, cid: str, expect: Json, results: Sequence[SearchResult], ref: Callable[[str], _Ref]
    ) -> list[str]:
        """``relevance``: {key: [low, high]} bounds on a result's reported relevance (a key not
        returned has none to check); ``relevance_equals_gate``: the relevance of ``target`` equals,
        within ``tolerance``, the similarity the write gate reported between ``gate_add``'s content
        and ``gate_of`` (the same texts; the search's query is ``gate_add``'s content)."""
        fails: list[str] = []
        by_id = {r.memory.id: r.score.relevance for r in results}
        for key, (low, high) in expect.get("relevance", {}).items():
            got = by_id.get(ref(key).id)
            if got is not None and not low <= got <= high:
                fails.append(f"expected {key}'s relevance in [{low}, {high}], got {got:.3f}")
        same = expect.get("relevance_equals_gate")
        if same:
            reported = self.gate_similarity.get((cid, same["gate_add"]), {})
            gate = reported.get(ref(same["gate_of"]).id)
            got = by_id.get(ref(same["target"]).id)
            tol = float(same.get("tolerance", 0.03))
            if got is None:
                fails.append(f"{same['target']} was not returned")
            elif gate is None:
                # The gate reports similarities from 0.70 up: none means below the same-topic line.
                if got >= 0.70 + tol:
                    fails.append(
                        f"the gate saw {same['gate_add']} and {same['gate_of']} as unrelated (below 0.70, "
                        f"not reported) but the search reads {got:.3f}"
                    )
            elif abs(got - gate) > tol:
                fails.append(
                    f"{same['target']}'s search relevance {got:.3f} differs from the gate's similarity "
                    f"{gate:.3f} for the same texts by more than {tol}"
                )
        return fails

    async def cleanup(self) -> None:
        for name in sorted(self.created_collections):
            with contextlib.suppress(EngramError):  # (purged too: the trash counts against the limit)
                await self.client.delete_collection(name)
                await self.client.purge_trash(collection=name, purge_collection=True)


async def run_taskset(
    address: str,
    taskset_path: Path = DEFAULT_TASKSET,
    *,
    shift: timedelta = timedelta(0),
    prefix: str = "",
    cleanup: bool = False,
    server_label: str | None = None,
    concurrency: int = 4,
) -> Report:
    """Run every case of a taskset against the server at ``address``."""
    data = load_taskset(taskset_path)
    problems = validate_taskset(data)
    if problems:
        raise ValueError("invalid taskset:\n" + "\n".join(problems))
    started = time.perf_counter()
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    async with AsyncEngramClient(address, timeout=60) as client:
        runner = TasksetRunner(client, data, shift=shift, prefix=prefix)
        await runner.load_fixtures()
        gate_ = asyncio.Semaphore(max(1, concurrency))

        async def one(case: Json) -> CaseResult:
            async with gate_:
                return await runner.run_case(case)

        # Cases are independent (each writes only to its own collections), so they may overlap.
        cases = list(await asyncio.gather(*(one(case) for case in data["cases"])))
        if cleanup:
            await runner.cleanup()
    gate: Mapping[str, float] = data.get("gate", {})
    return Report(
        taskset=taskset_path.name,
        started_at=started_at,
        server=server_label or address,
        now=(parse_time(data["now"]) + shift).isoformat(),
        gate_overall=float(gate.get("overall", 0.80)),
        gate_per_category=float(gate.get("per_category", 0.65)),
        cases=cases,
        fixture_notes=runner.fixture_notes,
        seconds=time.perf_counter() - started,
    )


def taskset_now(path: Path) -> datetime:
    now: str = json.loads(path.read_text(encoding="utf-8"))["now"]
    return parse_time(now)


async def run_in_process(
    taskset_path: Path = DEFAULT_TASKSET,
    data_dir: Path | None = None,
    *,
    concurrency: int = 4,
    **settings: Any,
) -> Report:
    """Start a real server (embedded Qdrant, the local model, real gRPC on port 0) whose clock is
    pinned to the taskset's ``now``, and run the taskset against it."""
    from engram_server.domain.clock import ManualClock  # noqa: PLC0415 - server only when in-process
    from engram_server.testing import running_server  # noqa: PLC0415

    now = taskset_now(taskset_path)
    with tempfile.TemporaryDirectory(prefix="engram-eval-") as tmp:
        root = data_dir or Path(tmp) / "data"
        async with running_server(root, clock=ManualClock(start=now.timestamp()), **settings) as server:
            return await run_taskset(
                server.address,
                taskset_path,
                server_label="in-process server (ManualClock at taskset now)",
                concurrency=concurrency,
            )


def taskset_files(directory: Path = TASKSET_DIR) -> list[Path]:
    """Every taskset in ``directory`` (a JSON file with ``cases``), core first, then by name."""
    found = []
    for path in sorted(directory.glob("*.json")):
        with contextlib.suppress(ValueError, OSError):
            if isinstance(json.loads(path.read_text(encoding="utf-8")).get("cases"), list):
                found.append(path)
    return sorted(found, key=lambda p: (p != DEFAULT_TASKSET, p.name))


def summarize(reports: Sequence[Report]) -> Json:
    """Per category and overall over several tasksets, with every case's result (for --baseline)."""
    cats: dict[str, list[int]] = {}
    for report in reports:
        for name, score in report.categories().items():
            acc = cats.setdefault(name, [0, 0])
            acc[0] += score.passed
            acc[1] += score.total
    passed = sum(r.passed for r in reports)
    total = sum(len(r.cases) for r in reports)
    return {
        "tasksets": [r.taskset for r in reports],
        "started_at": reports[0].started_at if reports else "",
        "overall": {"passed": passed, "total": total, "rate": round(passed / total, 4) if total else 0.0},
        "categories": {
            k: {"passed": p, "total": t, "rate": round(p / t, 4) if t else 0.0} for k, (p, t) in cats.items()
        },
        "gate_passed": all(r.gate_passed for r in reports),
        "cases": {f"{Path(r.taskset).stem}/{c.id}": c.passed for r in reports for c in r.cases},
    }


def compare(summary: Json, baseline: Json) -> str:
    """Markdown: each category before (``baseline``) and after (``summary``), and the cases that
    changed. ``baseline`` is an earlier ``summary.json`` (or a single taskset's report JSON)."""
    base_cases: dict[str, bool] = baseline.get("cases", {})
    if isinstance(base_cases, list):  # a single taskset's report
        stem = Path(str(baseline.get("taskset", ""))).stem
        base_cases = {f"{stem}/{c['id']}": bool(c["passed"]) for c in base_cases}
    lines = ["| category | before | after |", "|---|---|---|"]

    def cell(entry: Json | None) -> str:
        return (
            f"{entry['passed']}/{entry['total']} ({entry['rate']:.1%})" if entry and entry["total"] else "–"
        )

    names = list(dict.fromkeys([*summary["categories"], *baseline.get("categories", {})]))
    for name in names:
        lines.append(
            f"| {name} | {cell(baseline['categories'].get(name))} | {cell(summary['categories'].get(name))} |"
        )
    lines.append(f"| **overall** | {cell(baseline['overall'])} | {cell(summary['overall'])} |")
    changed = [(k, base_cases.get(k), v) for k, v in summary["cases"].items() if base_cases.get(k) is not v]
    lines += ["", "Cases that changed (before → after; `new` = not in the baseline):", ""]
    if not changed:
        lines.append("None.")
    for key, before, after in changed:
        was = "new" if before is None else ("pass" if before else "FAIL")
        lines.append(f"- {key}: {was} → {'pass' if after else 'FAIL'}")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eval.regression", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--taskset",
        type=Path,
        action="append",
        help="a taskset file (repeatable); default: every taskset in eval/taskset/",
    )
    parser.add_argument("--address", help="run against this server instead of an in-process one")
    parser.add_argument("--out", type=Path, default=Path("results/eval"), help="report directory")
    parser.add_argument("--concurrency", type=int, default=4, help="cases run at the same time")
    parser.add_argument(
        "--baseline", type=Path, help="an earlier run's summary.json: report each category before and after"
    )
    args = parser.parse_args(argv)
    paths: list[Path] = args.taskset or taskset_files()
    reports: list[Report] = []
    for path in paths:
        if args.address:
            shift = datetime.now(UTC) - taskset_now(path) - timedelta(seconds=5)
            report = asyncio.run(
                run_taskset(
                    args.address,
                    path,
                    shift=shift,
                    prefix=f"ev{uuid.uuid4().hex[:6]}-",
                    cleanup=True,
                    concurrency=args.concurrency,
                )
            )
        else:
            from engram_server.config import env_overrides  # noqa: PLC0415 - server only when in-process

            # ENGRAM_* variables configure the in-process server (ENGRAM_LEXICAL_SEARCH=false …)
            report = asyncio.run(run_in_process(path, concurrency=args.concurrency, **env_overrides()))
        json_path, md_path = write_report(report, args.out)
        print(
            f"== {path.name}: {report.passed}/{len(report.cases)} ({report.seconds:.1f} s); "
            f"{json_path} {md_path}"
        )
        for case in report.cases:
            if not case.passed:
                print(f"FAIL {case.id}: {case.failures[0]}")
        reports.append(report)
    summary = summarize(reports)
    for name, score in summary["categories"].items():
        print(f"{name:20s} {score['passed']:3d}/{score['total']:<3d} {score['rate']:6.1%}")
    o = summary["overall"]
    print(f"{'overall':20s} {o['passed']:3d}/{o['total']:<3d} {o['rate']:6.1%}")
    for report in reports:
        verdict = "PASSED" if report.gate_passed else "FAILED: " + "; ".join(report.gate_failures())
        print(f"gate {report.taskset}: {verdict}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    if args.baseline:
        table = compare(summary, json.loads(args.baseline.read_text(encoding="utf-8")))
        (args.out / "comparison.md").write_text(
            f"# Before ({args.baseline}) and after\n\n{table}", encoding="utf-8"
        )
        print(table)
    print(f"summary: {args.out / 'summary.json'}")
    return 0 if summary["gate_passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
