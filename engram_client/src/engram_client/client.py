"""EngramClient (blocking) and AsyncEngramClient (asyncio): one method per MemoryService RPC.

Example (the asyncio client is the same with ``async with`` and ``await``)::

    from engram_client import EngramClient, ProtectedMemoryError

    with EngramClient("localhost:50051", api_key="…") as engram:
        added = engram.add(
            "Frank prefers concise commit messages, imperative mood, no emoji.",
            type="directive",
            importance=8,
            tags=["frank", "preference"],
        )
        hits = engram.search("how does Frank like commit messages", limit=3)
        best = hits[0]
        print(best.memory.content, best.score.final, best.score.relevance)

        updated = engram.update(added.memory.id, content="Frank wants one-line commit messages.")
        assert updated.changed and updated.memory.version == 2

        try:
            engram.delete(added.memory.id)  # directive memories are protected...
        except ProtectedMemoryError:
            engram.delete(added.memory.id, force=True)  # ...unless forced

Deadlines and retries: every call has a deadline (``timeout``, default 10 s or ``ENGRAM_TIMEOUT``)
that covers all its attempts. A call that fails with UNAVAILABLE is retried with exponential
backoff (:class:`~engram_client.config.RetryPolicy`); no other failure is retried. Writes are safe
to retry:

* ``add`` sends a ``request_id`` (a fresh UUID unless you give one) that is reused by every
  attempt, so the server answers a repeat with the first answer (``replayed=True``).
* ``update`` has no request_id: applying the same change again to a memory that already has it
  writes nothing (``changed=False``). For a semantic locate (``locate=``) the retry locates again;
  if the lost attempt had changed the content so much that nothing matches, you get
  :class:`~engram_client.errors.NoMatchError`.
* ``delete`` by id: if an attempt fails with UNAVAILABLE and the retry answers MEMORY_NOT_FOUND,
  the lost attempt most likely deleted it: you get a ``DeleteResult`` with ``already_deleted=True``
  and no ``deleted`` memories instead of an error. A NOT_FOUND on the first attempt is raised.
* ``delete`` by query is not retried (a dry run is): if the lost attempt deleted the best match, a
  retry would delete the next one above the threshold. The UnavailableError is raised instead.
* ``delete_collection`` is treated like ``delete`` by id.
"""

# The `timeout` parameters below are gRPC deadlines sent to the server with the call (as in
# grpc.aio's own API), not local waits that asyncio.timeout could replace.
# ruff: noqa: ASYNC109

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterable, AsyncIterator, Generator, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Self, TypeVar, cast

import grpc
import grpc.aio

from engram_client import _call, _otel, _plans
from engram_client._plans import Plan
from engram_client.config import ConnectionConfig, RetryPolicy
from engram_client.errors import error_from_rpc_error
from engram_client.models import (
    AddResult,
    CollectionInfo,
    ConsolidationResult,
    ContextPack,
    ConversationMessage,
    DeleteCollectionResult,
    DeleteResult,
    ExtractionResult,
    GateDecisions,
    GetResult,
    Memory,
    MemoryFilter,
    MemoryType,
    MemoryTypeName,
    NewMemory,
    Page,
    RankingWeights,
    ReflectionResult,
    ReflectionRun,
    RestoreResult,
    SearchResults,
    Slot,
    SlotUpdate,
    Source,
    SourceName,
    SourceType,
    SourceTypeName,
    ToolObservation,
    TopicMemories,
    TopicPage,
    TrashedCollection,
    Triggers,
    UpdateResult,
)
from engram_client.proto.engram.v1 import memory_pb2, memory_service_pb2, memory_service_pb2_grpc

__all__ = ["AsyncEngramClient", "EngramClient"]

R = TypeVar("R")

_VERSION = "0.1.0a1"


def _channel_options(extra: Sequence[tuple[str, Any]]) -> list[tuple[str, Any]]:
    return [("grpc.primary_user_agent", f"engram-client-python/{_VERSION}"), *extra]


def _credentials(config: ConnectionConfig) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(
        root_certificates=config.root_certificates,
        private_key=config.private_key,
        certificate_chain=config.certificate_chain,
    )


class _ClientBase:
    def __init__(
        self,
        target: str | None,
        *,
        api_key: str | None,
        tls: bool | None,
        root_certificates: bytes | None,
        private_key: bytes | None,
        certificate_chain: bytes | None,
        timeout: float | None,
        retry: RetryPolicy | None,
        metadata: Sequence[tuple[str, str]],
        env: Mapping[str, str] | None,
    ) -> None:
        self.config = ConnectionConfig.resolve(
            target,
            api_key=api_key,
            tls=tls,
            root_certificates=root_certificates,
            private_key=private_key,
            certificate_chain=certificate_chain,
            timeout=timeout,
            env=env,
        )
        self.retry_policy = retry or RetryPolicy()
        self._metadata = self.config.call_metadata(tuple(metadata))
        self._peer = _otel.peer_attributes(self.config.target)

    @property
    def target(self) -> str:
        return self.config.target

    def _timeout(self, timeout: float | None) -> float | None:
        return self.config.timeout if timeout is None else timeout

    def _attempts(
        self, plan: Plan[R], timeout: float | None, span: _otel.CallSpan
    ) -> Generator[_call.Step, Any, R]:
        """The call's attempt loop (:mod:`engram_client._call`); each face performs its steps."""
        return _call.attempts(
            plan, policy=self.retry_policy, timeout=self._timeout(timeout), metadata=self._metadata, span=span
        )


