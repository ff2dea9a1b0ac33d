"""The server/cluster Store: a Qdrant server (or cluster) through ``qdrant_client.AsyncQdrantClient``.

``location`` is a URL (``http://host:6333``; gRPC on 6334 is used when ``prefer_grpc``), or
``:memory:`` / ``path:/some/dir`` for qdrant-client's local mode. Local mode is a pure-Python
stand-in (brute force, no payload indexes) used to exercise this code path in tests; it is not
a storage engine for users (use :class:`engram_server.adapters.storage.edge.EdgeStore`).

Each Engram collection is the Qdrant collection ``prefix + name``. The CollectionSpec is kept
in the Qdrant collection's own metadata (``metadata["engram"]``), so a cluster needs no side
store and every Engram server sees the same specs; local mode keeps collection metadata too
(in its meta.json). Collections without that key are not Engram's and are ignored.

Writes use ``wait=True``: they return once the server has applied them (and written its WAL).
Payload indexes are created with each collection on a server; local mode ignores (and warns
about) payload indexes, so they are skipped there. Only the ``HNSW_LINKED_INDEXES`` ask the engine
for extra HNSW links (``enable_hnsw``); the others are plain payload indexes, and filtered searches
on them that keep few points use ACORN (``ACORN_MAX_SELECTIVITY``) instead of the links.

With int8 quantization, searches preselect ``QUANTIZED_OVERSAMPLING`` times the candidates on the
int8 codes and rescore them with the original vectors (the scores returned are exact cosines).

``write_lease`` is the cross-replica half of the write gate: a per-collection lease kept as one
point of the ``_engram_state`` collection and taken with conditional upserts (``update_filter`` on
the lease's fencing token, through the shard's leader), so two Engram replicas on one
Qdrant never run the gate of one collection at the same time.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import json
import logging
import math
import os
import random
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import grpc  # grpcio ships no stubs; types-grpcio not installed
import httpx
import numpy as np
from qdrant_client import AsyncQdrantClient, models
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from engram_server.adapters.storage.payload import (
    ACCESS_FIELDS,
    LEXICAL_VECTOR,
    ORDERABLE,
    PAYLOAD_INDEXES,
    CandidateBuilder,
    Condition,
    FilterPlan,
    IsEmpty,
    MatchAny,
    MatchValue,
    Range,
    access_hits,
    access_update,
    as_vector,
    candidates_from_columns,
    canonical_ids,
    canonical_offset,
    encode_updates,
    filter_plan,
    point_id,
    point_vectors,
    rank_fields,
    record_from_payload,
    record_to_payload,
    spec_from_json,
    spec_to_json,
    validate_collection_name,
    validate_state_key,
)
from engram_server.adapters.storage.qdrant_cues import CUE_FIELDS, CueMemo, cue_payload, stored_cue
from engram_server.adapters.storage.qdrant_grpc import (
    DENSE_VECTOR,
    NO_PAYLOAD,
    NO_VECTORS,
    PACKED_FIELD,
    SERVER_CANDIDATE_FIELDS,
    CandidateFields,
    RawPoints,
    candidate_fields,
    dense_of,
    dense_query,
    exclude,
    grpc_filter,
    include,
    pack_fields,
    packed_fields,
    payload_of,
    point_key,
    prefetch,
    raw_points,
    search_params,
    sparse_query,
)
from engram_server.adapters.storage.qdrant_grpc import query as raw_query
from engram_server.domain.errors import CollectionNotFound, EngramError, InvalidArgument, StorageUnavailable
from engram_server.domain.model import (
    BackupStats,
    Candidates,
    CollectionSpec,
    MemoryRecord,
    ScoredPoint,
    SparseVector,
    StoredPoint,
    StoreFilter,
    Vector,
)
from engram_server.domain.ranking import RescoreCue, rescore_cue

__all__ = ["ACORN_MAX_SELECTIVITY", "HNSW_LINKED_INDEXES", "QUANTIZED_OVERSAMPLING", "QdrantStore"]

#: With int8 quantization: candidates preselected on the int8 codes per result wanted, rescored
#: with the original vectors (as the embedded store does).
QUANTIZED_OVERSAMPLING = 1.5

#: The payload indexes the server builds extra HNSW links for (``enable_hnsw``); every other one of
#: ``PAYLOAD_INDEXES`` is created with ``enable_hnsw=False``. For each linked field the engine adds
#: graph links per value of the field to every segment's HNSW index, so that a search filtered on
#: that field alone still finds a connected graph: with all 15 indexes linked, building the index of
#: 100k memories on one node took about 35 minutes. These five are the fields searches filter on
#: often and alone with an exact value (kind, tag, source, session, agent), where a value can be rare
#: enough to cut the graph apart. Ranges and the rest (importance, dates, is-empty tests) are left
#: to the plain payload index plus ACORN (below). Figures: docs/operations/capacity.md.
HNSW_LINKED_INDEXES: frozenset[str] = frozenset({"type", "tags", "source_type", "session_id", "agent_id"})

#: Searches on a server use ACORN (Qdrant 1.16+) when the engine estimates that the filter keeps
#: at most this share of the points: the HNSW walk then also explores neighbours of neighbours, so
#: a selective filter on a field without HNSW links does not strand the search in a sparse graph.
#: 0.4 is Qdrant's own default threshold; it was not tuned here (bench/server_index.py measures
#: recall at a 10% filter with and without it).
ACORN_MAX_SELECTIVITY = 0.4

#: How stale the specs a search naming no collection looks in may be (``list_collections``).
SPEC_REFRESH_SECONDS = 5.0

#: How stale the list of collection names a search naming no collection looks in may be
#: (``list_collections``): this process's own creates and drops, and a collection found missing,
#: refresh it at once; another replica's show within this time.
NAMES_REFRESH_SECONDS = 1.0

T = TypeVar("T")

log = logging.getLogger(__name__)

_META_KEY = "engram"


def _index_schema(field_name: str, kind: str) -> models.PayloadSchemaParams:
    """The payload index of one field: HNSW-linked only for ``HNSW_LINKED_INDEXES``."""
    hnsw = field_name in HNSW_LINKED_INDEXES
    if kind == "keyword":
        return models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD, enable_hnsw=hnsw)
    if kind == "float":
        return models.FloatIndexParams(type=models.FloatIndexType.FLOAT, enable_hnsw=hnsw)
    if kind == "integer":
        return models.IntegerIndexParams(
            type=models.IntegerIndexType.INTEGER, lookup=True, range=True, enable_hnsw=hnsw
        )
    raise ValueError(f"unknown payload index kind {kind!r}")


def _hnsw_linked(index: models.PayloadIndexInfo) -> bool:
    """Whether the engine builds HNSW links for a payload index: ``enable_hnsw``, true unless
    set false (an index created by type alone reports no params and is linked)."""
    enabled = getattr(index.params, "enable_hnsw", None)
    return enabled is not False


class QdrantStore:
    """:class:`engram_server.ports.Store` on a Qdrant server, cluster or qdrant-client local mode."""

    def __init__(
        self,
        location: str,
        *,
        api_key: str | None = None,
        prefix: str = "",
        shard_number: int | None = None,
        replication_factor: int | None = None,
        write_consistency_factor: int | None = None,
        on_disk: bool = False,
        quantization: str = "none",
        timeout: float = 10.0,
        prefer_grpc: bool = True,
        grpc_port: int = 6334,
        https: bool | None = None,
        neighbour_ef: int = 0,
        write_lease: bool = True,
        lease_seconds: float = 30.0,
    ) -> None:
        if neighbour_ef < 0:
            raise ValueError("neighbour_ef must be >= 0 (0 = the engine's default)")
        self._location = location
        self._api_key = api_key
        self._prefix = prefix
        self._shard_number = shard_number
        self._replication_factor = replication_factor
        self._write_consistency_factor = write_consistency_factor
        self._on_disk = on_disk
        if quantization not in ("none", "int8"):
            raise ValueError(f"unknown quantization {quantization!r} (none or int8)")
        self._quantization = quantization
        self._timeout = timeout
        self._prefer_grpc = prefer_grpc
        self._grpc_port = grpc_port
        self._https = https
        self._local = location == ":memory:" or location.startswith("path:")
        #: HNSW beam width of ``search`` / ``search_batch`` (the gate's neighbour lookups); local
        #: mode searches exactly and warns about search params, so they are not sent there.
        quantized = None
        if quantization == "int8" and not self._local:
            quantized = models.QuantizationSearchParams(rescore=True, oversampling=QUANTIZED_OVERSAMPLING)
        acorn = (
            None
            if self._local
            else models.AcornSearchParams(enable=True, max_selectivity=ACORN_MAX_SELECTIVITY)
        )
        #: Search params of ``candidates`` (the search's own query).
        self._search_params = (
            None if self._local else models.SearchParams(quantization=quantized, acorn=acorn)
        )
        self._neighbour_params = (
            None
            if self._local
            else models.SearchParams(hnsw_ef=neighbour_ef or None, quantization=quantized, acorn=acorn)
        )
        if lease_seconds <= 0:
            raise ValueError("lease_seconds must be > 0")
        #: The cross-replica gate lease (a server only: local mode has one process per store).
        self._lease = write_lease and not self._local
        self._lease_seconds = lease_seconds
        self._client: AsyncQdrantClient | None = None
        self._specs: dict[str, CollectionSpec] = {}
        #: Names (without the prefix) of collections that are not Engram's (no spec metadata).
        self._foreign: set[str] = set()
        self._specs_read_at = -math.inf  # time.monotonic() of the last full read of the specs
        #: The rescoring cues the latest candidate queries returned (``rescore_cues``).
        self._cues = CueMemo()
        #: The search's reads as raw gRPC messages on the client's channel (a server with
        #: ``prefer_grpc``; None otherwise: the client's own calls), see ``qdrant_grpc``.
        self._raw: RawPoints | None = None
        self._raw_search_params = search_params(self._search_params)
        #: The candidate query's payload: the packed ranking value alone (``PACKED_FIELD``), or with
        #: the fields it packs for the collections in ``_unpacked``.
        self._candidate_payload = include([PACKED_FIELD])
        self._candidate_columns = include([PACKED_FIELD, *SERVER_CANDIDATE_FIELDS])
        self._columns_payload = include(SERVER_CANDIDATE_FIELDS)
        #: Collections whose latest candidate query found a point without a packed ranking value
        #: (written before it, or by another program): their candidate queries ask for the
        #: fields too, until one finds every point packed.
        self._unpacked: set[str] = set()
        self._cue_payload = include([*CUE_FIELDS, "created_at", "content"])
        self._access_payload = include(ACCESS_FIELDS)
        #: A record's fields: not the ones kept for the candidate query alone (the script tag, the
        #: rescoring cues, the packed ranking value), which the record leaves out.
        self._record_payload = exclude(["script", *CUE_FIELDS, PACKED_FIELD])
        #: The server's collection names with this store's prefix, without it (``list_collections``),
        #: and when they were read (time.monotonic()); None: read them on the next call.
        self._names: frozenset[str] | None = None
        self._names_read_at = -math.inf

    # ------------------------------------------------------------------ plumbing

    def _describe(self) -> str:
        return "local mode (" + self._location + ")" if self._local else f"Qdrant at {self._location}"

    def _qname(self, name: str) -> str:
        return self._prefix + name

    def _make_client(self) -> AsyncQdrantClient:
        if self._location == ":memory:":
            return AsyncQdrantClient(location=":memory:")
        if self._location.startswith("path:"):
            path = self._location.removeprefix("path:")
            _probe_local_lock(path)
            return AsyncQdrantClient(path=path)
        return AsyncQdrantClient(
            url=self._location,
            api_key=self._api_key,
            prefer_grpc=self._prefer_grpc,
            grpc_port=self._grpc_port,
            https=self._https,
            timeout=max(1, math.ceil(self._timeout)),
            # The version check is a blocking call at construction that only warns on failure;
            # open() makes a real request instead and reports failures as StorageUnavailable.
            check_compatibility=False,
        )

    @property
    def _c(self) -> AsyncQdrantClient:
        if self._client is None:
            raise StorageUnavailable("the Qdrant store is not open")
        return self._client

    async def _call(self, what: str, fn: Callable[[], Awaitable[T]], *, collection: str | None = None) -> T:
        """Run one client call; backend failures become domain errors."""
        try:
            return await fn()
        except EngramError:
            raise
        except UnexpectedResponse as exc:
            if exc.status_code == 404 and collection is not None:
                raise self._gone(collection) from exc
            raise StorageUnavailable(f"{what} failed on {self._describe()}: {exc}") from exc
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND and collection is not None:
                raise self._gone(collection) from exc
            raise StorageUnavailable(
                f"{what} failed on {self._describe()}: {exc.code().name} {exc.details()}"
            ) from exc
        except (ResponseHandlingException, httpx.HTTPError, OSError, TimeoutError) as exc:
            raise StorageUnavailable(f"{what} failed: cannot reach {self._describe()}: {exc}") from exc
        except ValueError as exc:  # local mode reports a missing collection as ValueError
            if collection is not None and "not found" in str(exc).lower():
                raise self._gone(collection) from exc
            raise StorageUnavailable(f"{what} failed on {self._describe()}: {exc}") from exc
        except RuntimeError as exc:  # local mode: path locked by another instance, or closed
            raise StorageUnavailable(f"{what} failed on {self._describe()}: {exc}") from exc

    def _gone(self, name: str) -> CollectionNotFound:
        """The collection is missing on the server: forget its cached spec (another Engram
        replica may have dropped it), so the next call looks again (and lists the names afresh)."""
        self._specs.pop(name, None)
        self._names = None
        return _not_found(name)

    async def _spec(self, name: str) -> CollectionSpec:
        spec = await self.get_collection(name)
        if spec is None:
            raise _not_found(name)
        return spec

    # ------------------------------------------------------------------ lifecycle

    async def open(self) -> None:
        if self._client is not None:
            return
        try:
            client = self._make_client()
        except (RuntimeError, ValueError, OSError) as exc:
            raise StorageUnavailable(f"cannot open {self._describe()}: {exc}") from exc
        self._client = client
        self._raw = raw_points(client)
        try:
            specs = await self.list_collections()  # a real round trip: fail now, not on first use
            if not self._local:
                for spec in specs:
                    await self.reconcile_indexes(spec.name)
        except BaseException:
            raw, self._client, self._raw = self._raw, None, None
            if raw is not None:
                await raw.close()
            await client.close()
            raise

    async def close(self) -> None:
        client, self._client, raw, self._raw = self._client, None, self._raw, None
        if raw is not None:
            await raw.close()
        self._specs.clear()
        self._foreign.clear()
        self._names = None
        if client is not None:
            await client.close()

    # ------------------------------------------------------------------ collections

    async def create_collection(self, spec: CollectionSpec) -> None:
        validate_collection_name(spec.name)
        if await self.get_collection(spec.name) is not None:
            return
        qname = self._qname(spec.name)
        try:
            await self._call(
                "create collection",
                lambda: self._c.create_collection(
                    qname,
                    vectors_config=models.VectorParams(
                        size=spec.dimension,
                        distance=models.Distance.COSINE,
                        on_disk=True if self._on_disk else None,
                    ),
                    sparse_vectors_config=(
                        {LEXICAL_VECTOR: models.SparseVectorParams(modifier=models.Modifier.IDF)}
                        if spec.lexical is not None
                        else None
                    ),
                    quantization_config=self._quantization_config(),
                    metadata={_META_KEY: spec_to_json(spec)},
                    shard_number=self._shard_number,
                    replication_factor=self._replication_factor,
                    write_consistency_factor=self._write_consistency_factor,
                ),
            )
        except StorageUnavailable:
            # Another Engram replica may have created it between our check and our call (the
            # per-collection lock is per process): that is not a failure.
            self._specs.pop(spec.name, None)
            if await self.get_collection(spec.name) is None:
                raise
        self._names = None
        if not self._local:
            for field_name, kind in PAYLOAD_INDEXES.items():  # idempotent on the server
                await self._create_index(spec.name, field_name, _index_schema(field_name, kind))
        self._specs[spec.name] = spec

    def _quantization_config(self) -> models.ScalarQuantization | None:
        if self._quantization != "int8":
            return None
        return models.ScalarQuantization(
            scalar=models.ScalarQuantizationConfig(type=models.ScalarType.INT8, always_ram=True)
        )

    async def _create_index(self, name: str, field_name: str, schema: models.PayloadSchemaParams) -> None:
        qname = self._qname(name)
        await self._call(
            "create payload index",
            lambda: self._c.create_payload_index(
                qname, field_name=field_name, field_schema=schema, wait=True
            ),
            collection=name,
        )

    async def reconcile_indexes(self, name: str) -> list[str]:
        """Bring collection ``name``'s payload indexes to what this release creates; the fields
        changed, in order. Run for every Engram collection when the store opens on a server.

        A collection created by an older Engram has every payload index HNSW-linked (they were
        created by type alone, and the engine links by default): each index whose ``enable_hnsw``
        differs from ``HNSW_LINKED_INDEXES`` is created again with this release's parameters, which
        the engine applies to the existing index in place (the points stay; filtered searches keep
        working meanwhile). A missing index is created. Idempotent: a collection already in step
        costs one ``get_collection`` and changes nothing. Each change is logged."""
        qname = self._qname(name)
        info = await self._call("get collection", lambda: self._c.get_collection(qname), collection=name)
        schema = info.payload_schema or {}
        changed: list[str] = []
        for field_name, kind in PAYLOAD_INDEXES.items():
            want = field_name in HNSW_LINKED_INDEXES
            index = schema.get(field_name)
            if index is None:
                was = "missing"
            else:
                linked = _hnsw_linked(index)
                if linked == want:
                    continue
                was = f"enable_hnsw={str(linked).lower()}"
            await self._create_index(name, field_name, _index_schema(field_name, kind))
            log.info(
                "Qdrant collection %s: payload index %r re-created (%s -> enable_hnsw=%s)",
                qname,
                field_name,
                was,
                str(want).lower(),
            )
            changed.append(field_name)
        return changed

    async def get_collection(self, name: str) -> CollectionSpec | None:
        cached = self._specs.get(name)
        if cached is not None:
            return cached
        qname = self._qname(name)
        raw = self._raw
        if raw is not None:  # one raw read of the metadata (the client converts the whole info)
            try:
                metadata = await self._call("get collection", lambda: raw.collection_metadata(qname))
            except StorageUnavailable as exc:
                if isinstance(exc.__cause__, grpc.aio.AioRpcError) and (
                    exc.__cause__.code() == grpc.StatusCode.NOT_FOUND
                ):
                    return None
                raise
        else:
            if not await self._call("check collection", lambda: self._c.collection_exists(qname)):
                return None
            info = await self._call("get collection", lambda: self._c.get_collection(qname), collection=name)
            metadata = info.config.metadata
        spec = self._spec_of(name, metadata)
        if spec is not None:
            self._specs[name] = spec
            self._foreign.discard(name)
        return spec

    def _spec_of(self, name: str, metadata: Mapping[str, Any] | None) -> CollectionSpec | None:
        """The spec of this store's collection ``name`` from its Qdrant collection's metadata; None
        when it is not one: no spec (not Engram's), or a spec of another name, i.e. the collection
        of another deployment whose prefix is longer (prefix ``a_`` + ``old_x`` is prefix
        ``a_old_`` + ``x``: its spec says ``x``)."""
        if not metadata or _META_KEY not in metadata:
            return None  # not an Engram collection
        qname = self._qname(name)
        spec = spec_from_json(metadata[_META_KEY], where=f"{self._describe()} collection {qname!r} metadata")
        if spec.name != name:
            log.debug("Qdrant collection %s holds Engram collection %r of another prefix", qname, spec.name)
            return None
        return spec

    async def list_collections(self) -> list[CollectionSpec]:
        """This store's collections (a search that names no collection calls this every time).

        The names are read at most every ``NAMES_REFRESH_SECONDS`` (at once after this process
        created or dropped one, or found one missing); another replica's creates and drops show
        within that time. A name is this store's when it is the prefix followed by a valid
        collection name whose stored spec carries that same name: another deployment's
        collections are not, even when its prefix starts with this one's (see ``_spec_of``). The
        specs, and the verdict on collections that are not Engram's, are read again at most every
        ``SPEC_REFRESH_SECONDS`` (another replica may have changed a spec, e.g. its trash mark, or
        dropped and re-created a collection). Names no longer on the server are forgotten at once."""
        now = time.monotonic()
        if now - self._specs_read_at > SPEC_REFRESH_SECONDS:
            self._specs.clear()
            self._foreign.clear()
            self._specs_read_at = now
        listed = set(await self._collection_names(now))
        for gone in set(self._specs) - listed:
            del self._specs[gone]
        self._foreign &= listed
        specs: list[CollectionSpec] = []
        for name in sorted(listed - self._foreign):
            spec = await self.get_collection(name)
            if spec is None:
                self._foreign.add(name)
            else:
                specs.append(spec)
        return sorted(specs, key=lambda s: s.name)

    async def _collection_names(self, now: float) -> frozenset[str]:
        """The names (without the prefix) of the server's collections that may be this store's:
        the prefix followed by a valid collection name (cached, see ``list_collections``)."""
        names = self._names
        if names is not None and now - self._names_read_at <= NAMES_REFRESH_SECONDS:
            return names
        raw = self._raw
        if raw is not None:
            qnames = await self._call("list collections", raw.collection_names)
        else:
            response = await self._call("list collections", self._c.get_collections)
            qnames = [desc.name for desc in response.collections]
        names = frozenset(_own_names(qnames, self._prefix))
        self._names, self._names_read_at = names, now
        return names

    async def update_collection(self, spec: CollectionSpec) -> None:
        self._specs.pop(spec.name, None)  # read the stored one afresh
        current = await self._spec(spec.name)
        if spec.format > current.format and not self._local:
            for field_name, kind in PAYLOAD_INDEXES.items():  # idempotent on the server
                await self._create_index(spec.name, field_name, _index_schema(field_name, kind))
        qname = self._qname(spec.name)
        await self._call(
            "update collection",
            lambda: self._c.update_collection(qname, metadata={_META_KEY: spec_to_json(spec)}),
            collection=spec.name,
        )
        self._specs[spec.name] = spec

    async def drop_collection(self, name: str) -> int:
        if await self.get_collection(name) is None:
            return 0
        qname = self._qname(name)
        result = await self._call("count", lambda: self._c.count(qname, exact=True), collection=name)
        await self._call("drop collection", lambda: self._c.delete_collection(qname), collection=name)
        self._specs.pop(name, None)
        self._names = None
        self._cues.forget(name)
        return int(result.count)

    # ------------------------------------------------------------------ points

    async def upsert(self, collection: str, points: Sequence[StoredPoint]) -> None:
        if not points:
            return
        spec = await self._spec(collection)
        vectors = point_vectors(spec, points)
        structs = [
            models.PointStruct(
                id=point_id(p.record.id),
                vector=_qdrant_vector(spec, p, vec),
                payload=_packed(_with_cue(record_to_payload(p.record), p.record.content), collection),
            )
            for p, vec in zip(points, vectors, strict=True)
        ]
        qname = self._qname(collection)
        await self._call(
            "upsert", lambda: self._c.upsert(qname, points=structs, wait=True), collection=collection
        )

    async def retrieve(
        self, collection: str, ids: Sequence[str], *, with_vectors: bool = False
    ) -> list[StoredPoint]:
        await self._spec(collection)
        wanted: list[models.ExtendedPointId] = list(canonical_ids(ids))
        if not wanted:
            return []
        qname = self._qname(collection)
        raw = self._raw
        if raw is not None and not with_vectors:  # the winners' records: raw gRPC
            keys = [str(i) for i in wanted]
            sel = self._record_payload
            got = await self._call("retrieve", lambda: raw.get(qname, keys, sel), collection=collection)
            return [StoredPoint(record_from_payload(key, collection, payload)) for key, payload in got]
        records = await self._call(
            "retrieve",
            lambda: self._c.retrieve(qname, ids=wanted, with_payload=True, with_vectors=with_vectors),
            collection=collection,
        )
        return [
            StoredPoint(
                record_from_payload(r.id, collection, r.payload or {}),
                as_vector(r.vector) if with_vectors and r.vector is not None else None,
            )
            for r in records
        ]

    def generation(self, collection: str) -> int | None:
        """Unknown: other processes (replicas) write to the same Qdrant."""
        return None

    def changed_since(self, collection: str, generation: int) -> frozenset[str] | None:
        """Unknown (see ``generation``)."""
        return None

    async def search(
        self,
        collection: str,
        vector: Vector,
        limit: int,
        flt: StoreFilter,
        *,
        with_vectors: bool = False,
    ) -> list[ScoredPoint]:
        await self._spec(collection)
        if limit <= 0:
            return []
        query: list[float] = vector.reshape(-1).tolist()
        qname = self._qname(collection)
        response = await self._call(
            "search",
            lambda: self._c.query_points(
                qname,
                query=query,
                query_filter=_qdrant_filter(filter_plan(flt)),
                limit=limit,
                with_payload=True,
                with_vectors=[""] if with_vectors else False,
                search_params=self._neighbour_params,
            ),
            collection=collection,
        )
        return [
            ScoredPoint(
                record_from_payload(h.id, collection, h.payload or {}),
                float(h.score),
                as_vector(h.vector) if with_vectors and h.vector is not None else None,
                script=str((h.payload or {}).get("script") or ""),
            )
            for h in response.points
        ]

    async def search_batch(
        self, collection: str, vectors: Vector, limit: int, flt: StoreFilter
    ) -> list[list[ScoredPoint]]:
        await self._spec(collection)
        rows: list[list[float]] = np.asarray(vectors, dtype=np.float64).tolist()
        if limit <= 0 or not rows:
            return [[] for _ in rows]
        qname = self._qname(collection)
        query_filter = _qdrant_filter(filter_plan(flt))
        responses = await self._call(
            "search",
            lambda: self._c.query_batch_points(
                qname,
                requests=[
                    models.QueryRequest(
                        query=row,
                        filter=query_filter,
                        limit=limit,
                        with_payload=True,
                        params=self._neighbour_params,
                    )
                    for row in rows
                ],
            ),
            collection=collection,
        )
        return [
            [
                ScoredPoint(
                    record_from_payload(h.id, collection, h.payload or {}),
                    float(h.score),
                    script=str((h.payload or {}).get("script") or ""),
                )
                for h in response.points
            ]
            for response in responses
        ]

    async def candidates(
        self,
        collection: str,
        vector: Vector,
        limit: int,
        flt: StoreFilter,
        *,
        sparse: SparseVector | None = None,
        lexical_limit: int | None = None,
        with_vectors: bool = False,
    ) -> Candidates:
        spec = await self._spec(collection)
        out = CandidateBuilder(collection, with_vectors=with_vectors)
        if limit <= 0:
            return out.build()
        query: list[float] = vector.reshape(-1).tolist()
        if self._raw is not None:
            lexical_query = sparse if sparse and spec.lexical is not None else None
            return await self._candidates_raw(
                self._raw,
                collection,
                out,
                vector=vector,
                query=query,
                limit=limit,
                flt=flt,
                sparse=lexical_query,
                lexical_limit=lexical_limit,
            )
        fields = list(SERVER_CANDIDATE_FIELDS)  # the cues too: rescore_cues reads no record after
        qname = self._qname(collection)
        query_filter = _qdrant_filter(filter_plan(flt))
        requests = [
            models.QueryRequest(
                query=query,
                filter=query_filter,
                limit=limit,
                with_payload=fields,
                with_vector=[""] if with_vectors else False,
                params=self._search_params,
            )
        ]
        lexical = bool(sparse) and spec.lexical is not None
        if sparse and lexical:
            bm25_query = models.SparseVector(indices=list(sparse.indices), values=list(sparse.values))
            n_lexical = limit if lexical_limit is None else lexical_limit
            requests.append(
                models.QueryRequest(
                    query=bm25_query,
                    using=LEXICAL_VECTOR,
                    filter=query_filter,
                    limit=n_lexical,
                    with_payload=fields,
                    with_vector=[""] if with_vectors else False,
                )
            )
            # the BM25 hits' cosines, scored by the node (see _candidates_raw)
            requests.append(
                models.QueryRequest(
                    prefetch=models.Prefetch(
                        query=bm25_query, using=LEXICAL_VECTOR, filter=query_filter, limit=n_lexical
                    ),
                    query=query,
                    limit=n_lexical,
                    with_payload=False,
                    with_vector=False,
                    params=self._search_params,
                )
            )
        responses = await self._call(
            "search", lambda: self._c.query_batch_points(qname, requests=requests), collection=collection
        )
        memo = self._cues
        for h in responses[0].points:
            out.add(h.id, h.payload, h.score, vector=h.vector)
            memo.put(collection, str(h.id), h.payload)
        if lexical:
            cosines = {str(h.id): h.score for h in responses[2].points}
            for h in responses[1].points:
                key = str(h.id)
                if h.score <= 0 or out.set_lexical(key, h.score) or key not in cosines:
                    continue
                vec = as_vector(h.vector) if with_vectors else None
                out.add(h.id, h.payload, cosines[key], lexical=h.score, vector=vec)
                memo.put(collection, key, h.payload)
        return out.build()

    async def _candidates_raw(
        self,
        raw: RawPoints,
        collection: str,
        out: CandidateBuilder,
        *,
        vector: Vector,
        query: list[float],
        limit: int,
        flt: StoreFilter,
        sparse: SparseVector | None,
        lexical_limit: int | None,
    ) -> Candidates:
        """``candidates`` as raw gRPC messages, decoded without the client's models: the dense
        hits, then the BM25 hits not among them, in the same order and with the same values, in
        one ``QueryBatch``. The BM25-only hits' cosines come from a third query of the batch: the
        BM25 query again as a prefetch, its hits scored with the dense query by the node (as the
        dense hits' scores are). Returning their vectors instead, to compute the cosines here,
        cost more on both sides (at 20k, 2026-12-03: 1.05 vs 0.60 ms of Engram's CPU for the
        batch, 5.1–5.7 vs 3.5–3.8 ms of the node's); they are returned only when asked for. A
        BM25 hit the third query did not score (deleted in between) is left out."""
        qname = self._qname(collection)
        query_filter = grpc_filter(filter_plan(flt))
        # the cues too (rescore_cues reads no record after): packed, or with the fields themselves
        packed_only = collection not in self._unpacked
        fields = self._candidate_payload if packed_only else self._candidate_columns
        with_vectors = out.vecs is not None
        queries = [
            raw_query(
                qname,
                dense_query(query),
                limit,
                flt=query_filter,
                with_payload=fields,
                with_vectors=DENSE_VECTOR if with_vectors else NO_VECTORS,
                params=self._raw_search_params,
            )
        ]
        if sparse is not None:
            lexical_query = sparse_query(sparse)
            n_lexical = limit if lexical_limit is None else lexical_limit
            queries.append(
                raw_query(
                    qname,
                    lexical_query,
                    n_lexical,
                    flt=query_filter,
                    with_payload=fields,
                    with_vectors=DENSE_VECTOR if with_vectors else NO_VECTORS,
                    using=LEXICAL_VECTOR,
                )
            )
            queries.append(
                raw_query(
                    qname,
                    queries[0].query,
                    n_lexical,
                    flt=None,
                    with_payload=NO_PAYLOAD,
                    with_vectors=NO_VECTORS,
                    params=self._raw_search_params,
                    prefetch=prefetch(lexical_query, n_lexical, flt=query_filter, using=LEXICAL_VECTOR),
                )
            )
        responses = await self._call("search", lambda: raw.query_batch(qname, queries), collection=collection)
        # Column by column (no row object per hit): each hit's id, score and fields once.
        hits = responses[0]
        keys = [h.id.uuid or str(h.id.num) for h in hits]  # point_key (a UUID is never empty)
        cosine: list[float] = [h.score for h in hits]
        payloads = [h.payload for h in hits]
        # (None: no packed value; read from the fields below)
        rows: list[CandidateFields | None] = [packed_fields(p) for p in payloads]
        vecs: list[Vector | None] | None = [dense_of(h) for h in hits] if with_vectors else None
        at = dict(zip(keys, range(len(keys)), strict=True))
        if len(at) < len(keys):  # (a point twice among the hits: its first row counts)
            first = sorted({key: i for i, key in reversed(list(enumerate(keys)))}.values())
            keys = [keys[i] for i in first]
            cosine = [cosine[i] for i in first]
            payloads = [payloads[i] for i in first]
            rows = [rows[i] for i in first]
            vecs = None if vecs is None else [vecs[i] for i in first]
            at = dict(zip(keys, range(len(keys)), strict=True))
        lexical = [0.0] * len(keys)
        if sparse is not None:
            cosines = {point_key(h.id): h.score for h in responses[2]}
            for h in responses[1]:
                key, score = point_key(h.id), h.score
                if score <= 0:
                    continue
                row_at = at.get(key)
                if row_at is not None:
                    lexical[row_at] = score
                    continue
                cos = cosines.get(key)
                if cos is None:  # not scored: deleted between the two queries
                    continue
                at[key] = len(keys)
                keys.append(key)
                cosine.append(cos)
                lexical.append(score)
                payloads.append(h.payload)
                rows.append(packed_fields(h.payload))
                if vecs is not None:
                    vecs.append(dense_of(h))
        if None in rows:
            rows = await self._unpacked_rows(raw, collection, keys, payloads, rows, packed_only=packed_only)
            if None in rows:  # (deleted since the query: left out)
                kept = [i for i, row in enumerate(rows) if row is not None]
                keys = [keys[i] for i in kept]
                cosine = [cosine[i] for i in kept]
                lexical = [lexical[i] for i in kept]
                rows = [rows[i] for i in kept]
                vecs = None if vecs is None else [vecs[i] for i in kept]
        elif not packed_only:
            self._unpacked.discard(collection)  # every point packed: the packed value alone next
        if not keys:
            return out.build()
        kinds, importance, created, until, scripts, cues = zip(*rows, strict=True)
        self._cues.put_cues(collection, keys, cues, created)
        return candidates_from_columns(
            collection,
            keys,
            types=kinds,
            importance=importance,
            created_at=created,
            valid_until=until,
            scripts=scripts,
            cosine=cosine,
            lexical=lexical,
            vectors=vecs,
        )

    async def _unpacked_rows(
        self,
        raw: RawPoints,
        collection: str,
        keys: Sequence[str],
        payloads: Sequence[Any],
        rows: list[CandidateFields | None],
        *,
        packed_only: bool,
    ) -> list[CandidateFields | None]:
        """``rows`` with those of the points without a packed ranking value read from their fields:
        from the candidate query's answer when it asked for them, else read in one ``Get`` (the
        collection then asks for them until a query finds every point packed; a point deleted
        in between stays None)."""
        gaps = [i for i, row in enumerate(rows) if row is None]
        if not packed_only:
            out = list(rows)
            for i in gaps:
                row = candidate_fields(payloads[i])
                if row is None:  # a payload not as Engram writes it: decoded in full
                    row = _decoded_fields(keys[i], payload_of(payloads[i]), collection)
                out[i] = row
            return out
        self._unpacked.add(collection)
        qname, sel = self._qname(collection), self._columns_payload
        wanted = [keys[i] for i in gaps]
        got = dict(await self._call("retrieve", lambda: raw.get(qname, wanted, sel), collection=collection))
        out = list(rows)
        for i in gaps:
            payload = got.get(keys[i])
            out[i] = None if payload is None else _decoded_fields(keys[i], payload, collection)
        return out

    async def rescore_cues(self, collection: str, ids: Sequence[str]) -> dict[str, tuple[RescoreCue, float]]:
        """By id, the rescoring cue and ``created_at`` of each point (``RescoreCueSource``): as the
        candidate query that found it returned them (its ``rescore_*`` payload fields, see
        :mod:`engram_server.adapters.storage.qdrant_cues`), without a read. The ids the memo does
        not hold (points written before the field, or pushed out) are read in one ``retrieve``:
        the stored cue when there is one, else the cue of the text. Missing ids are skipped."""
        out: dict[str, tuple[RescoreCue, float]] = {}
        missing: list[str] = []
        for pid in ids:
            kept = self._cues.get(collection, pid)
            if kept is None:
                missing.append(pid)
            else:
                out[pid] = kept
        wanted: list[models.ExtendedPointId] = list(canonical_ids(missing))
        if not wanted:
            return out
        qname = self._qname(collection)
        raw = self._raw
        found: list[tuple[str, dict[str, Any]]]
        if raw is not None:
            sel = self._cue_payload
            keys = [str(i) for i in wanted]
            found = await self._call("retrieve", lambda: raw.get(qname, keys, sel), collection=collection)
        else:
            records = await self._call(
                "retrieve",
                lambda: self._c.retrieve(
                    qname, ids=wanted, with_payload=[*CUE_FIELDS, "created_at", "content"], with_vectors=False
                ),
                collection=collection,
            )
            found = [(str(r.id), r.payload or {}) for r in records]
        for key, payload in found:
            cue = stored_cue(payload)
            if cue is None:  # written before the field: the cue of its text, as before
                cue = rescore_cue(str(payload.get("content") or ""))
            out[key] = (cue, float(payload.get("created_at") or 0.0))
        return out

    async def scroll(
        self, collection: str, flt: StoreFilter, limit: int, offset: str | None = None
    ) -> tuple[list[MemoryRecord], str | None]:
        if limit <= 0:
            raise ValueError("scroll limit must be positive")
        await self._spec(collection)
        start = canonical_offset(offset)
        qname = self._qname(collection)
        records, next_offset = await self._call(
            "scroll",
            lambda: self._c.scroll(
                qname,
                scroll_filter=_qdrant_filter(filter_plan(flt)),
                limit=limit,
                offset=start,
                with_payload=True,
                with_vectors=False,
            ),
            collection=collection,
        )
        out = [record_from_payload(r.id, collection, r.payload or {}) for r in records]
        return out, None if next_offset is None else str(next_offset)

    async def top(self, collection: str, flt: StoreFilter, limit: int, order_by: str) -> list[MemoryRecord]:
        if limit <= 0:
            raise ValueError("top limit must be positive")
        if order_by not in ORDERABLE:
            raise ValueError(f"cannot order by {order_by!r}")
        await self._spec(collection)
        qname = self._qname(collection)
        records, _ = await self._call(
            "scroll",
            lambda: self._c.scroll(
                qname,
                scroll_filter=_qdrant_filter(filter_plan(flt)),
                limit=limit,
                with_payload=True,
                with_vectors=False,
                order_by=models.OrderBy(key=order_by, direction=models.Direction.DESC),
            ),
            collection=collection,
        )
        return [record_from_payload(r.id, collection, r.payload or {}) for r in records]

    async def count(self, collection: str, flt: StoreFilter) -> int:
        await self._spec(collection)
        qname = self._qname(collection)
        result = await self._call(
            "count",
            lambda: self._c.count(qname, count_filter=_qdrant_filter(filter_plan(flt)), exact=True),
            collection=collection,
        )
        return int(result.count)

    async def delete(self, collection: str, ids: Sequence[str]) -> None:
        await self._spec(collection)
        wanted: list[models.ExtendedPointId] = list(canonical_ids(ids))
        if not wanted:
            return
        qname = self._qname(collection)
        await self._call(
            "delete",
            lambda: self._c.delete(qname, points_selector=models.PointIdsList(points=wanted), wait=True),
            collection=collection,
        )

    async def delete_where(self, collection: str, flt: StoreFilter) -> int:
        """Counts, then deletes by the same filter. On a shared cluster a point that starts
        matching in between is deleted without being counted (the count is for reporting)."""
        n = await self.count(collection, flt)
        if n == 0:
            return 0
        qname = self._qname(collection)
        selector = models.FilterSelector(filter=_qdrant_filter(filter_plan(flt)) or models.Filter())
        await self._call(
            "delete by filter",
            lambda: self._c.delete(qname, points_selector=selector, wait=True),
            collection=collection,
        )
        return n

    async def get_state(self, key: str) -> dict[str, Any] | None:
        validate_state_key(key)
        if not await self._state_exists():
            return None
        found = await self._call(
            "read state",
            lambda: self._c.retrieve(self._state_collection, [_state_id(key)], with_payload=True),
        )
        if not found or not found[0].payload:
            return None
        value = found[0].payload.get("value")
        if not isinstance(value, dict):
            raise StorageUnavailable(f"state {key!r} on {self._describe()} is not an object")
        return value

    async def backup(self, directory: str, taken_at: float) -> BackupStats:
        """Qdrant's snapshot API, one collection after the other (the caller holds every Engram
        collection's write lock: no write of this process lands in between): each snapshot is
        made on the server, downloaded into ``directory/qdrant/`` and deleted there."""
        if self._local:
            raise InvalidArgument.of(
                "directory", "qdrant-client's local mode has no snapshots: use engram export instead"
            )
        dest = Path(directory)
        _prepare_backup_dir(dest)
        names = {spec.name: self._qname(spec.name) for spec in await self.list_collections()}
        existing = {
            c.name for c in (await self._call("list collections", self._c.get_collections)).collections
        }
        if self._state_collection in existing:
            names[""] = self._state_collection
        points: dict[str, int] = {}
        files: dict[str, str] = {}
        headers = {"api-key": self._api_key} if self._api_key else {}
        base = self._location.rstrip("/")
        async with httpx.AsyncClient(headers=headers, timeout=max(60.0, self._timeout)) as http:
            for name, qname in sorted(names.items()):
                snapshot = await self._call(
                    "snapshot",
                    functools.partial(self._c.create_snapshot, qname, wait=True),
                    collection=name or None,
                )
                if snapshot is None:
                    raise StorageUnavailable(f"Qdrant made no snapshot of {qname}")
                file = dest / "qdrant" / f"{qname}.snapshot"
                try:
                    async with http.stream(
                        "GET", f"{base}/collections/{qname}/snapshots/{snapshot.name}"
                    ) as r:
                        r.raise_for_status()
                        with file.open("wb") as f:
                            async for chunk in r.aiter_bytes(1 << 20):
                                f.write(chunk)
                except httpx.HTTPError as exc:
                    raise StorageUnavailable(f"downloading the snapshot of {qname} failed: {exc}") from exc
                finally:
                    with contextlib.suppress(Exception):
                        await self._c.delete_snapshot(qname, snapshot.name, wait=True)
                files[qname] = file.name
                if name:
                    counted = await self._call("count", functools.partial(self._c.count, qname, exact=True))
                    points[name] = int(counted.count)
        manifest = {
            "engram_backup": 1,
            "taken_at": taken_at,
            "store": "qdrant",
            "points": points,
            "snapshots": files,
        }
        (dest / "engram-backup.json").write_text(json.dumps(manifest, indent=2), encoding="utf-8")
        return BackupStats(_tree_bytes(dest), points)

    async def put_state(self, key: str, value: Mapping[str, Any]) -> None:
        validate_state_key(key)
        if not await self._state_exists():
            await self._create_state_collection()
        point = models.PointStruct(
            id=_state_id(key), vector=[0.0], payload={"key": key, "value": dict(value)}
        )
        await self._call("write state", lambda: self._c.upsert(self._state_collection, [point], wait=True))

    async def _create_state_collection(self) -> None:
        try:
            await self._call(
                "create state collection",
                lambda: self._c.create_collection(
                    self._state_collection,
                    vectors_config=models.VectorParams(size=1, distance=models.Distance.DOT),
                    # the same availability as the memories (vector storage options are moot
                    # for 1-dimensional points)
                    shard_number=self._shard_number,
                    replication_factor=self._replication_factor,
                    write_consistency_factor=self._write_consistency_factor,
                ),
            )
        except StorageUnavailable:
            if not await self._state_exists():  # else another replica created it first
                raise

    @property
    def _state_collection(self) -> str:
        # Not an Engram collection: it carries no spec metadata, so list_collections skips it.
        return self._prefix + "_engram_state"

    async def _state_exists(self) -> bool:
        return await self._call(
            "check state collection", lambda: self._c.collection_exists(self._state_collection)
        )

    # ------------------------------------------------------------------ the gate's lease

    @contextlib.asynccontextmanager
    async def write_lease(self, collection: str) -> AsyncIterator[None]:
        """Hold the collection's write lease (shared by every replica) for the body.

        The lease is the point ``_lock_id(collection)`` of the state collection: ``holder`` (a
        random id per acquisition), ``token`` (the fencing token, +1 per acquisition) and
        ``expires`` (wall-clock seconds; a holder that died frees it then). It is taken with an
        upsert conditioned on the token read just before (``update_filter``: exactly one of two
        racing replicas matches) or, when missing, an insert-only upsert, then read back. Writes go
        through the shard's leader (``ordering=medium``: the highest live replica, so the lease
        stays available with a node down), so every copy applies the conditional updates in one
        order. A holder id is unique per acquisition: seeing ours on a later read means an attempt
        whose read-back came from a lagging copy did take it. Waiting is bounded by the lease
        period plus the store timeout; past it the call fails with StorageUnavailable (retryable).
        """
        if not self._lease:
            yield
            return
        holder, token = await self._acquire(collection)
        try:
            yield
        finally:
            await self._release(collection, holder, token)

    async def _acquire(self, collection: str) -> tuple[str, int]:
        if not await self._state_exists():
            await self._create_state_collection()
        holder = uuid.uuid4().hex
        deadline = time.monotonic() + self._lease_seconds + self._timeout
        delay = 0.002
        while True:
            try:
                token = await self._try_take(collection, holder)
            except StorageUnavailable:
                # e.g. the shard's leader was just lost: retry until the deadline (an attempt that
                # did land is recognised by its holder id)
                if time.monotonic() > deadline:
                    raise
                token = None
            if token is not None:
                return holder, token
            if time.monotonic() > deadline:
                raise StorageUnavailable(
                    f"the write lease of collection {collection!r} on {self._describe()} stayed taken "
                    f"for {self._lease_seconds + self._timeout:.0f} s (another replica holds it)"
                )
            await asyncio.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, 0.1)

    async def _read_lease(self, collection: str) -> dict[str, Any] | None:
        state, pid = self._state_collection, _lock_id(collection)
        found = await self._call("read lease", lambda: self._c.retrieve(state, [pid], with_payload=True))
        return (found[0].payload or {}) if found else None

    async def _try_take(self, collection: str, holder: str) -> int | None:
        """One attempt: the new fencing token if ``holder`` now holds the lease, else None."""
        current = await self._read_lease(collection)
        now = time.time()
        if current is not None and current.get("holder") == holder:
            return int(current["token"])  # our earlier attempt landed (its read-back was stale)
        if current is not None and current.get("holder") and float(current.get("expires", 0)) > now:
            return None  # held, not expired
        token = 1 if current is None else int(current.get("token", 0)) + 1
        point = models.PointStruct(
            id=_lock_id(collection),
            vector=[0.0],
            payload={
                "key": f"lease:{collection}",
                "holder": holder,
                "token": token,
                "expires": now + self._lease_seconds,
            },
        )
        # Missing: insert only (an insert that lost the race changes nothing). Present: only if
        # its token is still the one read (a conditional update that lost changes nothing).
        condition = None if current is None else _token_is(token - 1)
        state = self._state_collection
        await self._call(
            "take lease",
            lambda: self._c.upsert(
                state,
                [point],
                wait=True,
                ordering=models.WriteOrdering.MEDIUM,
                update_filter=condition,
                update_mode=models.UpdateMode.INSERT_ONLY if condition is None else None,
            ),
        )
        after = await self._read_lease(collection) or {}
        return token if after.get("holder") == holder and after.get("token") == token else None

    async def _release(self, collection: str, holder: str, token: int) -> None:
        state, pid = self._state_collection, _lock_id(collection)
        point = models.PointStruct(
            id=pid,
            vector=[0.0],
            payload={"key": f"lease:{collection}", "holder": "", "token": token, "expires": 0.0},
        )
        # Only if still ours: a lease that expired and was taken by another replica stays theirs.
        mine = models.Filter(
            must=[
                models.FieldCondition(key="holder", match=models.MatchValue(value=holder)),
                models.FieldCondition(key="token", match=models.MatchValue(value=token)),
            ]
        )
        with contextlib.suppress(StorageUnavailable):  # it expires by itself
            await self._call(
                "release lease",
                lambda: self._c.upsert(
                    state,
                    [point],
                    wait=True,
                    ordering=models.WriteOrdering.MEDIUM,
                    update_filter=mine,
                    update_mode=models.UpdateMode.UPDATE_ONLY,
                ),
            )

    async def set_fields(self, collection: str, updates: Mapping[str, Mapping[str, Any]]) -> None:
        encoded = encode_updates(updates)
        await self._spec(collection)
        if not encoded:
            return
        qname = self._qname(collection)
        for payload in encoded.values():
            if "content" in payload:  # the cue follows the text
                payload.update(cue_payload(str(payload["content"] or "")))
        # The packed ranking value follows the fields it is made of: computed from the stored
        # fields with the change, written with it, then checked (below).
        ranked = {pid for pid, payload in encoded.items() if _RANKED.intersection(payload)}
        wanted: list[models.ExtendedPointId] = list(encoded)
        fields: list[str] | bool = list(SERVER_CANDIDATE_FIELDS) if ranked else False
        found = await self._call(
            "retrieve",
            lambda: self._c.retrieve(qname, ids=wanted, with_payload=fields, with_vectors=False),
            collection=collection,
        )
        existing = {str(r.id): r.payload or {} for r in found}
        for pid in ranked & existing.keys():
            encoded[pid][PACKED_FIELD] = _pack({**existing[pid], **encoded[pid]}, collection)
        ops: list[models.UpdateOperation] = [
            models.SetPayloadOperation(set_payload=models.SetPayload(payload=payload, points=[pid]))
            for pid, payload in encoded.items()
            if pid in existing  # missing ids are skipped, as in retrieve
        ]
        if ops:
            await self._call(
                "set fields",
                lambda: self._c.batch_update_points(qname, update_operations=ops, wait=True),
                collection=collection,
            )
        if ranked & existing.keys():
            await self._check_packed(collection, sorted(ranked & existing.keys()))

    async def _check_packed(self, collection: str, ids: list[str]) -> None:
        """Clear the packed ranking value of those of ``ids`` whose value is not the one of their
        fields as stored now: another writer (another Engram replica) changed a field between
        ``set_fields``' read and its write. A point without a packed value is read through its
        fields, so clearing is always right; each writer checks after its own write, so the last
        write to a point is always checked."""
        qname = self._qname(collection)
        wanted: list[models.ExtendedPointId] = list(ids)
        found = await self._call(
            "retrieve",
            lambda: self._c.retrieve(
                qname, ids=wanted, with_payload=[PACKED_FIELD, *SERVER_CANDIDATE_FIELDS], with_vectors=False
            ),
            collection=collection,
        )
        stale: list[models.ExtendedPointId] = []
        for r in found:
            payload = r.payload or {}
            packed = payload.get(PACKED_FIELD)
            if packed is not None and packed != _pack(payload, collection):
                stale.append(r.id)
        if stale:
            log.warning(
                "Qdrant collection %s: %d points' ranking fields changed during an update; "
                "their packed ranking value is cleared (they are read field by field)",
                qname,
                len(stale),
            )
            await self._call(
                "set fields",
                lambda: self._c.set_payload(
                    qname, payload={PACKED_FIELD: None}, points=models.PointIdsList(points=stale), wait=True
                ),
                collection=collection,
            )

    async def add_access(
        self, collection: str, hits: Mapping[str, tuple[int, float]]
    ) -> dict[str, tuple[int, float]]:
        wanted = access_hits(hits)
        await self._spec(collection)
        if not wanted:
            return {}
        qname = self._qname(collection)
        ids: list[models.ExtendedPointId] = list(wanted)
        raw = self._raw
        found: list[tuple[str, dict[str, Any]]]
        if raw is not None:
            keys, sel = [str(i) for i in ids], self._access_payload
            found = await self._call("retrieve", lambda: raw.get(qname, keys, sel), collection=collection)
        else:
            records = await self._call(
                "retrieve",
                lambda: self._c.retrieve(
                    qname, ids=ids, with_payload=list(ACCESS_FIELDS), with_vectors=False
                ),
                collection=collection,
            )
            found = [(str(r.id), r.payload or {}) for r in records]
        counters: dict[str, tuple[int, float]] = {}
        updates: dict[str, dict[str, Any]] = {}
        for key, current in found:
            payload = access_update(current, *wanted[key])
            if payload is not None:
                counters[key] = (payload["access_count"], payload["last_accessed_at"])
                updates[key] = payload
        if not updates:
            return counters
        if raw is not None:
            await self._call(
                "count accesses", lambda: raw.set_payloads(qname, updates), collection=collection
            )
            return counters
        ops: list[models.UpdateOperation] = [
            models.SetPayloadOperation(set_payload=models.SetPayload(payload=payload, points=[key]))
            for key, payload in updates.items()
        ]
        await self._call(
            "count accesses",
            lambda: self._c.batch_update_points(qname, update_operations=ops, wait=True),
            collection=collection,
        )
        return counters


#: The payload fields the packed ranking value is made of.
_RANKED: frozenset[str] = frozenset(SERVER_CANDIDATE_FIELDS)


def _decoded_fields(key: str, payload: Mapping[str, Any], collection: str) -> CandidateFields:
    """``candidate_fields`` of a payload decoded in full (raises ``StorageUnavailable`` when its
    ranking fields are unreadable)."""
    kind, importance, created, until, script, _, _ = rank_fields(key, payload, collection)
    return kind, importance, created, until, script, stored_cue(payload)


def _pack(payload: Mapping[str, Any], collection: str) -> list[Any] | None:
    """The packed ranking value (``PACKED_FIELD``) of a payload's fields; None when they are
    unreadable or cannot be packed (a search then reads the fields themselves)."""
    try:
        row = _decoded_fields("", payload, collection)
    except StorageUnavailable:
        return None
    return pack_fields(row)


def _packed(payload: dict[str, Any], collection: str) -> dict[str, Any]:
    """A new point's payload with its packed ranking value (none when it cannot be packed)."""
    packed = _pack(payload, collection)
    if packed is not None:
        payload[PACKED_FIELD] = packed
    return payload


def _with_cue(payload: dict[str, Any], content: str) -> dict[str, Any]:
    """A new point's payload with its rescoring cue fields (no label field when it has none)."""
    payload.update((k, v) for k, v in cue_payload(content).items() if v is not None)
    return payload


def _prepare_backup_dir(dest: Path) -> None:
    if dest.exists() and any(dest.iterdir()):
        raise InvalidArgument.of("directory", f"{dest} is not empty")
    (dest / "qdrant").mkdir(parents=True, exist_ok=True)


def _tree_bytes(root: Path) -> int:
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file())


