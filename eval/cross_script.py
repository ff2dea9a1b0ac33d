"""Can the write gate refuse a translated restatement (zh↔en) without refusing a different fact?

The check proposed for translations: for a pair in two different scripts, refuse the new memory
when (a) its similarity on a cross-lingual threshold of the gate's scale is high enough and (b) the
specifics agree (:func:`engram_server.domain.specifics.conflicts`: numbers, dates, ids, negation).
This measures that rule on its own pair set, ``eval/pairs/cross_script.jsonl``: translations
(``restatement``, should be refused) and translations with one thing changed (``different``: a
number, time, id, name, negation, or a content word such as dark → light; must never be refused),
both directions, each pair in a ``tune`` or a ``report`` half.

The threshold is chosen on the tune half only, as the lowest one that refuses no different fact
there; the report half is scored with it. The texts are embedded as the gate embeds them
(documents, the local model) and mapped onto the gate's calibrated scale; no server is needed.

    python -m eval.cross_script [--out results/eval]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

PAIRS = Path(__file__).resolve().parent / "pairs" / "cross_script.jsonl"
Json = dict[str, Any]


@dataclass(frozen=True)
class Row:
    id: str
    kind: str  # restatement | different
    lang: str
    subclass: str
    split: str
    similarity: float  # calibrated, the gate's document scale
    conflicts: tuple[str, ...]  # kinds of specifics that disagree
    aligned: bool = False  # engram_server.domain.crosslingual.translation_pair


def load(path: Path = PAIRS) -> list[Json]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


async def score(pairs: Sequence[Json]) -> list[Row]:
    from engram_server.app import build_embedder  # noqa: PLC0415
    from engram_server.config import Settings, env_overrides  # noqa: PLC0415
    from engram_server.domain.calibration import calibration_for  # noqa: PLC0415
    from engram_server.domain.crosslingual import translation_pair  # noqa: PLC0415
    from engram_server.domain.specifics import conflicts  # noqa: PLC0415

    embedder = build_embedder(Settings(**env_overrides()))
    try:
        cal = calibration_for(embedder.model_id)
        texts = sorted({t for p in pairs for t in (p["a"], p["b"])})
        vectors = np.asarray(await embedder.embed_documents(texts), dtype=np.float64)
    finally:
        await embedder.close()
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    at = {t: i for i, t in enumerate(texts)}
    return [
        Row(
            p["id"],
            p["kind"],
            p["lang"],
            p["subclass"],
            p["split"],
            round(cal.similarity(float(vectors[at[p["a"]]] @ vectors[at[p["b"]]])), 4),
            tuple(c.kind for c in conflicts(p["a"], p["b"])),
            translation_pair(p["a"], p["b"]),
        )
        for p in pairs
    ]


def refused(row: Row, threshold: float) -> bool:
    """The proposed rule: similarity at or above the threshold and no conflicting specific."""
    return row.similarity >= threshold and not row.conflicts


def refused_by_alignment(row: Row, floor: float) -> bool:
    """The gate's rule: the dictionary alignment passes and the similarity reaches the floor."""
    return row.aligned and row.similarity >= floor


def choose_floor(rows: Sequence[Row]) -> float:
    """The highest floor (a multiple of 0.05) that keeps every aligned translation of ``rows``."""
    aligned = [r.similarity for r in rows if r.kind == "restatement" and r.aligned]
    return round(int(min(aligned, default=0.0) * 20) / 20, 2)


def choose_threshold(rows: Sequence[Row]) -> float:
    """The lowest threshold refusing no ``different`` pair of ``rows`` (just above the most similar
    different pair whose specifics agree)."""
    agreeing = [r.similarity for r in rows if r.kind == "different" and not r.conflicts]
    return round(max(agreeing, default=0.0) + 1e-4, 4)


def _span(values: Sequence[float]) -> list[float] | None:
    return [round(min(values), 3), round(max(values), 3)] if values else None


