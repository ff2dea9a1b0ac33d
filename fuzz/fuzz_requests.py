"""Coverage-guided fuzzing (atheris / libFuzzer) of request parsing, conversion and validation.

Each input picks an RPC (first byte) and is parsed as that RPC's request message (the rest);
the message goes through the real servicer — proto → domain conversion, domain validation and
the error mapping — with storage and embedding ports that stop the call as soon as validation
has passed. The only acceptable endings are a rich error whose status is not INTERNAL/UNKNOWN,
or reaching the ports. Anything else (an INTERNAL status, an unexpected exception) is a bug and
crashes the fuzzer with the input saved.

    .venv/bin/python fuzz/fuzz_requests.py -max_total_time=60        # run for a minute
    .venv/bin/python fuzz/fuzz_requests.py crash-<hash>                # replay a crash
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import atheris  # type: ignore[import-untyped]

with atheris.instrument_imports():
    import grpc
    from google.protobuf.message import DecodeError

    from engram_client.proto.engram.v1 import memory_service_pb2 as s
    from engram_server.api.servicer import MemoryServicer
    from engram_server.domain.calibration import calibration_for
    from engram_server.domain.clock import ManualClock
    from engram_server.domain.reflection import Reflector
    from engram_server.domain.service import MemoryService

from google.rpc import error_details_pb2, status_pb2

from engram_client.proto.engram.v1 import error_reason_pb2
from engram_server.adapters.tokenizer import E5Tokenizer

RPCS: list[tuple[str, Any]] = [
    ("AddMemory", s.AddMemoryRequest),
    ("AddMemories", s.AddMemoriesRequest),
    ("SearchMemories", s.SearchMemoriesRequest),
    ("UpdateMemory", s.UpdateMemoryRequest),
    ("DeleteMemory", s.DeleteMemoryRequest),
    ("GetMemory", s.GetMemoryRequest),
    ("ListMemories", s.ListMemoriesRequest),
    ("ListCollections", s.ListCollectionsRequest),
    ("DeleteCollection", s.DeleteCollectionRequest),
    ("RunReflection", s.RunReflectionRequest),
    ("ListGateDecisions", s.ListGateDecisionsRequest),
    ("ListReflectionRuns", s.ListReflectionRunsRequest),
    ("ExtractMemories", s.ExtractMemoriesRequest),
    ("ListTrash", s.ListTrashRequest),
    ("RestoreMemory", s.RestoreMemoryRequest),
    ("PurgeTrash", s.PurgeTrashRequest),
    ("RestoreCollection", s.RestoreCollectionRequest),
    ("GetContext", s.GetContextRequest),
    ("GetTriggers", s.GetTriggersRequest),
    ("ListSlots", s.ListSlotsRequest),
    ("UpdateSlot", s.UpdateSlotRequest),
    ("RunConsolidation", s.RunConsolidationRequest),
    ("ExportMemories", s.ExportMemoriesRequest),  # (server stream)
    ("ImportMemories", s.ImportMemoriesRequest),  # (client stream: the input is its one message)
    ("BackupStore", s.BackupStoreRequest),
    ("ListTopics", s.ListTopicsRequest),
    ("GetTopic", s.GetTopicRequest),
]
BAD_CODES = {grpc.StatusCode.INTERNAL.value[0], grpc.StatusCode.UNKNOWN.value[0]}
#: Every refusal names its reason: an ErrorInfo detail whose reason is one of the proto's ErrorReason.
REASONS = frozenset(error_reason_pb2.ErrorReason.keys()) - {"ERROR_REASON_UNSPECIFIED"}


class Reached(BaseException):
    """Validation passed and the call reached a port."""


class Ports:
    """Store + Embedder + Llm stand-ins: any use means validation let the request through."""

    model_id = "fuzz/model"
    dimension = 8

    def __getattr__(self, name: str) -> Any:
        async def reached(*_: Any, **__: Any) -> Any:
            raise Reached(name)

        return reached


class Aborted(Exception):
    def __init__(self, status: Any) -> None:
        super().__init__(status.details)
        self.status = status


class Context:
    def time_remaining(self) -> float | None:
        return None

    async def abort_with_status(self, status: Any) -> None:
        raise Aborted(status)


PORTS = Ports()
SERVICE = MemoryService(PORTS, PORTS, ManualClock(), calibration_for("fuzz/model"), tokenizer=E5Tokenizer())
#: Backups through the API on, into a directory of its own (nothing is written there: the store's
#: backup is a port), so the directory checks are fuzzed too.
BACKUP_DIR = Path(tempfile.mkdtemp(prefix="engram-fuzz-backups-"))
SERVICER = MemoryServicer(SERVICE, Reflector(SERVICE, PORTS), backup_dir=BACKUP_DIR)
LOOP = asyncio.new_event_loop()


async def _call(name: str, request: Any) -> None:
    handler = getattr(SERVICER, name)
    if name == "ExportMemories":
        async for _ in handler(request, Context()):
            pass
    elif name == "ImportMemories":

        async def stream() -> AsyncIterator[Any]:
            yield request

        await handler(stream(), Context())
    else:
        await handler(request, Context())


def reason_of(status: Any) -> str:
    """The ErrorInfo reason in a grpc.Status's rich details ("" if none)."""
    for key, value in status.trailing_metadata or ():
        if key == "grpc-status-details-bin":
            for detail in status_pb2.Status.FromString(value).details:
                if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                    info = error_details_pb2.ErrorInfo()
                    detail.Unpack(info)
                    return info.reason
    return ""


