"""Storage-bound searches under concurrency on running servers, side by side, rounds alternated.

    .venv/bin/python bench/known_ab.py --address 127.0.0.1:50631,127.0.0.1:50632 [--rounds 4] [-c 32]

Each round takes a new question template and, on each server in random order: asks its 400
questions once with a filter that keeps every memory (their embeddings are cached; a filtered
search keeps no nearest list for the unfiltered question), writes one memory (AddMemory until one
is CREATED), then asks them unfiltered with ghz at concurrency ``-c``: every candidate list comes
from storage. Prints RPS and p50 per round and the mean RPS per server. Start the servers (e.g. two
checkouts on copies of one corpus) yourself; ghz from ``make load`` (.tools/go/bin/ghz).
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import uuid
from pathlib import Path
from typing import Any

import grpc

from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc as g

GHZ = Path(__file__).resolve().parent.parent / ".tools" / "go" / "bin" / "ghz"
THINGS = ["car", "boat", "garden", "piano", "kitchen", "budget", "trip", "dentist", "laptop", "rent"]
QUESTIONS = 400


def ghz(address: str, data: dict[str, Any], concurrency: int) -> tuple[float, float]:
    """(RPS, p50 ms) of one ghz run of QUESTIONS SearchMemories calls."""
    out = subprocess.run(
        [
            str(GHZ),
            "--insecure",
            "--call",
            "engram.v1.MemoryService/SearchMemories",
            "-d",
            json.dumps(data),
            "-c",
            str(concurrency),
            "-n",
            str(QUESTIONS),
            "-O",
            "json",
            address,
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=900,
    )
    report = json.loads(out.stdout)
    p50 = next((d["latency"] for d in report.get("latencyDistribution") or [] if d["percentage"] == 50), 0)
    return float(report["rps"]), p50 / 1e6


def write_one(address: str, thing: str) -> None:
    with grpc.insecure_channel(address) as channel:
        stub = g.MemoryServiceStub(channel)
        for _ in range(20):
            req = s.AddMemoryRequest(content=f"note {uuid.uuid4().hex} about the {thing}")
            if stub.AddMemory(req).outcome == s.ADD_OUTCOME_CREATED:
                return
    raise RuntimeError("no AddMemory was created in 20 tries")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--address", required=True, help="comma-separated host:port of the servers")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("-c", "--concurrency", type=int, default=32)
    args = ap.parse_args()
    addresses = args.address.split(",")
    rps: dict[str, list[float]] = {a: [] for a in addresses}
    for r in range(args.rounds):
        thing = f"{THINGS[r % len(THINGS)]} {r}"
        question = f"what did person {{{{.RequestNumber}}}} write about the {thing}"
        for address in random.Random(r).sample(addresses, len(addresses)):
            ghz(address, {"query": question, "limit": 10, "filter": {"min_importance": 1}}, args.concurrency)
            write_one(address, thing)
            got, p50 = ghz(address, {"query": question, "limit": 10}, args.concurrency)
            rps[address].append(got)
            print(f"{address} round {r + 1}: {got:.1f} RPS, p50 {p50:.1f} ms", flush=True)
    for address, runs in rps.items():
        print(f"{address}: mean {sum(runs) / len(runs):.1f} RPS over {len(runs)} rounds")


if __name__ == "__main__":
    main()