class EngramClient(_ClientBase):
    """Blocking client. Use as a context manager, or call :meth:`close` when done.

    Args:
        target: ``host:port`` of the server; default ``ENGRAM_ADDR`` or ``localhost:50051``.
        api_key: sent as ``authorization: Bearer <key>``; default ``ENGRAM_API_KEY``.
        tls: use TLS; default from the target's scheme, ``ENGRAM_TLS`` or the presence of certificates.
        root_certificates / private_key / certificate_chain: PEM bytes; default from
            ``ENGRAM_TLS_CA_FILE`` / ``ENGRAM_TLS_KEY_FILE`` / ``ENGRAM_TLS_CERT_FILE``.
        timeout: default deadline of a call in seconds, retries included (``ENGRAM_TIMEOUT``, 10).
        retry: the retry policy for UNAVAILABLE failures.
        metadata: extra call metadata sent with every call.
        channel_options: extra gRPC channel options.
        env: the environment to read (default ``os.environ``).
    """

    def __init__(
        self,
        target: str | None = None,
        *,
        api_key: str | None = None,
        tls: bool | None = None,
        root_certificates: bytes | None = None,
        private_key: bytes | None = None,
        certificate_chain: bytes | None = None,
        timeout: float | None = None,
        retry: RetryPolicy | None = None,
        metadata: Sequence[tuple[str, str]] = (),
        channel_options: Sequence[tuple[str, Any]] = (),
        env: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(
            target,
            api_key=api_key,
            tls=tls,
            root_certificates=root_certificates,
            private_key=private_key,
            certificate_chain=certificate_chain,
            timeout=timeout,
            retry=retry,
            metadata=metadata,
            env=env,
        )
        options = _channel_options(channel_options)
        if self.config.tls:
            self._channel = grpc.secure_channel(self.config.target, _credentials(self.config), options)
        else:
            self._channel = grpc.insecure_channel(self.config.target, options)
        self._stub = memory_service_pb2_grpc.MemoryServiceStub(self._channel)

    @property
    def stub(self) -> memory_service_pb2_grpc.MemoryServiceStub:
        """The generated stub, for raw protobuf calls (no deadline, retry or error mapping)."""
        return self._stub

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _run(self, plan: Plan[R], timeout: float | None) -> R:
        rpc = getattr(self._stub, plan.method)
        with _otel.call_span(plan.method, self._peer) as span:
            steps = self._attempts(plan, timeout, span)
            step = next(steps)
            while True:
                try:
                    if isinstance(step, _call.Sleep):
                        time.sleep(step.seconds)
                        step = next(steps)
                        continue
                    try:
                        response = rpc(step.request, timeout=step.timeout, metadata=step.metadata)
                    except grpc.RpcError as exc:
                        failure: grpc.RpcError | None = exc
                    else:
                        failure = None
                    # Outside the except block, so the call's error is not chained to the RpcError.
                    step = steps.send(response) if failure is None else steps.throw(failure)
                except StopIteration as done:
                    return cast("R", done.value)

    def add(
        self,
        content: str,
        *,
        collection: str | None = None,
        type: MemoryType | MemoryTypeName | None = None,
        importance: int | None = None,
        tags: Sequence[str] = (),
        source: Source | SourceName | None = None,
        source_type: SourceType | SourceTypeName | None = None,
        metadata: Mapping[str, str] | None = None,
        created_at: datetime | None = None,
        valid_until: datetime | None = None,
        request_id: str | None = None,
        allow_duplicate: bool = False,
        session_id: str | None = None,
        agent_id: str | None = None,
        contradictions: str | None = None,
        timeout: float | None = None,
    ) -> AddResult:
        """Store a memory unless a near-copy exists (then ``outcome`` is DUPLICATE and nothing is
        written). ``type`` defaults to event, ``importance`` to 5, ``source`` to agent. Check
        ``near_duplicates`` (0.70–0.92): updating one of them is often better than adding.
        ``request_id`` (default: a new UUID, reused by retries) makes repeats return the first answer.

        A memory above 0.92 whose numbers, dates, ids, names or negation differ is a different fact:
        the memory is written, ``gate_reason`` is ``"conflicting_specifics"`` and the stored one is
        listed in ``near_duplicates`` with its ``conflicts``. ``allow_duplicate=True`` writes even a
        duplicate (``gate_reason`` ``"allow_duplicate"``). ``session_id`` / ``agent_id`` record the
        agent session and the agent writing it (filters, the per-session search cap and
        :meth:`get_context`'s "last session" read them).

        A stored memory the new one contradicts (the same subject with another value: "moved from
        X to Y", a changed number or date, a negation) is listed in ``conflicts`` and, by default,
        superseded (history, never searched); ``contradictions="report"`` only lists it,
        ``"off"`` does not look.
        """
        plan = _plans.add(
            content,
            collection=collection,
            type=type,
            importance=importance,
            tags=tags,
            source=source,
            source_type=source_type,
            metadata=metadata,
            created_at=created_at,
            valid_until=valid_until,
            request_id=request_id,
            allow_duplicate=allow_duplicate,
            session_id=session_id,
            agent_id=agent_id,
            contradictions=contradictions,
        )
        return self._run(plan, timeout)

    def add_many(
        self,
        memories: Iterable[NewMemory | str],
        *,
        collection: str | None = None,
        timeout: float | None = None,
    ) -> list[AddResult]:
        """Store several memories in one call (imports): one :class:`AddResult` per memory, in
        order. A plain string is ``NewMemory(content)``.

        Each memory goes through the write gate as with :meth:`add` — against the collection and
        against the earlier memories of the same call: a near-copy of an earlier one is a
        ``DUPLICATE`` of it (``duplicate_of_index`` names it) — and each gets its own
        ``request_id`` (a new UUID unless given, reused by retries). If any memory is invalid the
        whole call fails with :class:`~engram_client.errors.InvalidArgumentError` naming
        ``memories[i].<field>`` and nothing is written. The server caps a call at
        ``ENGRAM_MAX_BATCH_ITEMS`` memories (default 64); split larger imports into several calls.
        """
        return self._run(_plans.add_many(memories, collection=collection), timeout)

    def search(
        self,
        query: str,
        *,
        collections: str | Sequence[str] | None = None,
        limit: int = 5,
        filter: MemoryFilter | None = None,
        weights: RankingWeights | None = None,
        diversify: bool = False,
        mmr_lambda: float | None = None,
        min_relevance: float = 0.0,
        max_per_session: int = 0,
        reading: str | None = None,
        rerank: bool | None = None,
        timeout: float | None = None,
    ) -> SearchResults:
        """The best memories for ``query``, best first, each with its score parts. ``collections``
        (one name or several) defaults to every collection the caller may read; a named collection
        that does not exist raises :class:`CollectionNotFoundError`. ``max_per_session`` > 0 keeps at
        most that many results from one session (memories without a session are not capped).
        ``reading`` is ``"statement"`` for a text you mean to store (its relevance is then the write
        gate's similarity for the pair), ``"query"`` for a question or keywords; by default the
        server reads it by its form (a sentence ending with ``.`` / ``。`` / ``!`` is a statement).
        ``rerank=False`` skips the server's cross-encoder for this call (faster, a little less
        accurate on English questions); ``True`` asks for it (a server without the model answers
        without); None (the default) leaves it to the server (``ENGRAM_RERANK``)."""
        plan = _plans.search(
            query,
            collections=collections,
            limit=limit,
            filter=filter,
            weights=weights,
            diversify=diversify,
            mmr_lambda=mmr_lambda,
            min_relevance=min_relevance,
            max_per_session=max_per_session,
            reading=reading,
            rerank=rerank,
        )
        return self._run(plan, timeout)

    def update(
        self,
        id: str | None = None,
        *,
        locate: str | None = None,
        threshold: float | None = None,
        collection: str | None = None,
        content: str | None = None,
        type: MemoryType | MemoryTypeName | None = None,
        importance: int | None = None,
        tags: Sequence[str] | None = None,
        metadata: Mapping[str, str] | None = None,
        valid_until: datetime | None = None,
        dry_run: bool = False,
        timeout: float | None = None,
    ) -> UpdateResult:
        """Change a memory found by ``id`` or by meaning (``locate``: text close to its content,
        accepted at calibrated similarity ≥ ``threshold``, default and minimum 0.85; or a question
        it answers, accepted at relevance ≥ 0.70 with a clear lead when ``content`` is about the
        memory found — see docs/concepts/updates-deletes.md). Arguments left
        ``None`` keep their value; ``tags``/``metadata`` replace all. The id stays; the old version
        is kept as history. ``dry_run`` reports without writing."""
        plan = _plans.update(
            id,
            locate=locate,
            threshold=threshold,
            collection=collection,
            content=content,
            type=type,
            importance=importance,
            tags=tags,
            metadata=metadata,
            valid_until=valid_until,
            dry_run=dry_run,
        )
        return self._run(plan, timeout)

    def delete(
        self,
        id: str | None = None,
        *,
        query: str | None = None,
        threshold: float | None = None,
        limit: int | None = None,
        collection: str | None = None,
        force: bool = False,
        dry_run: bool = False,
        timeout: float | None = None,
    ) -> DeleteResult:
        """Delete one memory by ``id`` (with its history) or the memories matching ``query``
        (at most ``limit``, default 1, at calibrated similarity ≥ ``threshold``, default 0.85).
        Identity and directive memories need ``force=True`` (else ProtectedMemoryError)."""
        plan = _plans.delete(
            id,
            query=query,
            threshold=threshold,
            limit=limit,
            collection=collection,
            force=force,
            dry_run=dry_run,
        )
        return self._run(plan, timeout)

    def get(
        self,
        id: str,
        *,
        collection: str | None = None,
        include_history: bool = False,
        timeout: float | None = None,
    ) -> GetResult:
        """Read one memory (current or a history version), optionally with its earlier versions."""
        plan = _plans.get(id, collection=collection, include_history=include_history)
        return self._run(plan, timeout)

    def list_memories(
        self,
        *,
        collection: str | None = None,
        filter: MemoryFilter | None = None,
        page_size: int = 100,
        page_token: str | None = None,
        include_history: bool = False,
        timeout: float | None = None,
    ) -> Page:
        """One page of a collection's memories in storage order; see :meth:`iter_memories`."""
        plan = _plans.list_memories(
            collection=collection,
            filter=filter,
            page_size=page_size,
            page_token=page_token,
            include_history=include_history,
        )
        return self._run(plan, timeout)

    def iter_memories(
        self,
        *,
        collection: str | None = None,
        filter: MemoryFilter | None = None,
        page_size: int = 100,
        include_history: bool = False,
        timeout: float | None = None,
    ) -> Iterator[Memory]:
        """Every memory of a collection, page by page (each page is one call with its own deadline)."""
        token: str | None = None
        while True:
            page = self.list_memories(
                collection=collection,
                filter=filter,
                page_size=page_size,
                page_token=token,
                include_history=include_history,
                timeout=timeout,
            )
            yield from page.memories
            token = page.next_page_token
            if token is None:
                return

    def list_collections(self, *, timeout: float | None = None) -> list[CollectionInfo]:
        """The collections with their live memory counts."""
        return self._run(_plans.list_collections(), timeout)

    def delete_collection(self, name: str, *, timeout: float | None = None) -> DeleteCollectionResult:
        """Remove a collection and every memory in it (to the server's trash: see
        :meth:`restore_collection`)."""
        return self._run(_plans.delete_collection(name), timeout)

    def list_trash(
        self,
        *,
        collection: str | None = None,
        page_size: int = 100,
        page_token: str | None = None,
        timeout: float | None = None,
    ) -> Page:
        """One page of the memories in ``collection``'s trash (deleted, not yet purged), each with
        ``trashed_at`` and ``purge_at``."""
        return self._run(
            _plans.list_trash(collection=collection, page_size=page_size, page_token=page_token), timeout
        )

    def restore(
        self, id: str, *, collection: str | None = None, timeout: float | None = None
    ) -> RestoreResult:
        """Take a deleted memory (with its history) out of the trash, as it was. Live near-copies
        written meanwhile are reported in ``near_duplicates``. MemoryNotFoundError when it is not in
        the trash (never deleted, purged, or expired meanwhile)."""
        return self._run(_plans.restore(id, collection=collection), timeout)

    def purge_trash(
        self,
        ids: Sequence[str] = (),
        *,
        collection: str | None = None,
        purge_collection: bool = False,
        timeout: float | None = None,
    ) -> int:
        """Delete for good what is in ``collection``'s trash (only ``ids``, when given), or with
        ``purge_collection`` the collection itself, which must be in the trash (admin role).
        Returns how many stored memories (history versions included) went."""
        plan = _plans.purge_trash(collection=collection, ids=ids, purge_collection=purge_collection)
        return self._run(plan, timeout)

    def list_trashed_collections(self, *, timeout: float | None = None) -> list[TrashedCollection]:
        """The collections in the trash (deleted with :meth:`delete_collection`, not yet purged)."""
        return self._run(_plans.list_trashed_collections(), timeout)

    def restore_collection(self, name: str, *, timeout: float | None = None) -> CollectionInfo:
        """Take a deleted collection out of the trash, with its memories (admin role)."""
        return self._run(_plans.restore_collection(name), timeout)

    def run_reflection(
        self,
        *,
        collection: str | None = None,
        dry_run: bool = False,
        force: bool = False,
        timeout: float | None = None,
    ) -> ReflectionResult:
        """Run one reflection pass over ``collection``: an LLM distils its unreflected memories into
        up to three insights, stored in ``<collection>_reflection``. The server throttles runs
        (minimum interval, which ``force`` skips; daily cap; minimum summed importance): a refused
        run is ``outcome=THROTTLED``, not an error. ``dry_run`` evaluates the gates and picks the
        sources without calling the LLM or writing.

        Raises UnimplementedError("reflection is not available on this server") when the server
        has no RunReflection (an older server); LlmNotConfiguredError when it has no LLM endpoint;
        LlmUnavailableError / LlmInvalidOutputError when the LLM fails (nothing is written)."""
        return self._run(_plans.run_reflection(collection=collection, dry_run=dry_run, force=force), timeout)

    def gate_decisions(
        self, *, collection: str | None = None, limit: int = 0, timeout: float | None = None
    ) -> GateDecisions:
        """The write gate's most recent decisions in a collection, newest first: what
        :meth:`add` / :meth:`add_many` were asked to store and what the gate did (created,
        created beside near-duplicates, or refused as a duplicate). At most ``limit`` (1–256;
        0 means 50). The serving process keeps the last 256 per collection in memory: a restart,
        or another replica, starts empty."""
        return self._run(_plans.gate_decisions(collection=collection, limit=limit), timeout)

    def reflection_runs(
        self, *, collection: str | None = None, limit: int = 0, timeout: float | None = None
    ) -> list[ReflectionRun]:
        """The collection's recent reflection runs that called the LLM (completed, no insight or
        failed; scheduled or asked for), newest first: at most ``limit`` (1–50; 0 means 20). The
        server keeps the last 50 per collection with the store."""
        return self._run(_plans.reflection_runs(collection=collection, limit=limit), timeout)

    def extract(
        self,
        *,
        text: str | None = None,
        messages: Sequence[ConversationMessage | tuple[str, str]] | None = None,
        observation: ToolObservation | None = None,
        collection: str | None = None,
        mode: str = "auto",
        dry_run: bool = False,
        tags: Sequence[str] = (),
        timeout: float | None = None,
    ) -> ExtractionResult:
        """Extract the memories worth keeping from one input — ``text``, a conversation
        (``messages``: :class:`ConversationMessage` or ``(role, content)`` pairs) or a tool
        ``observation`` — and write each through the write gate. The server's privacy filter
        removes secrets and ``<private>`` spans first. ``mode="auto"`` uses the server's LLM when
        it has one (falling back to its rules when the LLM fails: see ``fallback_reason``);
        ``"rules"`` never calls it. ``dry_run`` returns the proposals and writes nothing. An input
        repeated within the server's dedup window comes back ``deduplicated`` and empty."""
        plan = _plans.extract(
            text=text,
            messages=messages,
            observation=observation,
            collection=collection,
            mode=mode,
            dry_run=dry_run,
            tags=tags,
        )
        return self._run(plan, timeout)

    def get_context(
        self,
        query: str | None = None,
        *,
        collections: str | Sequence[str] | None = None,
        token_budget: int | None = None,
        since: datetime | None = None,
        session_id: str | None = None,
        agent_id: str | None = None,
        timeout: float | None = None,
    ) -> ContextPack:
        """The context pack to load at session start or after a context compaction: core (slots,
        identity and directive memories), trigger names, open items (tagged ``pending``), the best
        memories for ``query`` if given, what changed since ``since`` (default: the start of this
        agent's last session other than ``session_id``, else the last 7 days) and topics, within
        ``token_budget`` tokens (default 2,000; at most 32,000); ``markdown`` is ready to inject."""
        plan = _plans.get_context(
            query,
            collections=collections,
            token_budget=token_budget,
            since=since,
            session_id=session_id,
            agent_id=agent_id,
        )
        return self._run(plan, timeout)

    def get_triggers(
        self,
        action: str,
        *,
        collections: str | Sequence[str] | None = None,
        limit: int = 20,
        timeout: float | None = None,
    ) -> Triggers:
        """The memories to recall before ``action`` ("deploy", "git push", "deploy/prod"): those
        tagged ``trigger:<action>`` or ``trigger:<parent>``, most important first."""
        return self._run(_plans.get_triggers(action, collections=collections, limit=limit), timeout)

    def list_slots(self, *, collection: str | None = None, timeout: float | None = None) -> list[Slot]:
        """The collection's five slots (persona, user_preferences, project_context, pending_items,
        guidance), in that order; slots never written have empty content."""
        return self._run(_plans.list_slots(collection=collection), timeout)

    def update_slot(
        self,
        name: str,
        content: str,
        *,
        collection: str | None = None,
        replace: bool = False,
        timeout: float | None = None,
    ) -> SlotUpdate:
        """Append ``content`` to slot ``name`` as a new line (``replace=True``: replace it). Past the
        slot's capacity its oldest content is compacted (LLM summary, else cut with a marker). An
        append is not retried after UNAVAILABLE (it may have landed)."""
        return self._run(_plans.update_slot(name, content, collection=collection, replace=replace), timeout)

    def run_consolidation(
        self,
        *,
        collection: str | None = None,
        dry_run: bool = False,
        force: bool = False,
        timeout: float | None = None,
    ) -> ConsolidationResult:
        """Merge clusters of related event memories of ``collection`` into one insight each (every
        number, date and name kept); the sources become the insight's history. Throttled (minimum
        interval and nothing-written-since, which ``force`` skips; daily cap): a refused run is
        ``outcome="throttled"``. ``dry_run`` reports the clusters without writing."""
        plan = _plans.run_consolidation(collection=collection, dry_run=dry_run, force=force)
        return self._run(plan, timeout)

    # --- export, import, backup (admin; long calls: no deadline unless ``timeout`` is given) -------

    def export(
        self,
        *,
        collections: Sequence[str] = (),
        filter: memory_pb2.MemoryFilter | None = None,
        include_vectors: bool = False,
        live_only: bool = False,
        timeout: float | None = None,
    ) -> Iterator[memory_service_pb2.ExportMemoriesResponse]:
        """Stream an export (Engram's JSON Lines format): concatenate the chunks' ``data`` to get
        the file; ``memories_done`` / ``memories_total`` give the progress. Every collection when
        none is named. Needs an admin key."""
        request = _export_request(collections, filter, include_vectors, live_only)
        try:
            yield from self._stub.ExportMemories(request, timeout=timeout, metadata=self._metadata)
        except grpc.RpcError as exc:
            raise error_from_rpc_error(exc) from None

    def import_memories(
        self,
        chunks: Iterable[bytes],
        *,
        mode: memory_service_pb2.ImportMode.ValueType = memory_service_pb2.IMPORT_MODE_RESTORE,
        reembed: memory_service_pb2.Reembed.ValueType = memory_service_pb2.REEMBED_AUTO,
        collection: str = "",
        timeout: float | None = None,
    ) -> memory_service_pb2.ImportMemoriesResponse:
        """Import an export file given as consecutive chunks of its bytes (any sizes, at most the
        message limit each): ids and timestamps are kept; importing the same file twice changes
        nothing. A corrupt line raises InvalidArgumentError naming it (metadata ``line``,
        ``imported``); what came before it stays. Needs an admin key."""

        def requests() -> Iterator[memory_service_pb2.ImportMemoriesRequest]:
            first = True
            for data in chunks:
                yield _import_request(data, first, mode, reembed, collection)
                first = False
            if first:
                yield _import_request(b"", first, mode, reembed, collection)

        try:
            response: memory_service_pb2.ImportMemoriesResponse = self._stub.ImportMemories(
                requests(), timeout=timeout, metadata=self._metadata
            )
        except grpc.RpcError as exc:
            raise error_from_rpc_error(exc) from None
        return response

    def backup(
        self, directory: str, *, timeout: float | None = None
    ) -> memory_service_pb2.BackupStoreResponse:
        """Back the serving store up into ``directory`` (absolute, new or empty, inside the
        server's ENGRAM_BACKUP_DIR, on the server's machine). Needs an admin key."""
        try:
            response: memory_service_pb2.BackupStoreResponse = self._stub.BackupStore(
                memory_service_pb2.BackupStoreRequest(directory=directory),
                timeout=timeout,
                metadata=self._metadata,
            )
        except grpc.RpcError as exc:
            raise error_from_rpc_error(exc) from None
        return response

    def list_topics(
        self,
        *,
        collection: str | None = None,
        parent_id: str | None = None,
        page_size: int = 0,
        page_token: str | None = None,
        timeout: float | None = None,
    ) -> TopicPage:
        """The collection's topic index: top-level topics largest first, each with its
        sub-topics (or, with ``parent_id``, that topic's sub-topics). ``page_size`` 1–200, 0 means
        50. Every write made before the call is reflected. Raises TopicNotFoundError for an
        unknown ``parent_id``."""
        plan = _plans.list_topics(
            collection=collection, parent_id=parent_id, page_size=page_size, page_token=page_token
        )
        return self._run(plan, timeout)

    def get_topic(
        self,
        id: str,
        *,
        collection: str | None = None,
        page_size: int = 0,
        page_token: str | None = None,
        timeout: float | None = None,
    ) -> TopicMemories:
        """One topic and a page of its memories, the most central first (``page_size`` 1–1000, 0
        means 20). Raises TopicNotFoundError for an unknown id."""
        plan = _plans.get_topic(id, collection=collection, page_size=page_size, page_token=page_token)
        return self._run(plan, timeout)


def _export_request(
    collections: Sequence[str],
    filter: memory_pb2.MemoryFilter | None,
    include_vectors: bool,
    live_only: bool,
) -> memory_service_pb2.ExportMemoriesRequest:
    request = memory_service_pb2.ExportMemoriesRequest(
        collections=list(collections), include_vectors=include_vectors, live_only=live_only
    )
    if filter is not None:
        request.filter.CopyFrom(filter)
    return request


def _import_request(
    data: bytes,
    first: bool,
    mode: memory_service_pb2.ImportMode.ValueType,
    reembed: memory_service_pb2.Reembed.ValueType,
    collection: str,
) -> memory_service_pb2.ImportMemoriesRequest:
    """One message of an import stream: the first carries the options, the rest only data."""
    if first:
        return memory_service_pb2.ImportMemoriesRequest(
            data=data, mode=mode, reembed=reembed, collection=collection
        )
    return memory_service_pb2.ImportMemoriesRequest(data=data)


class AsyncEngramClient(_ClientBase):
    """asyncio client; same arguments and methods as :class:`EngramClient`, awaited.

    Create it inside a running event loop (``async with AsyncEngramClient() as engram: …``).
    """

    def __init__(
        self,
        target: str | None = None,
        *,
        api_key: str | None = None,
        tls: bool | None = None,
        root_certificates: bytes | None = None,
        private_key: bytes | None = None,
        certificate_chain: bytes | None = None,
        timeout: float | None = None,
        retry: RetryPolicy | None = None,
        metadata: Sequence[tuple[str, str]] = (),
        channel_options: Sequence[tuple[str, Any]] = (),
        env: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(
            target,
            api_key=api_key,
            tls=tls,
            root_certificates=root_certificates,
            private_key=private_key,
            certificate_chain=certificate_chain,
            timeout=timeout,
            retry=retry,
            metadata=metadata,
            env=env,
        )
        options = _channel_options(channel_options)
        if self.config.tls:
            self._channel = grpc.aio.secure_channel(self.config.target, _credentials(self.config), options)
        else:
            self._channel = grpc.aio.insecure_channel(self.config.target, options)
        self._stub = cast(
            "memory_service_pb2_grpc.MemoryServiceAsyncStub",
            memory_service_pb2_grpc.MemoryServiceStub(self._channel),
        )

    @property
    def stub(self) -> memory_service_pb2_grpc.MemoryServiceAsyncStub:
        """The generated asyncio stub, for raw protobuf calls (no deadline, retry or error mapping)."""
        return self._stub

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def _run(self, plan: Plan[R], timeout: float | None) -> R:
        rpc = getattr(self._stub, plan.method)
        with _otel.call_span(plan.method, self._peer) as span:
            steps = self._attempts(plan, timeout, span)
            step = next(steps)
            while True:
                try:
                    if isinstance(step, _call.Sleep):
                        await asyncio.sleep(step.seconds)
                        step = next(steps)
                        continue
                    try:
                        response = await rpc(step.request, timeout=step.timeout, metadata=step.metadata)
                    except grpc.RpcError as exc:
                        failure: grpc.RpcError | None = exc
                    else:
                        failure = None
                    # Outside the except block, so the call's error is not chained to the RpcError.
                    step = steps.send(response) if failure is None else steps.throw(failure)
                except StopIteration as done:
                    return cast("R", done.value)

    async def add(
        self,
        content: str,
        *,
        collection: str | None = None,
        type: MemoryType | MemoryTypeName | None = None,
        importance: int | None = None,
        tags: Sequence[str] = (),
        source: Source | SourceName | None = None,
        source_type: SourceType | SourceTypeName | None = None,
        metadata: Mapping[str, str] | None = None,
        created_at: datetime | None = None,
        valid_until: datetime | None = None,
        request_id: str | None = None,
        allow_duplicate: bool = False,
        session_id: str | None = None,
        agent_id: str | None = None,
        contradictions: str | None = None,
        timeout: float | None = None,
    ) -> AddResult:
        """See :meth:`EngramClient.add`."""
        plan = _plans.add(
            content,
            collection=collection,
            type=type,
            importance=importance,
            tags=tags,
            source=source,
            source_type=source_type,
            metadata=metadata,
            created_at=created_at,
            valid_until=valid_until,
            request_id=request_id,
            allow_duplicate=allow_duplicate,
            session_id=session_id,
            agent_id=agent_id,
            contradictions=contradictions,
        )
        return await self._run(plan, timeout)

    async def add_many(
        self,
        memories: Iterable[NewMemory | str],
        *,
        collection: str | None = None,
        timeout: float | None = None,
    ) -> list[AddResult]:
        """See :meth:`EngramClient.add_many`."""
        return await self._run(_plans.add_many(memories, collection=collection), timeout)

    async def search(
        self,
        query: str,
        *,
        collections: str | Sequence[str] | None = None,
        limit: int = 5,
        filter: MemoryFilter | None = None,
        weights: RankingWeights | None = None,
        diversify: bool = False,
        mmr_lambda: float | None = None,
        min_relevance: float = 0.0,
        max_per_session: int = 0,
        reading: str | None = None,
        rerank: bool | None = None,
        timeout: float | None = None,
    ) -> SearchResults:
        """See :meth:`EngramClient.search`."""
        plan = _plans.search(
            query,
            collections=collections,
            limit=limit,
            filter=filter,
            weights=weights,
            diversify=diversify,
            mmr_lambda=mmr_lambda,
            min_relevance=min_relevance,
            max_per_session=max_per_session,
            reading=reading,
            rerank=rerank,
        )
        return await self._run(plan, timeout)

    async def update(
        self,
        id: str | None = None,
        *,
        locate: str | None = None,
        threshold: float | None = None,
        collection: str | None = None,
        content: str | None = None,
        type: MemoryType | MemoryTypeName | None = None,
        importance: int | None = None,
        tags: Sequence[str] | None = None,
        metadata: Mapping[str, str] | None = None,
        valid_until: datetime | None = None,
        dry_run: bool = False,
        timeout: float | None = None,
    ) -> UpdateResult:
        """See :meth:`EngramClient.update`."""
        plan = _plans.update(
            id,
            locate=locate,
            threshold=threshold,
            collection=collection,
            content=content,
            type=type,
            importance=importance,
            tags=tags,
            metadata=metadata,
            valid_until=valid_until,
            dry_run=dry_run,
        )
        return await self._run(plan, timeout)

    async def delete(
        self,
        id: str | None = None,
        *,
        query: str | None = None,
        threshold: float | None = None,
        limit: int | None = None,
        collection: str | None = None,
        force: bool = False,
        dry_run: bool = False,
        timeout: float | None = None,
    ) -> DeleteResult:
        """See :meth:`EngramClient.delete`."""
        plan = _plans.delete(
            id,
            query=query,
            threshold=threshold,
            limit=limit,
            collection=collection,
            force=force,
            dry_run=dry_run,
        )
        return await self._run(plan, timeout)

    async def get(
        self,
        id: str,
        *,
        collection: str | None = None,
        include_history: bool = False,
        timeout: float | None = None,
    ) -> GetResult:
        """See :meth:`EngramClient.get`."""
        plan = _plans.get(id, collection=collection, include_history=include_history)
        return await self._run(plan, timeout)

    async def list_memories(
        self,
        *,
        collection: str | None = None,
        filter: MemoryFilter | None = None,
        page_size: int = 100,
        page_token: str | None = None,
        include_history: bool = False,
        timeout: float | None = None,
    ) -> Page:
        """See :meth:`EngramClient.list_memories`."""
        plan = _plans.list_memories(
            collection=collection,
            filter=filter,
            page_size=page_size,
            page_token=page_token,
            include_history=include_history,
        )
        return await self._run(plan, timeout)

    async def iter_memories(
        self,
        *,
        collection: str | None = None,
        filter: MemoryFilter | None = None,
        page_size: int = 100,
        include_history: bool = False,
        timeout: float | None = None,
    ) -> AsyncIterator[Memory]:
        """See :meth:`EngramClient.iter_memories`."""
        token: str | None = None
        while True:
            page = await self.list_memories(
                collection=collection,
                filter=filter,
                page_size=page_size,
                page_token=token,
                include_history=include_history,
                timeout=timeout,
            )
            for memory in page.memories:
                yield memory
            token = page.next_page_token
            if token is None:
                return

    async def list_collections(self, *, timeout: float | None = None) -> list[CollectionInfo]:
        """See :meth:`EngramClient.list_collections`."""
        return await self._run(_plans.list_collections(), timeout)

    async def delete_collection(self, name: str, *, timeout: float | None = None) -> DeleteCollectionResult:
        """See :meth:`EngramClient.delete_collection`."""
        return await self._run(_plans.delete_collection(name), timeout)

    async def list_trash(
        self,
        *,
        collection: str | None = None,
        page_size: int = 100,
        page_token: str | None = None,
        timeout: float | None = None,
    ) -> Page:
        """One page of the memories in ``collection``'s trash (deleted, not yet purged), each with
        ``trashed_at`` and ``purge_at``."""
        return await self._run(
            _plans.list_trash(collection=collection, page_size=page_size, page_token=page_token), timeout
        )

    async def restore(
        self, id: str, *, collection: str | None = None, timeout: float | None = None
    ) -> RestoreResult:
        """Take a deleted memory (with its history) out of the trash, as it was. Live near-copies
        written meanwhile are reported in ``near_duplicates``. MemoryNotFoundError when it is not in
        the trash (never deleted, purged, or expired meanwhile)."""
        return await self._run(_plans.restore(id, collection=collection), timeout)

    async def purge_trash(
        self,
        ids: Sequence[str] = (),
        *,
        collection: str | None = None,
        purge_collection: bool = False,
        timeout: float | None = None,
    ) -> int:
        """Delete for good what is in ``collection``'s trash (only ``ids``, when given), or with
        ``purge_collection`` the collection itself, which must be in the trash (admin role).
        Returns how many stored memories (history versions included) went."""
        plan = _plans.purge_trash(collection=collection, ids=ids, purge_collection=purge_collection)
        return await self._run(plan, timeout)

    async def list_trashed_collections(self, *, timeout: float | None = None) -> list[TrashedCollection]:
        """The collections in the trash (deleted with :meth:`delete_collection`, not yet purged)."""
        return await self._run(_plans.list_trashed_collections(), timeout)

    async def restore_collection(self, name: str, *, timeout: float | None = None) -> CollectionInfo:
        """Take a deleted collection out of the trash, with its memories (admin role)."""
        return await self._run(_plans.restore_collection(name), timeout)

    async def run_reflection(
        self,
        *,
        collection: str | None = None,
        dry_run: bool = False,
        force: bool = False,
        timeout: float | None = None,
    ) -> ReflectionResult:
        """See :meth:`EngramClient.run_reflection`."""
        plan = _plans.run_reflection(collection=collection, dry_run=dry_run, force=force)
        return await self._run(plan, timeout)

    async def gate_decisions(
        self, *, collection: str | None = None, limit: int = 0, timeout: float | None = None
    ) -> GateDecisions:
        """See :meth:`EngramClient.gate_decisions`."""
        return await self._run(_plans.gate_decisions(collection=collection, limit=limit), timeout)

    async def reflection_runs(
        self, *, collection: str | None = None, limit: int = 0, timeout: float | None = None
    ) -> list[ReflectionRun]:
        """See :meth:`EngramClient.reflection_runs`."""
        return await self._run(_plans.reflection_runs(collection=collection, limit=limit), timeout)

    async def extract(
        self,
        *,
        text: str | None = None,
        messages: Sequence[ConversationMessage | tuple[str, str]] | None = None,
        observation: ToolObservation | None = None,
        collection: str | None = None,
        mode: str = "auto",
        dry_run: bool = False,
        tags: Sequence[str] = (),
        timeout: float | None = None,
    ) -> ExtractionResult:
        """See :meth:`EngramClient.extract`."""
        plan = _plans.extract(
            text=text,
            messages=messages,
            observation=observation,
            collection=collection,
            mode=mode,
            dry_run=dry_run,
            tags=tags,
        )
        return await self._run(plan, timeout)

    async def get_context(
        self,
        query: str | None = None,
        *,
        collections: str | Sequence[str] | None = None,
        token_budget: int | None = None,
        since: datetime | None = None,
        session_id: str | None = None,
        agent_id: str | None = None,
        timeout: float | None = None,
    ) -> ContextPack:
        """The context pack to load at session start or after a context compaction: core (slots,
        identity and directive memories), trigger names, open items (tagged ``pending``), the best
        memories for ``query`` if given, what changed since ``since`` (default: the start of this
        agent's last session other than ``session_id``, else the last 7 days) and topics, within
        ``token_budget`` tokens (default 2,000; at most 32,000); ``markdown`` is ready to inject."""
        plan = _plans.get_context(
            query,
            collections=collections,
            token_budget=token_budget,
            since=since,
            session_id=session_id,
            agent_id=agent_id,
        )
        return await self._run(plan, timeout)

    async def get_triggers(
        self,
        action: str,
        *,
        collections: str | Sequence[str] | None = None,
        limit: int = 20,
        timeout: float | None = None,
    ) -> Triggers:
        """The memories to recall before ``action`` ("deploy", "git push", "deploy/prod"): those
        tagged ``trigger:<action>`` or ``trigger:<parent>``, most important first."""
        return await self._run(_plans.get_triggers(action, collections=collections, limit=limit), timeout)

    async def list_slots(self, *, collection: str | None = None, timeout: float | None = None) -> list[Slot]:
        """The collection's five slots (persona, user_preferences, project_context, pending_items,
        guidance), in that order; slots never written have empty content."""
        return await self._run(_plans.list_slots(collection=collection), timeout)

    async def update_slot(
        self,
        name: str,
        content: str,
        *,
        collection: str | None = None,
        replace: bool = False,
        timeout: float | None = None,
    ) -> SlotUpdate:
        """Append ``content`` to slot ``name`` as a new line (``replace=True``: replace it). Past the
        slot's capacity its oldest content is compacted (LLM summary, else cut with a marker). An
        append is not retried after UNAVAILABLE (it may have landed)."""
        return await self._run(
            _plans.update_slot(name, content, collection=collection, replace=replace), timeout
        )

    async def run_consolidation(
        self,
        *,
        collection: str | None = None,
        dry_run: bool = False,
        force: bool = False,
        timeout: float | None = None,
    ) -> ConsolidationResult:
        """See :meth:`EngramClient.run_consolidation`."""
        plan = _plans.run_consolidation(collection=collection, dry_run=dry_run, force=force)
        return await self._run(plan, timeout)

    async def list_topics(
        self,
        *,
        collection: str | None = None,
        parent_id: str | None = None,
        page_size: int = 0,
        page_token: str | None = None,
        timeout: float | None = None,
    ) -> TopicPage:
        """See :meth:`EngramClient.list_topics`."""
        plan = _plans.list_topics(
            collection=collection, parent_id=parent_id, page_size=page_size, page_token=page_token
        )
        return await self._run(plan, timeout)

    async def get_topic(
        self,
        id: str,
        *,
        collection: str | None = None,
        page_size: int = 0,
        page_token: str | None = None,
        timeout: float | None = None,
    ) -> TopicMemories:
        """See :meth:`EngramClient.get_topic`."""
        plan = _plans.get_topic(id, collection=collection, page_size=page_size, page_token=page_token)
        return await self._run(plan, timeout)

    # --- export, import, backup (admin; long calls: no deadline unless ``timeout`` is given) -------

    async def export(
        self,
        *,
        collections: Sequence[str] = (),
        filter: memory_pb2.MemoryFilter | None = None,
        include_vectors: bool = False,
        live_only: bool = False,
        timeout: float | None = None,
    ) -> AsyncIterator[memory_service_pb2.ExportMemoriesResponse]:
        """See :meth:`EngramClient.export` (``async for chunk in engram.export(): …``)."""
        request = _export_request(collections, filter, include_vectors, live_only)
        try:
            async for chunk in self._stub.ExportMemories(request, timeout=timeout, metadata=self._metadata):
                yield chunk
        except grpc.RpcError as exc:
            raise error_from_rpc_error(exc) from None

    async def import_memories(
        self,
        chunks: Iterable[bytes] | AsyncIterable[bytes],
        *,
        mode: memory_service_pb2.ImportMode.ValueType = memory_service_pb2.IMPORT_MODE_RESTORE,
        reembed: memory_service_pb2.Reembed.ValueType = memory_service_pb2.REEMBED_AUTO,
        collection: str = "",
        timeout: float | None = None,
    ) -> memory_service_pb2.ImportMemoriesResponse:
        """See :meth:`EngramClient.import_memories`; ``chunks`` may also be an async iterable."""

        async def requests() -> AsyncIterator[memory_service_pb2.ImportMemoriesRequest]:
            first = True
            if isinstance(chunks, AsyncIterable):
                async for data in chunks:
                    yield _import_request(data, first, mode, reembed, collection)
                    first = False
            else:
                for data in chunks:
                    yield _import_request(data, first, mode, reembed, collection)
                    first = False
            if first:
                yield _import_request(b"", first, mode, reembed, collection)

        try:
            response: memory_service_pb2.ImportMemoriesResponse = await self._stub.ImportMemories(
                requests(), timeout=timeout, metadata=self._metadata
            )
        except grpc.RpcError as exc:
            raise error_from_rpc_error(exc) from None
        return response

    async def backup(
        self, directory: str, *, timeout: float | None = None
    ) -> memory_service_pb2.BackupStoreResponse:
        """See :meth:`EngramClient.backup`."""
        try:
            response: memory_service_pb2.BackupStoreResponse = await self._stub.BackupStore(
                memory_service_pb2.BackupStoreRequest(directory=directory),
                timeout=timeout,
                metadata=self._metadata,
            )
        except grpc.RpcError as exc:
            raise error_from_rpc_error(exc) from None
        return response
