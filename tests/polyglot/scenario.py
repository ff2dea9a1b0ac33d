"""The Python runner of the shared contract scenarios (clients/scenarios/*.json).

It drives a live server through the generated stubs (`engram_client.proto`), turns every
response or error into a canonical *observation*, checks each step's `expect` against it and
returns the transcript. The Go (clients/go/contract) and TypeScript (clients/ts/test) runners
implement the same rules; tests/polyglot/test_polyglot.py compares the three transcripts.

Rules shared by the three runners:
- a request is the proto3 JSON mapping of the request message, with proto field names;
  a string "$name" anywhere in it is replaced by the id captured under `name`;
- `capture` names the id of the step's `memory` (AddMemory, UpdateMemory, GetMemory), or of the
  first topic (ListTopics), or, for ExportMemories (server-streaming), the exported file as base64
  (the proto3 JSON form of `bytes`), so that an ImportMemories step (client-streaming, sent as
  one message) can take it as its `data`;
- ids in observations are replaced by their captured names ("?" if never captured);
- `expect` must be a subset of the observation: objects compare the listed keys only,
  arrays compare length and then element by element, scalars compare equal.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import json_format
from google.protobuf.message import Message
from google.rpc import code_pb2, error_details_pb2, status_pb2

from engram_client.proto.engram.v1 import memory_pb2, memory_service_pb2, memory_service_pb2_grpc

ROOT = Path(__file__).resolve().parents[2]
SCENARIO_DIR = ROOT / "clients" / "scenarios"
DETAILS_KEY = "grpc-status-details-bin"

REQUEST_TYPES: dict[str, type[Message]] = {
    "AddMemory": memory_service_pb2.AddMemoryRequest,
    "SearchMemories": memory_service_pb2.SearchMemoriesRequest,
    "UpdateMemory": memory_service_pb2.UpdateMemoryRequest,
    "DeleteMemory": memory_service_pb2.DeleteMemoryRequest,
    "GetMemory": memory_service_pb2.GetMemoryRequest,
    "ListMemories": memory_service_pb2.ListMemoriesRequest,
    "ListCollections": memory_service_pb2.ListCollectionsRequest,
    "DeleteCollection": memory_service_pb2.DeleteCollectionRequest,
    "ExtractMemories": memory_service_pb2.ExtractMemoriesRequest,
    "ListTrash": memory_service_pb2.ListTrashRequest,
    "RestoreMemory": memory_service_pb2.RestoreMemoryRequest,
    "PurgeTrash": memory_service_pb2.PurgeTrashRequest,
    "RestoreCollection": memory_service_pb2.RestoreCollectionRequest,
    "GetContext": memory_service_pb2.GetContextRequest,
    "GetTriggers": memory_service_pb2.GetTriggersRequest,
    "ListSlots": memory_service_pb2.ListSlotsRequest,
    "UpdateSlot": memory_service_pb2.UpdateSlotRequest,
    "RunConsolidation": memory_service_pb2.RunConsolidationRequest,
    "ListTopics": memory_service_pb2.ListTopicsRequest,
    "GetTopic": memory_service_pb2.GetTopicRequest,
    "ExportMemories": memory_service_pb2.ExportMemoriesRequest,
    "ImportMemories": memory_service_pb2.ImportMemoriesRequest,
}


class ScenarioFailure(AssertionError):
    """A step's observation did not match its expectation."""


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((SCENARIO_DIR / f"{name}.json").read_text())
    return data


def substitute(value: Any, captured: dict[str, str]) -> Any:
    """Replace every "$name" string by the id captured under that name."""
    if isinstance(value, str) and value.startswith("$"):
        if value[1:] not in captured:
            raise ScenarioFailure(f"{value} was never captured")
        return captured[value[1:]]
    if isinstance(value, list):
        return [substitute(v, captured) for v in value]
    if isinstance(value, dict):
        return {k: substitute(v, captured) for k, v in value.items()}
    return value