def _fmt_span(span: list[float] | None) -> str:
    return "–" if span is None else f"{span[0]:.3f}–{span[1]:.3f}"


def summarise(rows: Sequence[Row]) -> Json:
    threshold = choose_threshold([r for r in rows if r.split == "tune"])
    floor = choose_floor([r for r in rows if r.split == "tune"])
    out: Json = {"threshold_from_tune": threshold, "floor_from_tune": floor, "splits": {}}
    for split in ("tune", "report", "all"):
        sel = [r for r in rows if split in ("all", r.split)]
        rest = [r for r in sel if r.kind == "restatement"]
        diff = [r for r in sel if r.kind == "different"]
        agree = [r.similarity for r in diff if not r.conflicts]
        out["splits"][split] = {
            "restatements": len(rest),
            "restatements_refused": sum(refused(r, threshold) for r in rest),
            "different": len(diff),
            "different_refused": sum(refused(r, threshold) for r in diff),
            "different_caught_by_specifics": sum(bool(r.conflicts) for r in diff),
            "restatements_aligned": sum(r.aligned for r in rest),
            "different_aligned": sum(r.aligned for r in diff),
            "restatements_refused_by_alignment": sum(refused_by_alignment(r, floor) for r in rest),
            "different_refused_by_alignment": sum(refused_by_alignment(r, floor) for r in diff),
            "restatement_similarity": _span([r.similarity for r in rest]),
            "different_agreeing_similarity": _span(agree),
        }
    return out


def to_markdown(summary: Json, rows: Sequence[Row]) -> str:
    lines = [
        "# Cross-script duplicates (zh↔en): translations vs changed translations",
        "",
        f"Threshold chosen on the tune half (lowest refusing no different fact): "
        f"**{summary['threshold_from_tune']:.3f}** on the gate's calibrated scale.",
        "",
        "| split | restatements refused | different refused | different caught by specifics | "
        "restatement similarity | different (specifics agree) similarity |",
        "|---|---|---|---|---|---|",
    ]
    for split, s in summary["splits"].items():
        lines.append(
            f"| {split} | {s['restatements_refused']}/{s['restatements']} | "
            f"{s['different_refused']}/{s['different']} | "
            f"{s['different_caught_by_specifics']}/{s['different']} | "
            f"{_fmt_span(s['restatement_similarity'])} | {_fmt_span(s['different_agreeing_similarity'])} |"
        )
    lines += [
        "",
        "## The gate's rule: dictionary alignment (crosslingual.translation_pair) and a similarity floor",
        "",
        f"Floor chosen on the tune half (highest keeping every aligned tune translation): "
        f"**{summary['floor_from_tune']:.2f}**.",
        "",
        "| split | translations aligned | translations refused | different aligned | different refused |",
        "|---|---|---|---|---|",
    ]
    for split, s in summary["splits"].items():
        lines.append(
            f"| {split} | {s['restatements_aligned']}/{s['restatements']} | "
            f"{s['restatements_refused_by_alignment']}/{s['restatements']} | "
            f"{s['different_aligned']}/{s['different']} | "
            f"{s['different_refused_by_alignment']}/{s['different']} |"
        )
    lines += [
        "",
        "| id | kind | split | subclass | similarity | conflicts | aligned |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: -r.similarity):
        lines.append(
            f"| {r.id} | {r.kind} | {r.split} | {r.subclass} | {r.similarity:.3f} | "
            f"{','.join(r.conflicts)} | {'yes' if r.aligned else ''} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eval.cross_script", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("results/eval"))
    args = parser.parse_args(argv)
    rows = asyncio.run(score(load()))
    summary = summarise(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cross_script.json").write_text(
        json.dumps({"summary": summary, "pairs": [asdict(r) for r in rows]}, ensure_ascii=False, indent=1),
        encoding="utf-8",
    )
    md = to_markdown(summary, rows)
    (args.out / "cross_script.md").write_text(md, encoding="utf-8")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
