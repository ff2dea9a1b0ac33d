"""The search's reads on a Qdrant server, sent as Qdrant's own gRPC messages and decoded straight
into Engram's values.

``AsyncQdrantClient`` with ``prefer_grpc`` already talks gRPC to the server, but for every call
it builds pydantic request models, converts them to protobuf messages (``RestToGrpc``), and
converts each response back into pydantic models (``GrpcToRest``: a ``ScoredPoint`` or
``Record`` per point, its payload as a dict): most of a search's own CPU on the server path.
:class:`RawPoints` sends the protobuf messages that qdrant-client ships (``qdrant_client.grpc``)
on the client's own channel (its ``grpc_points`` / ``grpc_collections`` stubs, so the API key,
TLS, headers, options and compression configured on the client apply unchanged) and reads the
responses directly: a hit becomes its id string, score, payload dict (only the fields asked for:
``with_payload`` include lists) and, when asked, a float32 vector, each read only where it is used.

Only the search's reads go this way (the candidate query, the winners' records, the cue fallback
and the collection list); writes, the write gate's neighbour lookups and administration keep
the client's own calls. The values are those the client's conversion gives (payload values by
``qdrant_client``'s own ``value_to_json``, ids as the server's UUID string or the number's
decimal string); tests/storage/test_qdrant_server_raw.py compares both paths on a real server.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import numpy as np
from qdrant_client import AsyncQdrantClient, models
from qdrant_client import grpc as qg
from qdrant_client.conversions.conversion import RestToGrpc, value_to_json

from engram_server.adapters.storage.payload import Condition, FilterPlan, IsEmpty, MatchAny, MatchValue, Range
from engram_server.domain.model import SparseVector, Vector

__all__ = [
    "DENSE_VECTOR",
    "NO_VECTORS",
    "Hit",
    "RawPoints",
    "dense_of",
    "dense_query",
    "grpc_filter",
    "include",
    "payload_of",
    "point_key",
    "query",
    "raw_points",
    "search_params",
    "sparse_query",
]

#: One hit of a query as the server sent it: ``point_key(h.id)``, ``h.score``,
#: ``payload_of(h.payload)`` and ``dense_of(h)`` read it (each only where it is used).
Hit = qg.ScoredPoint

#: Every payload field.
ALL_PAYLOAD: Final = qg.WithPayloadSelector(enable=True)
#: No payload field.
NO_PAYLOAD: Final = qg.WithPayloadSelector(enable=False)
#: No vector.
NO_VECTORS: Final = qg.WithVectorsSelector(enable=False)
#: The dense (unnamed) vector only.
DENSE_VECTOR: Final = qg.WithVectorsSelector(include=qg.VectorsSelector(names=[""]))


def raw_points(client: AsyncQdrantClient) -> RawPoints | None:
    """The raw gRPC reads on ``client``'s own channel; None when the client does not talk gRPC to
    a server (local mode, or ``prefer_grpc`` off: its calls are used as they are)."""
    remote = getattr(client, "_client", None)
    if remote is None or not getattr(remote, "_prefer_grpc", False) or not hasattr(remote, "grpc_points"):
        return None
    return RawPoints(remote)


def include(fields: Sequence[str]) -> qg.WithPayloadSelector:
    """A ``with_payload`` selector of only these fields."""
    return qg.WithPayloadSelector(include=qg.PayloadIncludeSelector(fields=list(fields)))


def search_params(params: models.SearchParams | None) -> qg.SearchParams | None:
    """The store's search params as the message the client would send."""
    return None if params is None else RestToGrpc.convert_search_params(params)


def point_key(pid: qg.PointId) -> str:
    """A point id as the client gives it, as a string: the UUID, or the number in decimal."""
    return pid.uuid if pid.WhichOneof("point_id_options") == "uuid" else str(pid.num)


def payload_of(payload: Any) -> dict[str, Any]:
    """A point's payload map as a dict (each value as qdrant-client decodes it)."""
    return {key: value_to_json(payload[key]) for key in payload}


def dense_of(hit: qg.ScoredPoint | qg.RetrievedPoint) -> Vector | None:
    """The dense vector of a hit (the unnamed one of named vectors), as float32; None when the
    query asked for none."""
    if not hit.HasField("vectors"):
        return None
    vectors = hit.vectors
    out = (
        vectors.vectors.vectors[""] if vectors.WhichOneof("vectors_options") == "vectors" else vectors.vector
    )
    data = out.dense.data if out.WhichOneof("vector") == "dense" else out.data
    return np.asarray(data, dtype=np.float32)


