"""Load tests with ghz against a real Engram server (`make load`).

    .venv/bin/python bench/load.py                         # start a server on the embedded defaults
    .venv/bin/python bench/load.py --address host:50051    # any running deployment (plaintext)

Installs ghz (pinned) into .tools/go/bin with `go install` if it is not there, starts
`python -m engram_server serve` on a fresh data directory (unless --address is given), seeds a
corpus through the API, then runs ghz scenarios — AddMemory, SearchMemories with unique queries,
SearchMemories with one repeated query (the query-embedding and candidate caches), SearchMemories
with known questions (each asked once in an untimed pass before with a filter that keeps every
memory, then one AddMemory, then unfiltered: every question's embedding is cached and its candidates
come from storage, the storage-bound path), 200 questions asked once, then one AddMemory, then again
(each answered by patching its kept nearest list with the point written, "search-after-write"), and a mixed
workload (AddMemory, new questions and a repeated question side by side, 1 : 2 : 5) — at several
concurrencies. ghz finds the API by server reflection. Every ghz JSON report and one
Markdown summary (RPS, p50/p95/p99, status codes) go to results/load/. When it starts the server
(or with --model-rate) it measures the local model's own batch throughput in this process, on the
same machine, right before each add / search-unique scenario and after each of its rounds
(``--rounds``, default 1), and reports the scenario's RPS as a ratio to it (÷ model: a round's RPS
over the mean of the measurements on its two sides; the median of the rounds'). The model alone is
run both ways it can go: one batch at a time on every core, and one batch per embedding worker at
once (``ENGRAM_LOCAL_EMBED_WORKERS``); the faster is the reference.
With the server's process id (known when it starts the server; ``--server-pid`` otherwise; Linux),
each scenario's row also splits the server's CPU per request among its threads, read from
``/proc/PID/task/*/stat`` around the ghz run: the event loop (gRPC, the servicer, ranking), the
storage thread, the embedding model's threads, and the rest (gRPC's poller, the index builder…).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import socket
import statistics
import string
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
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
# Questions asked once before (embeddings cached), each once per run: the storage-bound path. The
# first pass asks them with a filter that keeps every memory: a filtered search keeps no nearest
# list (embedded storage), and its candidate lists are cached under another key.
KNOWN_SEARCH_DATA = '{"query": "what did person {{.RequestNumber}} write about the tax return", "limit": 10}'
KNOWN_FIRST_DATA = (
    '{"query": "what did person {{.RequestNumber}} write about the tax return", "limit": 10,'
    ' "filter": {"min_importance": 1}}'
)
# Fewer questions asked once before, asked again after one write: within the server's caches, so
# each is answered by patching its kept nearest list with the point written (embedded storage).
AFTER_WRITE_SEARCH_DATA = '{"query": "what did person {{.RequestNumber}} say about the garden", "limit": 10}'
AFTER_WRITE_QUESTIONS = 200
PEOPLE = ["Alice", "Bruno", "Chen Wei", "Dara", "Emeka", "Fatima", "Gustav", "Hana"]


@dataclass
class Scenario:
    name: str
    call: str
    data: str
    concurrency: int
    total: int
    #: Asked once, untimed, before the timed run (the same questions; ``data`` when None).
    first_data: str | None = None


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


def invalidate(address: str) -> None:
    """One AddMemory that writes (the gate refuses near-copies of earlier ones: vary the text until
    one is created): the collection changed, so no candidate list cached before is used again."""
    rng = random.Random(time.time_ns())
    with grpc.insecure_channel(address) as channel:
        stub = memory_service_pb2_grpc.MemoryServiceStub(channel)
        for _ in range(20):
            who, what = rng.choice(PEOPLE), rng.choice(TOPICS)
            text = f"{who} moved {what} to {rng.choice(string.ascii_uppercase)}{rng.randrange(10**6)}"
            r = stub.AddMemory(s.AddMemoryRequest(content=text), timeout=60)
            if r.outcome == s.ADD_OUTCOME_CREATED:
                return
    raise RuntimeError("no AddMemory was created in 20 tries: cached candidate lists may be reused")


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


def run_ghz(ghz: Path, address: str, sc: Scenario, out: Path, suffix: str = "") -> dict[str, Any]:
    report = out / f"{sc.name}-c{sc.concurrency}{suffix}.json"
    subprocess.run(ghz_command(ghz, address, sc, report), check=True, timeout=900)
    data: dict[str, Any] = json.loads(report.read_text())
    return data


#: Thread groups of the server's CPU split (see ``engram_server.threads`` for the OS names).
CPU_GROUPS = ("loop", "storage", "model", "other")


class ThreadCpu:
    """CPU time of a server process's threads by group, from ``/proc/PID/task/*/stat`` (Linux).
    The event loop is the main thread (its id is the process id); the others are told by the OS
    names the server gives its workers (``engram-edge-io``, ``engram-model``, inherited by the
    model's OpenMP threads) and the embedded engine its own (``edge-…``); gRPC's threads are among
    the rest. Threads that end between two readings are not counted."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._tick = float(os.sysconf("SC_CLK_TCK"))

    def _group(self, tid: int, comm: str) -> str:
        if tid == self.pid:
            return "loop"
        if comm.startswith(("engram-edge-io", "engram-optimize", "edge-")):  # edge-: the engine's
            return "storage"
        if comm.startswith("engram-model"):
            return "model"
        return "other"

    def read(self) -> dict[int, tuple[str, float]]:
        """{thread id: (group, CPU seconds so far)}."""
        out: dict[int, tuple[str, float]] = {}
        task = Path(f"/proc/{self.pid}/task")
        for d in task.iterdir():
            try:
                comm = (d / "comm").read_text().strip()
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:  # ended meanwhile
                continue
            tid = int(d.name)
            out[tid] = (self._group(tid, comm), (int(fields[11]) + int(fields[12])) / self._tick)
        return out

    @staticmethod
    def spent(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]) -> dict[str, float]:
        """CPU seconds per group between two readings."""
        out = dict.fromkeys(CPU_GROUPS, 0.0)
        for tid, (group, cpu) in after.items():
            out[group] += cpu - (before[tid][1] if tid in before else 0.0)
        return out