class Observer:
    """Canonical observations, with ids replaced by their captured names."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}

    def name(self, memory_id: str) -> str:
        return self.names.get(memory_id, "?") if memory_id else ""

    def memory(self, m: memory_pb2.Memory) -> dict[str, Any]:
        return {
            "id": self.name(m.id),
            "collection": m.collection,
            "type": memory_pb2.MemoryType.Name(m.type),
            "content": m.content,
            "importance": m.importance,
            "tags": sorted(m.tags),
            "version": m.version,
            "source": memory_pb2.Source.Name(m.source),
            "source_type": memory_pb2.SourceType.Name(m.source_type),
            "superseded_by": self.name(m.superseded_by),
        }

    def ids(self, memories: list[memory_pb2.Memory]) -> dict[str, Any]:
        names = [self.name(m.id) for m in memories]
        return {"ids": names, "id_set": sorted(names), "top": names[0] if names else ""}

    def response(self, call: str, resp: Any) -> dict[str, Any]:
        if call == "AddMemory":
            return {
                "outcome": memory_service_pb2.AddOutcome.Name(resp.outcome),
                "memory": self.memory(resp.memory),
                "near_duplicates": [self.name(s.id) for s in resp.near_duplicates],
                "replayed": resp.replayed,
                "conflicts": [
                    {"memory": self.name(c.memory_id), "basis": c.basis, "superseded": c.superseded}
                    for c in resp.conflicts
                ],
            }
        if call == "SearchMemories":
            return self.ids([r.memory for r in resp.results])
        if call == "UpdateMemory":
            return {
                "memory": self.memory(resp.memory),
                "previous": self.memory(resp.previous),
                "changed": resp.changed,
                "dry_run": resp.dry_run,
            }
        if call == "DeleteMemory":
            return {"deleted": sorted(self.name(m.id) for m in resp.deleted), "dry_run": resp.dry_run}
        if call == "GetMemory":
            return {"memory": self.memory(resp.memory), "history": [self.memory(m) for m in resp.history]}
        if call == "ListMemories":  # storage order is not part of the contract
            return {"id_set": sorted(self.name(m.id) for m in resp.memories)}
        if call == "ListCollections":
            return {
                "collections": [
                    {"name": c.name, "memory_count": c.memory_count}
                    for c in sorted(resp.collections, key=lambda c: c.name)
                ]
            }
        if call == "DeleteCollection":
            return {"deleted_count": resp.deleted_count}
        if call == "ExtractMemories":  # extracted memories are never captured: no ids
            return {
                "extractor": memory_service_pb2.Extractor.Name(resp.extractor),
                "deduplicated": resp.deduplicated,
                "dry_run": resp.dry_run,
                "redactions": list(resp.redactions),
                "memories": [
                    {
                        "content": x.content,
                        "type": memory_pb2.MemoryType.Name(x.type),
                        "importance": x.importance,
                        "tags": sorted(x.tags),
                        "outcome": memory_service_pb2.AddOutcome.Name(x.result.outcome)
                        if x.HasField("result")
                        else "",
                    }
                    for x in resp.memories
                ],
            }
        if call == "ListTrash":
            return {"id_set": sorted(self.name(m.id) for m in resp.memories)}
        if call == "RestoreMemory":
            return {
                "memory": self.memory(resp.memory),
                "near_duplicates": [self.name(s.id) for s in resp.near_duplicates],
            }
        if call == "PurgeTrash":
            return {"purged_count": resp.purged_count}
        if call == "RestoreCollection":
            return {"name": resp.collection.name, "memory_count": resp.collection.memory_count}
        if call == "GetContext":  # the Markdown holds dates: its parts are compared instead
            return {
                "sections": [
                    {
                        "kind": memory_service_pb2.ContextSectionKind.Name(x.kind),
                        "ids": [self.name(i.memory.id) for i in x.items if i.memory.id],
                        "slots": [i.slot for i in x.items if i.slot],
                        "triggers": [i.trigger for i in x.items if i.trigger],
                    }
                    for x in resp.sections
                ],
                "token_budget": resp.token_budget,
                "within_budget": 0 < resp.tokens_used <= resp.token_budget,
                "tokenizer": resp.tokenizer,
                "since_source": memory_service_pb2.SinceSource.Name(resp.since_source),
                "last_session_id": resp.last_session_id,
            }
        if call == "GetTriggers":
            return {
                "action": resp.action,
                "matched": list(resp.matched),
                "ids": [self.name(m.id) for m in resp.memories],
            }
        if call == "ListSlots":
            return {"slots": [{"name": x.name, "content": x.content} for x in resp.slots]}
        if call == "UpdateSlot":
            return {
                "slot": {"name": resp.slot.name, "content": resp.slot.content},
                "compaction": memory_service_pb2.SlotCompaction.Name(resp.compaction),
            }
        if call == "RunConsolidation":
            return {
                "outcome": memory_service_pb2.ConsolidationOutcome.Name(resp.outcome),
                "memories_before": resp.memories_before,
                "memories_after": resp.memories_after,
                "clusters": [
                    {"sources": sorted(self.name(i) for i in c.source_ids), "merged_by": c.merged_by}
                    for c in resp.clusters
                ],
            }
        if call == "ListTopics":  # topic ids are minted by the server: observed by captured name
            return {
                "memory_count": resp.memory_count,
                "topic_count": resp.topic_count,
                "size_sum": sum(t.size for t in resp.topics),
                "first": self.name(resp.topics[0].id) if resp.topics else "",
            }
        if call == "GetTopic":  # which memories: ids are random, so ties in topic size order by chance
            return {
                "topic": {"id": self.name(resp.topic.id), "size": resp.topic.size},
                "all_on_page": len(resp.memories) == resp.topic.size and not resp.next_page_token,
            }
        if call == "ExportMemories":  # resp: the chunks, in order
            data = b"".join(c.data for c in resp)
            return {
                "memories_done": resp[-1].memories_done,
                "memories_total": resp[-1].memories_total,
                "lines": len([line for line in data.split(b"\n") if line.strip()]),
            }
        if call == "ImportMemories":
            return {
                "lines": resp.lines,
                "created": resp.created,
                "replaced": resp.replaced,
                "unchanged": resp.unchanged,
                "duplicates": resp.duplicates,
                "collections": sorted(resp.collections),
            }
        raise ScenarioFailure(f"unknown call {call}")

    def error(self, exc: grpc.RpcError) -> dict[str, Any]:
        code: grpc.StatusCode = exc.code()
        out: dict[str, Any] = {
            "code": code.name,
            "reason": "",
            "domain": "",
            "metadata": {},
            "field_violations": [],
        }
        for key, value in exc.trailing_metadata() or ():
            if key != DETAILS_KEY:
                continue
            status = status_pb2.Status.FromString(value)
            if code_pb2.Code.Name(status.code) != code.name:
                raise ScenarioFailure(f"google.rpc.Status code {status.code} differs from {code.name}")
            for detail in status.details:
                if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                    info = error_details_pb2.ErrorInfo()
                    detail.Unpack(info)
                    out["reason"], out["domain"] = info.reason, info.domain
                    out["metadata"] = {k: self.names.get(v, v) for k, v in sorted(info.metadata.items())}
                elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
                    bad = error_details_pb2.BadRequest()
                    detail.Unpack(bad)
                    out["field_violations"] = sorted({v.field for v in bad.field_violations})
        return {"error": out}


def mismatches(expected: Any, observed: Any, path: str = "$") -> list[str]:
    """Where `expected` is not a subset of `observed` (the shared matching rule)."""
    if isinstance(expected, dict):
        if not isinstance(observed, dict):
            return [f"{path}: expected an object, got {json.dumps(observed)}"]
        out: list[str] = []
        for key, value in expected.items():
            if key not in observed:
                out.append(f"{path}.{key}: missing")
            else:
                out.extend(mismatches(value, observed[key], f"{path}.{key}"))
        return out
    if isinstance(expected, list):
        if not isinstance(observed, list) or len(observed) != len(expected):
            return [f"{path}: expected {json.dumps(expected)}, got {json.dumps(observed)}"]
        return [
            m
            for i, (e, o) in enumerate(zip(expected, observed, strict=True))
            for m in mismatches(e, o, f"{path}[{i}]")
        ]
    if expected != observed or isinstance(expected, bool) != isinstance(observed, bool):
        return [f"{path}: expected {json.dumps(expected)}, got {json.dumps(observed)}"]
    return []


def run(scenario: dict[str, Any], address: str, timeout: float = 30.0) -> list[dict[str, Any]]:
    """Run every step against the server at `address`; raise ScenarioFailure on the first mismatch."""
    observer = Observer()
    captured: dict[str, str] = {}
    transcript: list[dict[str, Any]] = []
    with grpc.insecure_channel(address) as channel:
        stub = memory_service_pb2_grpc.MemoryServiceStub(channel)
        for step in scenario["steps"]:
            call: str = step["call"]
            request = json_format.ParseDict(substitute(step["request"], captured), REQUEST_TYPES[call]())
            method: Callable[..., Any] = getattr(stub, call)
            try:
                if call == "ExportMemories":
                    resp = list(method(request, timeout=timeout))
                elif call == "ImportMemories":
                    resp = method(iter([request]), timeout=timeout)
                else:
                    resp = method(request, timeout=timeout)
            except grpc.RpcError as exc:
                observed = observer.error(exc)
            else:
                if call == "ExportMemories" and "capture" in step:
                    data = b"".join(c.data for c in resp)
                    captured[step["capture"]] = base64.b64encode(data).decode()
                elif "capture" in step:
                    # A memory's id; for ListTopics the first (largest) topic's id.
                    got = resp.topics[0].id if call == "ListTopics" else resp.memory.id
                    captured[step["capture"]] = got
                    observer.names[got] = step["capture"]
                observed = observer.response(call, resp)
            transcript.append({"step": step["name"], "observed": observed})
            problems = mismatches(step["expect"], observed)
            if problems:
                raise ScenarioFailure(
                    f"step {step['name']!r}:\n  "
                    + "\n  ".join(problems)
                    + f"\nobserved: {json.dumps(observed)}"
                )
    return transcript