def _probe_local_lock(path: str) -> None:
    """qdrant-client local mode flocks ``<path>/.lock`` and, when that fails, leaks the open
    file. Probe the same lock first so a second opener gets a clean error."""
    lock_path = os.path.join(path, ".lock")
    if not os.path.exists(lock_path):
        return
    with open(lock_path, "rb") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            raise StorageUnavailable(
                f"local Qdrant storage {path} is in use by another process or store"
            ) from exc
        fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _own_names(qnames: Sequence[str], prefix: str) -> list[str]:
    """The names (without ``prefix``) of the Qdrant collections that may hold this store's
    collections: ``prefix`` followed by a valid Engram collection name. Whether one does is told
    by its spec (``QdrantStore._spec_of``): ``prefix + "old_x"`` may be another deployment's
    ``x`` (prefix ``prefix + "old_"``)."""
    out: list[str] = []
    for qname in qnames:
        if not qname.startswith(prefix):
            continue
        name = qname[len(prefix) :]
        try:
            validate_collection_name(name)
        except InvalidArgument:
            continue  # e.g. the state collection (prefix + "_engram_state")
        out.append(name)
    return out


def _not_found(name: str) -> CollectionNotFound:
    return CollectionNotFound(f"collection {name!r} does not exist", metadata={"collection": name})


