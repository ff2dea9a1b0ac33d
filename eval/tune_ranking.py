"""Derive the ranking defaults from LoCoMo evidence recall on the TUNING conversations only.

Runs :mod:`eval.locomo` once per setting of the fusion (ENGRAM_* variables, exactly what an
operator would set) on the tuning split (conv-26, conv-41, conv-43 by default); the held-out
conversations (conv-47, conv-49) are never read here. Each conversation's texts are embedded once
for the whole grid (the model is deterministic), so a setting costs one ingest and one pass of
questions.

    python -m eval.tune_ranking --data ../shared/data/locomo/locomo_dev.json [--out results/tune]

The grid varies one thing at a time around the defaults (the fusion form, the recency weight, the
lexical weight α, the lexical power p, the episode-context weight); the report lists R@10 (original
key, categories 1–4, pooled over the tuning questions) with its bootstrap interval for every setting.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from eval import locomo

#: name -> ENGRAM_* overrides (on top of the server defaults).
GRID: dict[str, dict[str, str]] = {
    "defaults": {},
    "scaled (previous form, 1/0.5/0.3)": {
        "ENGRAM_FUSION_MODE": "scaled",
        "ENGRAM_WEIGHT_RECENCY": "0.5",
        "ENGRAM_WEIGHT_IMPORTANCE": "0.3",
    },
    **{
        f"additive, recency {w}": {"ENGRAM_FUSION_MODE": "additive", "ENGRAM_WEIGHT_RECENCY": w}
        for w in ("0", "0.02", "0.05", "0.1", "0.2")
    },
    **{f"α {a}": {"ENGRAM_SEMANTIC_WEIGHT": a} for a in ("0.3", "0.5", "0.7", "1.0")},
    **{f"context {c}": {"ENGRAM_CONTEXT_WEIGHT": c} for c in ("0", "0.25", "0.5", "0.75")},
    **{f"lexical power {p}": {"ENGRAM_LEXICAL_POWER": p} for p in ("0.3", "0.4", "0.5", "0.7", "1.0")},
}

_SHARED_MEMO: dict[tuple[bool, str], npt.NDArray[np.float32]] = {}


class _SharedMemo(locomo.MemoEmbedder):
    """The harness's embedder with one memo for the whole grid."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self._memo = _SHARED_MEMO


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eval.tune_ranking", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=locomo.DEFAULT_DATA)
    parser.add_argument("--audit", type=Path, default=None)
    parser.add_argument("--conversations", default="tune", help="never 'report': those are held out")
    parser.add_argument("--only", default=None, help="comma list of grid names to run")
    parser.add_argument("--out", type=Path, default=Path("results/tune"))
    args = parser.parse_args(argv)
    if args.conversations == "report" or set(args.conversations.split(",")) & set(locomo.REPORT):
        raise SystemExit("the held-out conversations are not for tuning")
    data_file, audit_file = locomo.data_paths(args.data, args.audit)
    locomo.MemoEmbedder = _SharedMemo  # type: ignore[misc]
    names = args.only.split(",") if args.only else list(GRID)
    rows: list[dict[str, Any]] = []
    for name in names:
        overrides = GRID[name]
        saved = {k: os.environ.get(k) for k in overrides}
        os.environ.update(overrides)
        try:
            result = asyncio.run(
                locomo.run(data_file, args.conversations, (10,), progress=False, audit_file=audit_file)
            )
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        pc = result["per_conversation_R@10"]
        row = {
            "setting": name,
            "overrides": overrides,
            "R@10": pc["engram|original|all"]["R@10"],
            "ci95": pc["engram|original|all"]["ci95"],
            "relonly R@10": pc["engram-relonly|original|all"]["R@10"],
            "per_conversation": {c: pc[f"engram|original|{c}"]["R@10"] for c in result["conversations"]},
        }
        rows.append(row)
        print(
            f"{name:36s} R@10 {row['R@10']:.4f} [{row['ci95'][0]:.3f}, {row['ci95'][1]:.3f}] "
            f"relonly {row['relonly R@10']:.4f} "
            + " ".join(f"{c} {v:.3f}" for c, v in row["per_conversation"].items()),
            flush=True,
        )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "tune_ranking.json").write_text(
        json.dumps({"data": str(data_file), "conversations": args.conversations, "rows": rows}, indent=2)
        + "\n",
        encoding="utf-8",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