def merge_reports(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """One report of several ghz runs of a scenario (run one after the other): requests over the
    sum of their durations, latency percentiles over every request, status codes added up."""
    if len(reports) == 1:
        return reports[0]
    details = [d for rep in reports for d in rep.get("details") or []]
    latencies = sorted(int(d["latency"]) for d in details)
    count = sum(int(rep.get("count", 0)) for rep in reports)
    total_ns = sum(float(rep.get("total", 0)) for rep in reports)
    codes: dict[str, int] = {}
    for rep in reports:
        for code, n in (rep.get("statusCodeDistribution") or {}).items():
            codes[code] = codes.get(code, 0) + int(n)

    def pct(p: int) -> int:
        return (
            latencies[min(len(latencies) - 1, max(0, -(-p * len(latencies) // 100) - 1))] if latencies else 0
        )

    return {
        "count": count,
        "rps": count / (total_ns / 1e9) if total_ns else 0.0,
        "latencyDistribution": [{"percentage": p, "latency": pct(p)} for p in (50, 95, 99)],
        "statusCodeDistribution": codes,
    }


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


#: The server's largest embedding batch (ENGRAM_EMBED_BATCH_MAX's default): the model alone is
#: measured in batches of min(concurrency, this), as large as the server's can be.
MODEL_BATCH = 32

#: Scenarios whose every request embeds one new text, and the model path it takes.
EMBEDS = {"add": "documents", "search-unique": "queries"}


def summary_row(
    sc: Scenario,
    rep: dict[str, Any],
    model_rates: list[float] | None = None,
    ratios: list[float] | None = None,
    cpu: dict[str, float] | None = None,
) -> str:
    """One row of the summary; ``model_rates``: the model's throughput measured around the
    scenario's rounds; ``ratios``: each round's RPS over the mean of the model rates on its two
    sides (the median is reported, with the range when there are several); ``cpu``: the server's
    CPU seconds by thread group over the scenario's requests."""
    dist = {d["percentage"]: d["latency"] for d in rep.get("latencyDistribution") or []}
    ms = {p: (dist.get(p, 0) or 0) / 1e6 for p in (50, 95, 99)}
    codes = ", ".join(f"{k}: {v}" for k, v in (rep.get("statusCodeDistribution") or {}).items())
    rps = float(rep.get("rps", 0))
    rate, ratio = "", ""
    if model_rates and ratios:
        rate = " / ".join(f"{r:.1f}" for r in model_rates)
        ratio = f"{statistics.median(ratios):.2f}"
        if len(ratios) > 1:
            ratio += f" ({min(ratios):.2f}–{max(ratios):.2f})"
    split = ""
    count = int(rep.get("count") or 0)
    if cpu is not None and count:
        split = " / ".join(f"{cpu[g] / count * 1000:.1f}" for g in CPU_GROUPS)
    return (
        f"| {sc.name} | {sc.concurrency} | {rep.get('count')} | {rps:.0f} | {rate} | {ratio} | "
        f"{ms[50]:.1f} | {ms[95]:.1f} | {ms[99]:.1f} | {split} | {codes} |"
    )


class ModelRate:
    """The local model's own batch throughput (texts/s), measured in this process while the server
    is idle, on texts shaped like the scenarios' (a passage per AddMemory, a query per new
    question), in batches as large as the scenario's concurrency allows the server's (at most 32,
    ENGRAM_EMBED_BATCH_MAX's default): what the server's throughput is compared with. Measured
    right before each scenario it is compared with and after each of its rounds — this machine's
    speed drifts by tens of percent within minutes, so a figure from the start of the run would
    not do, and one taken on a single side of a scenario can be off by 10–15 %."""

    def __init__(self, seconds: float) -> None:
        from engram_server.adapters.embedding.local import LocalE5Embedder  # noqa: PLC0415

        self._loop = asyncio.new_event_loop()
        # The model as it comes, its calls not cut in chunks: one instance (every core), and the
        # server's pool of instances.
        self._one = LocalE5Embedder(workers=1, chunk=None)
        self._model = LocalE5Embedder(chunk=None)
        for model in (self._one, self._model):
            self._loop.run_until_complete(model.warm_up())
        self._seconds = seconds
        self._rng = random.Random(7)
        self._i = 0
        self.last = (0.0, 0.0)

    def _text(self, kind: str) -> str:
        self._i += 1
        word = "".join(
            self._rng.choice(string.ascii_letters) for _ in range(12 if kind == "documents" else 6)
        )
        if kind == "documents":
            return f"load test note {self._i} {word} at {int(time.time())}"
        return f"what did {word} write about taxes {self._i}"

    def measure(self, kind: str, batch: int) -> float:
        """The better of two ways to run the model alone (``last`` keeps both): one batch of
        ``batch`` texts at a time, on every core; and as many batches at once as the embedder has
        workers (``ENGRAM_LOCAL_EMBED_WORKERS``) and texts in ``batch``, the texts split among them —
        how the server runs it under load. The stricter reference is the one the server is compared with."""

        async def run(at_once: int, size: int) -> float:
            model = self._one if at_once == 1 else self._model
            embed = model.embed_documents if kind == "documents" else model.embed_queries
            await asyncio.gather(*(embed([self._text(kind) for _ in range(size)]) for _ in range(at_once)))
            done, start = 0, time.perf_counter()

            async def one() -> None:
                nonlocal done
                while time.perf_counter() - start < self._seconds / 2:
                    await embed([self._text(kind) for _ in range(size)])
                    done += size

            await asyncio.gather(*(one() for _ in range(at_once)))
            return done / (time.perf_counter() - start)

        at_once = min(self._model.workers, batch)  # (no more calls at once than the requests)
        alone = self._loop.run_until_complete(run(1, batch))
        side_by_side = self._loop.run_until_complete(run(at_once, batch // at_once)) if at_once > 1 else alone
        self.last = (alone, side_by_side)
        return max(alone, side_by_side)

    def describe(self) -> str:
        alone, side_by_side = self.last
        return f"(one batch at a time {alone:.1f}, {self._model.workers} at once {side_by_side:.1f})"

    def close(self) -> None:
        for model in (self._one, self._model):
            self._loop.run_until_complete(model.close())
        self._loop.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--address", help="load an existing server instead of starting one")
    ap.add_argument("--seed", type=int, default=1000, help="memories to seed before the scenarios")
    ap.add_argument("--concurrency", default="1,8,32", help="comma-separated concurrencies")
    ap.add_argument("--requests", type=int, default=400, help="requests per scenario and concurrency")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "load")
    ap.add_argument(
        "--model-rate",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also measure the local model's own batch throughput here, for the ÷ model column "
        "(default: on when this script starts the server, off with --address)",
    )
    ap.add_argument("--model-seconds", type=float, default=10.0, help="seconds per model-rate measurement")
    ap.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="with the model rate: run each add / new-question scenario this many times (--requests "
        "each), the model measured between them; the ratio is the median of the rounds'",
    )
    ap.add_argument(
        "--server-pid",
        type=int,
        help="with --address: the server's process id on this machine, for the CPU split by thread",
    )
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
    pid = proc.pid if proc is not None else args.server_pid
    threads = ThreadCpu(pid) if pid is not None and Path(f"/proc/{pid}/task").is_dir() else None

    def measured(sc: Scenario, suffix: str = "") -> tuple[dict[str, Any], dict[str, float] | None]:
        before = threads.read() if threads is not None else None
        rep = run_ghz(ghz, address, sc, args.out, suffix)
        if threads is None or before is None:
            return rep, None
        return rep, ThreadCpu.spent(before, threads.read())

    try:
        t0 = time.perf_counter()
        created = seed(address, args.seed)
        print(f"seeded {created} of {args.seed} memories in {time.perf_counter() - t0:.1f} s", flush=True)
        meter: ModelRate | None = None
        if args.model_rate if args.model_rate is not None else args.address is None:
            meter = ModelRate(args.model_seconds)
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
                Scenario(
                    "search-known",
                    f"{SERVICE}/SearchMemories",
                    KNOWN_SEARCH_DATA,
                    c,
                    args.requests,
                    KNOWN_FIRST_DATA,
                ),
                Scenario(
                    "search-after-write",
                    f"{SERVICE}/SearchMemories",
                    AFTER_WRITE_SEARCH_DATA,
                    c,
                    AFTER_WRITE_QUESTIONS,
                ),
            ]
            for sc in scenarios:
                if sc.name in ("search-known", "search-after-write"):
                    print(f"ghz {sc.name} at concurrency {c}: asking the questions once …", flush=True)
                    first = sc if sc.first_data is None else replace(sc, data=sc.first_data)
                    run_ghz(ghz, address, first, args.out, "-first")
                    invalidate(address)
                if meter is None or sc.name not in EMBEDS:
                    print(f"ghz {sc.name} at concurrency {c} …", flush=True)
                    rep, cpu = measured(sc)
                    rows.append(summary_row(sc, rep, cpu=cpu))
                    continue
                # The model alone before the first round and after every round; each round's
                # ratio is over the mean of the measurements on its two sides.
                kind, batch = EMBEDS[sc.name], min(c, MODEL_BATCH)
                rates = [meter.measure(kind, batch)]
                print(f"the model alone: {rates[-1]:.1f} {kind}/s {meter.describe()}", flush=True)
                reports, ratios = [], []
                spent: dict[str, float] | None = dict.fromkeys(CPU_GROUPS, 0.0) if threads else None
                for r in range(args.rounds):
                    print(f"ghz {sc.name} at concurrency {c}, round {r + 1} of {args.rounds} …", flush=True)
                    suffix = f"-r{r + 1}" if args.rounds > 1 else ""
                    rep, cpu = measured(sc, suffix)
                    reports.append(rep)
                    if spent is not None and cpu is not None:
                        spent = {g: spent[g] + cpu[g] for g in CPU_GROUPS}
                    rates.append(meter.measure(kind, batch))
                    print(f"the model alone: {rates[-1]:.1f} {kind}/s {meter.describe()}", flush=True)
                    ratios.append(float(reports[-1].get("rps", 0)) / ((rates[-2] + rates[-1]) / 2))
                rows.append(summary_row(sc, merge_reports(reports), rates, ratios, spent))
            together = mixed(c, args.requests)
            print(
                f"ghz mixed workload at concurrency {c} ({', '.join(x.name for x in together)}) …", flush=True
            )
            for sc, rep in zip(together, run_together(ghz, address, together, args.out, c), strict=True):
                rows.append(summary_row(sc, rep))
        header = [
            f"# Engram load test ({time.strftime('%Y-%m-%d %H:%M')}, {address}, {created} seeded memories)",
            "",
            "| scenario | concurrency | requests | RPS | model texts/s | ÷ model | p50 ms | p95 ms | p99 ms "
            "| server CPU ms/request: loop / storage / model / other | status codes |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        if threads is not None:
            header[1:1] = [
                "",
                "server CPU ms/request: the server process's CPU time over the scenario's requests "
                "(all its rounds), by thread — the event loop (gRPC, servicer, ranking), the storage "
                "thread, the embedding model's threads, and the rest; not measured for the mixed "
                "workload's scenarios, which run together.",
            ]
        if meter is not None:
            header[1:1] = [
                "",
                "model texts/s: the local model's own batch throughput (server idle; batches of "
                "min(concurrency, 32), as large as the server's can be), "
                "measured in the load process just before the scenario and after each of its rounds "
                "(--rounds), on texts of the same shape; ÷ model: a round's RPS over the mean of the "
                "measurements on its two sides (each of its requests embeds one new text), the median "
                "of the rounds' (range in brackets).",
            ]
        summary = "\n".join(header + rows) + "\n"
        (args.out / "summary.md").write_text(summary)
        print(summary)
    finally:
        if meter is not None:
            meter.close()
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=60)
        tmp.cleanup()


if __name__ == "__main__":
    main()