def _qdrant_condition(c: Condition) -> models.Condition:
    if isinstance(c, MatchValue):
        return models.FieldCondition(key=c.key, match=models.MatchValue(value=c.value))
    if isinstance(c, MatchAny):
        return models.FieldCondition(key=c.key, match=models.MatchAny(any=list(c.values)))
    if isinstance(c, Range):
        return models.FieldCondition(key=c.key, range=models.Range(gte=c.gte, gt=c.gt, lte=c.lte, lt=c.lt))
    if isinstance(c, IsEmpty):
        return models.IsEmptyCondition(is_empty=models.PayloadField(key=c.key))
    raise TypeError(f"unknown condition {c!r}")


def _qdrant_vector(spec: CollectionSpec, p: StoredPoint, dense: list[float]) -> models.VectorStruct:
    if spec.lexical is None:
        return dense
    named: dict[str, models.Vector] = {"": dense}
    if p.sparse:
        named[LEXICAL_VECTOR] = models.SparseVector(
            indices=list(p.sparse.indices), values=list(p.sparse.values)
        )
    return named


def _qdrant_filter(plan: FilterPlan) -> models.Filter | None:
    if not plan.must:
        return None
    return models.Filter(must=[_qdrant_condition(c) for c in plan.must])


def _token_is(token: int) -> models.Filter:
    return models.Filter(must=[models.FieldCondition(key="token", match=models.MatchValue(value=token))])


def _lock_id(collection: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"engram-lease:{collection}"))


def _state_id(key: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"engram-state:{key}"))
