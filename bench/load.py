"""Load tests with ghz against a real Engram server (`make load`).

    .venv/bin/python bench/load.py                         # start a server on the embedded defaults
    .venv/bin/python bench/load.py --address host:50051    # any running deployment (plaintext)

Installs ghz (pinned) into .tools/go/bin with `go install` if it is not there, starts
`python -m engram_server serve` on a fresh data directory (unless --address is given), seeds a
corpus through the API, then runs ghz scenarios — AddMemory, SearchMemories with unique queries,
SearchMemories with one repeated query (the query-embedding and candidate caches), and a mixed
workload (AddMemory, new questions and a repeated question side by side, 1 : 2 : 5) — at several
concurrencies. ghz finds the API by server reflection. Every ghz JSON report and one
Markdown summary (RPS, p50/p95/p99, status codes) go to results/load/.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent
GHZ_VERSION = "v0.121.0"
GHZ = ROOT / ".tools" / "go" / "bin" / "ghz"
SERVICE = "engram.v1.MemoryService"

TOPICS = [
    "the quarterly report", "a dentist appointment", "the hiking trip to the Alps", "the new laptop",
    "piano lessons", "the tax return", "the team offsite in Porto", "a job interview at a bank",
    "the garden irrigation project", "the car's brake repair", "grandmother's birthday dinner",
    "the database migration", "a marathon training plan", "learning Japanese", "the kitchen renovation",
]  # fmt: skip
# ghz request templates: unique content / queries per request.
ADD_DATA = '{"content": "load test note {{.RequestNumber}} {{randomString 12}} at {{.TimestampUnix}}"}'
UNIQUE_SEARCH_DATA = (
    '{"query": "what did {{randomString 6}} write about taxes {{.RequestNumber}}", "limit": 10}'
)
REPEATED_SEARCH_DATA = '{"query": "what did Alice write about the tax return", "limit": 10}'
PEOPLE = ["Alice", "Bruno", "Chen Wei", "Dara", "Emeka", "Fatima", "Gustav", "Hana"]


@dataclass
class Scenario:
    name: str
    call: str
    data: str
    concurrency: int
    total: int


def ensure_ghz() -> Path:
    if GHZ.exists():
        return GHZ
    found = shutil.which("ghz")
    if found:
        return Path(found)
    if shutil.which("go") is None:
        sys.exit("ghz is not installed and Go is not available to build it")
    print(f"installing ghz {GHZ_VERSION} with go install …", flush=True)
    env = {**os.environ, "GOBIN": str(GHZ.parent)}
    subprocess.run(
        ["go", "install", f"github.com/bojand/ghz/cmd/ghz@{GHZ_VERSION}"], env=env, check=True, timeout=900
    )
    return GHZ


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def seed(address: str, n: int) -> int:
    created = 0
    with grpc.insecure_channel(address) as channel:
        stub = memory_service_pb2_grpc.MemoryServiceStub(channel)
        for i in range(n):
            who, what = PEOPLE[i % len(PEOPLE)], TOPICS[(i * 7) % len(TOPICS)]
            text = f"{who} wrote note {i} about {what}, day {i % 365}, priority {i % 10}."
            r = stub.AddMemory(s.AddMemoryRequest(content=text, importance=1 + i % 10), timeout=60)
            created += r.outcome == s.ADD_OUTCOME_CREATED
    return created


def ghz_command(ghz: Path, address: str, sc: Scenario, report: Path) -> list[str]:
    return [
        str(ghz),
        "--insecure",
        "--call",
        sc.call,
        "-d",
        sc.data,
        "-c",
        str(sc.concurrency),
        "-n",
        str(sc.total),
        "--timeout",
        "30s",
        "-O",
        "json",
        "-o",
        str(report),
        address,
    ]


def run_ghz(ghz: Path, address: str, sc: Scenario, out: Path) -> dict[str, Any]:
    report = out / f"{sc.name}-c{sc.concurrency}.json"
    subprocess.run(ghz_command(ghz, address, sc, report), check=True, timeout=900)
    data: dict[str, Any] = json.loads(report.read_text())
    return data


def mixed(concurrency: int, total: int) -> list[Scenario]:
    """A mixed workload: writes, new questions and a repeated question at once (one ghz per call
    kind, run side by side; concurrency and requests split 1 : 2 : 5)."""
    parts = [
        ("add", f"{SERVICE}/AddMemory", ADD_DATA, 1),
        ("search-unique", f"{SERVICE}/SearchMemories", UNIQUE_SEARCH_DATA, 2),
        ("search-repeated", f"{SERVICE}/SearchMemories", REPEATED_SEARCH_DATA, 5),
    ]
    return [
        Scenario(f"mixed-{name}", call, data, max(1, concurrency * w // 8), max(1, total * w // 8))
        for name, call, data, w in parts
    ]


def run_together(
    ghz: Path, address: str, scenarios: list[Scenario], out: Path, c: int
) -> list[dict[str, Any]]:
    reports = [out / f"{sc.name}-c{c}.json" for sc in scenarios]
    procs = [
        subprocess.Popen(ghz_command(ghz, address, sc, rep))
        for sc, rep in zip(scenarios, reports, strict=True)
    ]
    for proc in procs:
        if proc.wait(timeout=900) != 0:
            raise RuntimeError(f"ghz exited with {proc.returncode}")
    return [json.loads(rep.read_text()) for rep in reports]


def summary_row(sc: Scenario, rep: dict[str, Any]) -> str:
    dist = {d["percentage"]: d["latency"] for d in rep.get("latencyDistribution") or []}
    ms = {p: (dist.get(p, 0) or 0) / 1e6 for p in (50, 95, 99)}
    codes = ", ".join(f"{k}: {v}" for k, v in (rep.get("statusCodeDistribution") or {}).items())
    return (
        f"| {sc.name} | {sc.concurrency} | {rep.get('count')} | {float(rep.get('rps', 0)):.0f} | "
        f"{ms[50]:.1f} | {ms[95]:.1f} | {ms[99]:.1f} | {codes} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--address", help="load an existing server instead of starting one")
    ap.add_argument("--seed", type=int, default=1000, help="memories to seed before the scenarios")
    ap.add_argument("--concurrency", default="1,8,32", help="comma-separated concurrencies")
    ap.add_argument("--requests", type=int, default=400, help="requests per scenario and concurrency")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "load")
    args = ap.parse_args()
    ghz = ensure_ghz()
    args.out.mkdir(parents=True, exist_ok=True)

    proc: subprocess.Popen[bytes] | None = None
    tmp = tempfile.TemporaryDirectory(prefix="engram-load-")
    address = args.address
    if address is None:
        port = free_port()
        env = {**os.environ, "ENGRAM_DATA_DIR": tmp.name, "ENGRAM_PORT": str(port)}
        proc = subprocess.Popen([sys.executable, "-m", "engram_server", "serve"], cwd=ROOT, env=env)
        address = f"127.0.0.1:{port}"
        with grpc.insecure_channel(address) as ch:
            grpc.channel_ready_future(ch).result(timeout=120)
    try:
        t0 = time.perf_counter()
        created = seed(address, args.seed)
        print(f"seeded {created} of {args.seed} memories in {time.perf_counter() - t0:.1f} s", flush=True)
        rows = []
        for c in (int(x) for x in args.concurrency.split(",")):
            scenarios = [
                Scenario(
                    "add",
                    f"{SERVICE}/AddMemory",
                    ADD_DATA,
                    c,
                    args.requests,
                ),
                Scenario(
                    "search-unique",
                    f"{SERVICE}/SearchMemories",
                    UNIQUE_SEARCH_DATA,
                    c,
                    args.requests,
                ),
                Scenario(
                    "search-repeated",
                    f"{SERVICE}/SearchMemories",
                    REPEATED_SEARCH_DATA,
                    c,
                    args.requests,
                ),
            ]
            for sc in scenarios:
                print(f"ghz {sc.name} at concurrency {c} …", flush=True)
                rows.append(summary_row(sc, run_ghz(ghz, address, sc, args.out)))
            together = mixed(c, args.requests)
            print(
                f"ghz mixed workload at concurrency {c} ({', '.join(x.name for x in together)}) …", flush=True
            )
            for sc, rep in zip(together, run_together(ghz, address, together, args.out, c), strict=True):
                rows.append(summary_row(sc, rep))
        header = [
            f"# Engram load test ({time.strftime('%Y-%m-%d %H:%M')}, {address}, {created} seeded memories)",
            "",
            "| scenario | concurrency | requests | RPS | p50 ms | p95 ms | p99 ms | status codes |",
            "|---|---|---|---|---|---|---|---|",
        ]
        summary = "\n".join(header + rows) + "\n"
        (args.out / "summary.md").write_text(summary)
        print(summary)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=60)
        tmp.cleanup()


if __name__ == "__main__":
    main()
