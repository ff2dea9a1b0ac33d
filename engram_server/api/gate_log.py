"""The write gate's recent decisions, per collection, in memory (``ListGateDecisions``).

The servicer records each AddMemory / AddMemories outcome as it answers it; the console shows them.
Bounded (the last :data:`PER_COLLECTION` per collection, :data:`MAX_COLLECTIONS` collections, least
recently written dropped first), process-local, and forgetful on purpose: deleting a memory drops
the decisions about it, deleting a collection drops its log.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable

from engram_client.proto.engram.v1 import memory_service_pb2 as s

PER_COLLECTION = 256
MAX_COLLECTIONS = 1024
DEFAULT_LIMIT = 50


class GateLog:
    def __init__(self, per_collection: int = PER_COLLECTION, max_collections: int = MAX_COLLECTIONS) -> None:
        self._per_collection = per_collection
        self._max_collections = max_collections
        self._logs: OrderedDict[str, deque[s.GateDecision]] = OrderedDict()

    def record(self, decision: s.GateDecision, collection: str) -> None:
        log = self._logs.get(collection)
        if log is None:
            log = self._logs[collection] = deque(maxlen=self._per_collection)
            while len(self._logs) > self._max_collections:
                self._logs.popitem(last=False)
        self._logs.move_to_end(collection)
        log.append(decision)

    def recent(self, collection: str, limit: int) -> list[s.GateDecision]:
        log = self._logs.get(collection, ())
        return list(reversed(log))[: limit or DEFAULT_LIMIT]

    def forget_memories(self, ids: Iterable[str]) -> None:
        gone = set(ids)
        if not gone:
            return
        for name, log in self._logs.items():
            if any(d.memory_id in gone for d in log):
                self._logs[name] = deque(
                    (d for d in log if d.memory_id not in gone), maxlen=self._per_collection
                )

    def forget_collection(self, collection: str) -> None:
        self._logs.pop(collection, None)


def decision_from(result: s.AddMemoryResponse | s.AddMemoryResult, content: str) -> s.GateDecision:
    decision = s.GateDecision(
        outcome=result.outcome,
        content=content,
        memory_id=result.memory.id,
        duplicate_similarity=result.duplicate_similarity,
        near_duplicates=result.near_duplicates,
        replayed=result.replayed,
    )
    decision.decided_at.GetCurrentTime()
    return decision