def test_one_input(data: bytes) -> None:
    if not data:
        return
    name, message_type = RPCS[data[0] % len(RPCS)]
    try:
        request = message_type.FromString(data[1:])
    except DecodeError:
        return
    try:
        LOOP.run_until_complete(_call(name, request))
    except Reached:
        return
    except Aborted as exc:
        if exc.status.code.value[0] in BAD_CODES:
            raise AssertionError(f"{name} answered {exc.status.code} for {request!r}") from exc
        if reason_of(exc.status) not in REASONS:
            raise AssertionError(
                f"{name} answered {exc.status.code} without a machine-readable reason "
                f"({reason_of(exc.status)!r}) for {request!r}"
            ) from exc


def seeds() -> list[bytes]:
    """Valid requests of every RPC, so mutation starts from messages that parse."""
    from google.protobuf import timestamp_pb2  # noqa: PLC0415

    from engram_client.proto.engram.v1 import memory_pb2 as m  # noqa: PLC0415

    ts = timestamp_pb2.Timestamp(seconds=1_767_000_000)
    requests: list[Any] = [
        s.AddMemoryRequest(
            content="I prefer dark mode.", collection="c1", type=m.MEMORY_TYPE_DIRECTIVE, importance=7,
            tags=["ui", "permanent"], source=m.SOURCE_USER, source_type=m.SOURCE_TYPE_USER_INPUT,
            metadata={"k": "v"}, created_at=ts, valid_until=timestamp_pb2.Timestamp(seconds=1_999_000_000),
            request_id="r1",
        ),
        s.AddMemoriesRequest(
            collection="c1",
            memories=[
                s.NewMemory(content="I prefer dark mode.", type=m.MEMORY_TYPE_DIRECTIVE, importance=7,
                            tags=["ui"], metadata={"k": "v"}, created_at=ts, request_id="r2"),
                s.NewMemory(content="Lunch with Sam on Friday."),
            ],
        ),
        s.SearchMemoriesRequest(
            query="dark mode", collections=["c1", "c2"], limit=7, diversify=True, mmr_lambda=0.4,
            min_relevance=0.2, weights=m.RankingWeights(relevance=1, recency=0.5, importance=0.3),
            filter=m.MemoryFilter(types=[m.MEMORY_TYPE_EVENT], tags_any=["x"], created_after=ts,
                                  created_before=timestamp_pb2.Timestamp(seconds=1_800_000_000),
                                  min_importance=3, source_types=[m.SOURCE_TYPE_DOCUMENT]),
        ),
        s.UpdateMemoryRequest(id="0b7e2c9e-3f7a-4c1e-9a53-0c2f7d1e8a11", content="new", importance=4,
                              tags=s.StringList(values=["a"]), metadata=s.StringMap(entries={"a": "b"})),
        s.UpdateMemoryRequest(locate=s.SemanticLocator(content="old", threshold=0.9), content="new",
                              dry_run=True, type=m.MEMORY_TYPE_INSIGHT),
        s.DeleteMemoryRequest(id="0b7e2c9e-3f7a-4c1e-9a53-0c2f7d1e8a11", force=True),
        s.DeleteMemoryRequest(query=s.DeleteQuery(query="lunch", threshold=0.9, limit=3), dry_run=True),
        s.GetMemoryRequest(id="0b7e2c9e-3f7a-4c1e-9a53-0c2f7d1e8a11", include_history=True),
        s.ListMemoriesRequest(collection="c1", page_size=50, page_token="abc", include_history=True),
        s.ListCollectionsRequest(),
        s.DeleteCollectionRequest(name="c1"),
        s.RunReflectionRequest(collection="c1", dry_run=True, force=True),
        s.ListGateDecisionsRequest(collection="c1", limit=20),
        s.ListReflectionRunsRequest(collection="c1", limit=5),
        s.ExtractMemoriesRequest(collection="c1", text="I moved to Berlin. 我喜欢喝茶。", mode=1,
                                 dry_run=True, tags=["t"]),
        s.ListTrashRequest(collection="c1", page_size=10, page_token="abc"),
        s.RestoreMemoryRequest(collection="c1", id="0b7e2c9e-3f7a-4c1e-9a53-0c2f7d1e8a11"),
        s.PurgeTrashRequest(collection="c1", ids=["0b7e2c9e-3f7a-4c1e-9a53-0c2f7d1e8a11"]),
        s.PurgeTrashRequest(collection="c1", purge_collection=True),
        s.RestoreCollectionRequest(name="c1"),
        s.GetContextRequest(collections=["c1"], query="deploy", token_budget=500, since=ts, session_id="s1",
                            agent_id="a1"),
        s.GetTriggersRequest(collections=["c1"], action="git push --force", limit=5),
        s.ListSlotsRequest(collection="c1"),
        s.UpdateSlotRequest(collection="c1", name="persona", content="Terse answers.", mode=2),
        s.RunConsolidationRequest(collection="c1", dry_run=True, force=True),
        s.ExportMemoriesRequest(collections=["c1"], filter=m.MemoryFilter(min_importance=3),
                                include_vectors=True, live_only=True),
        s.ImportMemoriesRequest(data=b'{"engram_export": 1}\n', mode=2, reembed=1, collection="c2"),
        s.BackupStoreRequest(directory=str(BACKUP_DIR / "b1")),
        s.ListTopicsRequest(collection="c1", parent_id="t1", page_size=10, page_token="abc"),
        s.GetTopicRequest(collection="c1", id="t1", page_size=10, page_token="abc"),
    ]  # fmt: skip
    index = {message_type: i for i, (_, message_type) in enumerate(RPCS)}
    return [bytes([index[type(r)]]) + r.SerializeToString() for r in requests]


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
