"""Extraction precision and recall on labelled bilingual conversations.

Data: ``eval/extraction/conversations_v1.jsonl``: 42 conversations (21 English, 21 Chinese), each
with the facts a careful person would keep (none for small talk and pure questions). A fact is
written as a sentence plus ``keys``: the words any correct memory of it must contain. A proposed
memory is *correct* when it contains every key of at least one fact of its conversation
(case-insensitive); a fact is *found* when some proposal contains all its keys.

Each path runs through a live in-process server (embedded store, the real local model, real gRPC),
``ExtractMemories`` with ``dry_run`` (proposals only):

- ``rules``: no LLM configured; the rule-based extractor.
- ``llm-scripted``: the LLM path against a local server speaking the OpenAI wire protocol that
  answers each conversation with its labelled facts. This does NOT measure a model's quality: it
  measures what Engram's LLM path does with a perfect answer (request, schema, validation, privacy
  filter, cap) — anything below 1.0 is lost by Engram itself.
- ``llm-flaky``: the same server answering every third call with HTTP 429 (no retries): the rules
  must take over for those conversations, so recall stays between the two paths instead of
  dropping those conversations' facts.

    python -m eval.extraction_eval [--json results/extraction.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc
from engram_server.testing import running_server
from tests.support.wire import Recorded, Reply, WireServer

DATA = Path(__file__).resolve().parent / "extraction" / "conversations_v1.jsonl"


@dataclass(frozen=True)
class Conversation:
    id: str
    lang: str
    messages: list[dict[str, str]]
    facts: list[dict[str, Any]]


def load(path: Path = DATA) -> list[Conversation]:
    out = []
    for line in path.read_text().splitlines():
        if line.strip():
            d = json.loads(line)
            out.append(Conversation(d["id"], d["lang"], d["messages"], d["facts"]))
    return out


def matches(content: str, fact: dict[str, Any]) -> bool:
    folded = content.casefold()
    return all(str(k).casefold() in folded for k in fact["keys"])


@dataclass
class Score:
    proposals: int = 0
    correct: int = 0
    facts: int = 0
    found: int = 0
    fell_back: int = 0

    def add(self, conv: Conversation, contents: Sequence[str]) -> None:
        self.proposals += len(contents)
        self.correct += sum(any(matches(c, f) for f in conv.facts) for c in contents)
        self.facts += len(conv.facts)
        self.found += sum(any(matches(c, f) for c in contents) for f in conv.facts)

    @property
    def precision(self) -> float:
        return self.correct / self.proposals if self.proposals else 1.0

    @property
    def recall(self) -> float:
        return self.found / self.facts if self.facts else 1.0

    def row(self) -> dict[str, Any]:
        p, r = self.precision, self.recall
        f1 = 2 * p * r / (p + r) if p + r else 0.0
        return {
            "proposals": self.proposals,
            "correct": self.correct,
            "facts": self.facts,
            "found": self.found,
            "precision": round(p, 3),
            "recall": round(r, 3),
            "f1": round(f1, 3),
            "fell_back_to_rules": self.fell_back,
        }


def _request(conv: Conversation) -> s.ExtractMemoriesRequest:
    req = s.ExtractMemoriesRequest(dry_run=True)
    for m in conv.messages:
        req.conversation.messages.add(role=m["role"], content=m["content"])
    return req


def _chat(content: str) -> Reply:
    return Reply.of_json(
        200,
        {
            "id": "chatcmpl-eval",
            "object": "chat.completion",
            "created": 1_767_225_600,
            "model": "scripted",
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        },
    )


def oracle(convs: list[Conversation], *, fail_every: int = 0) -> Any:
    by_first = {c.messages[0]["content"]: c for c in convs}
    calls = [0]

    def handle(request: Recorded) -> Reply:
        calls[0] += 1
        if fail_every and calls[0] % fail_every == 0:
            return Reply.of_json(429, {"error": {"message": "Rate limit reached", "type": "rate_limit"}})
        text = request.json["messages"][1]["content"]
        conv = next(c for first, c in by_first.items() if first in text)
        memories = [
            {"content": f["fact"], "type": f["type"], "importance": 6, "tags": [], "message_index": 0}
            for f in conv.facts
        ]
        return _chat(json.dumps({"memories": memories}, ensure_ascii=False))

    return handle


async def run_path(convs: list[Conversation], stub: Any) -> dict[str, Score]:
    scores = {"all": Score(), "en": Score(), "zh": Score()}
    for conv in convs:
        resp = await stub.ExtractMemories(_request(conv))
        contents = [m.content for m in resp.memories]
        for key in ("all", conv.lang):
            scores[key].add(conv, contents)
            scores[key].fell_back += int(bool(resp.fallback_reason))
    return scores


async def evaluate(convs: list[Conversation]) -> dict[str, dict[str, Any]]:
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        async with running_server(Path(tmp) / "rules") as srv, grpc.aio.insecure_channel(srv.address) as ch:
            scores = await run_path(convs, memory_service_pb2_grpc.MemoryServiceStub(ch))
            results["rules"] = {k: v.row() for k, v in scores.items()}
        for name, fail_every in (("llm-scripted", 0), ("llm-flaky", 3)):
            wire = WireServer()
            wire.handler = oracle(convs, fail_every=fail_every)
            await wire.start()
            try:
                async with (
                    running_server(
                        Path(tmp) / name,
                        llm_base_url=wire.base_url,
                        llm_model="scripted",
                        llm_max_retries=0,
                        llm_timeout_seconds=10.0,
                    ) as srv,
                    grpc.aio.insecure_channel(srv.address) as ch,
                ):
                    scores = await run_path(convs, memory_service_pb2_grpc.MemoryServiceStub(ch))
                    results[name] = {k: v.row() for k, v in scores.items()}
            finally:
                await wire.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    convs = load(args.data)
    results = asyncio.run(evaluate(convs))
    n_facts = sum(len(c.facts) for c in convs)
    print(f"{len(convs)} conversations ({sum(c.lang == 'en' for c in convs)} en), {n_facts} labelled facts")
    print(f"{'path':14} {'subset':6} {'prop':>5} {'facts':>5} {'P':>6} {'R':>6} {'F1':>6} {'fallback':>8}")
    for path, rows in results.items():
        for subset, row in rows.items():
            print(
                f"{path:14} {subset:6} {row['proposals']:5} {row['facts']:5} {row['precision']:6.3f} "
                f"{row['recall']:6.3f} {row['f1']:6.3f} {row['fell_back_to_rules']:8}"
            )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