def _condition(c: Condition) -> qg.Condition:
    if isinstance(c, IsEmpty):
        return qg.Condition(is_empty=qg.IsEmptyCondition(key=c.key))
    if isinstance(c, MatchValue):
        return qg.Condition(field=qg.FieldCondition(key=c.key, match=qg.Match(keyword=c.value)))
    if isinstance(c, MatchAny):
        return qg.Condition(
            field=qg.FieldCondition(
                key=c.key, match=qg.Match(keywords=qg.RepeatedStrings(strings=list(c.values)))
            )
        )
    if isinstance(c, Range):
        return qg.Condition(
            field=qg.FieldCondition(key=c.key, range=qg.Range(gte=c.gte, gt=c.gt, lte=c.lte, lt=c.lt))
        )
    raise TypeError(f"unknown condition {c!r}")


def grpc_filter(plan: FilterPlan) -> qg.Filter | None:
    """A filter plan as Qdrant's gRPC ``Filter`` (None when it has no condition): the message the
    client sends for ``QdrantStore``'s ``models.Filter`` of the same plan."""
    if not plan.must:
        return None
    return qg.Filter(must=[_condition(c) for c in plan.must])


def dense_query(vector: Sequence[float]) -> qg.Query:
    return qg.Query(nearest=qg.VectorInput(dense=qg.DenseVector(data=vector)))


def sparse_query(sparse: SparseVector) -> qg.Query:
    return qg.Query(
        nearest=qg.VectorInput(
            sparse=qg.SparseVector(indices=list(sparse.indices), values=list(sparse.values))
        )
    )


class RawPoints:
    """The search's reads on a Qdrant server over the qdrant-client's own gRPC channel."""

    def __init__(self, remote: Any) -> None:
        self._remote = remote  # qdrant_client's AsyncQdrantRemote

    @property
    def _timeout(self) -> int:
        return int(self._remote._timeout)

    async def query_batch(self, collection: str, queries: Sequence[qg.QueryPoints]) -> list[list[Hit]]:
        """One ``QueryBatch`` call; per query its hits, best first (undecoded: see ``Hit``)."""
        response = await self._remote.grpc_points.QueryBatch(
            qg.QueryBatchPoints(collection_name=collection, query_points=queries),
            timeout=self._timeout,
        )
        return [list(batch.result) for batch in response.result]

    async def get(
        self, collection: str, ids: Sequence[str], with_payload: qg.WithPayloadSelector = ALL_PAYLOAD
    ) -> list[tuple[str, dict[str, Any]]]:
        """The points of ``ids`` that exist (canonical UUID strings), with their payloads."""
        response = await self._remote.grpc_points.Get(
            qg.GetPoints(
                collection_name=collection,
                ids=[qg.PointId(uuid=i) for i in ids],
                with_payload=with_payload,
                with_vectors=NO_VECTORS,
            ),
            timeout=self._timeout,
        )
        return [(point_key(r.id), payload_of(r.payload)) for r in response.result]

    async def dense_vectors(self, collection: str, ids: Sequence[str]) -> dict[str, Vector]:
        """The dense vectors of the points of ``ids`` that exist (no payload), by id."""
        response = await self._remote.grpc_points.Get(
            qg.GetPoints(
                collection_name=collection,
                ids=[qg.PointId(uuid=i) for i in ids],
                with_payload=NO_PAYLOAD,
                with_vectors=DENSE_VECTOR,
            ),
            timeout=self._timeout,
        )
        out: dict[str, Vector] = {}
        for r in response.result:
            vec = dense_of(r)
            if vec is not None:
                out[point_key(r.id)] = vec
        return out

    async def collection_names(self) -> list[str]:
        """Every collection's name on the server."""
        response = await self._remote.grpc_collections.List(
            qg.ListCollectionsRequest(), timeout=self._timeout
        )
        return [c.name for c in response.collections]


def query(
    collection: str,
    vector: qg.Query,
    limit: int,
    *,
    flt: qg.Filter | None,
    with_payload: qg.WithPayloadSelector,
    with_vectors: qg.WithVectorsSelector,
    params: qg.SearchParams | None = None,
    using: str | None = None,
) -> qg.QueryPoints:
    """One query of a ``QueryBatch`` on ``collection`` (as the client builds it)."""
    return qg.QueryPoints(
        collection_name=collection,
        query=vector,
        using=using,
        filter=flt,
        params=params,
        limit=limit,
        with_payload=with_payload,
        with_vectors=with_vectors,
    )
