"""Authentication, authorization and rate limiting at the gRPC edge: one server interceptor.

Per call to ``engram.v1.MemoryService`` (health and server reflection stay open):

1. the API key — ``authorization: Bearer <key>`` or ``x-api-key: <key>`` metadata — must belong to
   a principal, else UNAUTHENTICATED (``ERROR_REASON_UNAUTHENTICATED``);
2. the principal's token bucket must hold the call's cost — one token, or for AddMemories one per
   memory (capped at the bucket size), so a batch spends the quota its memories would spend one
   by one — else RESOURCE_EXHAUSTED (``ERROR_REASON_RATE_LIMITED`` with ``QuotaFailure`` and
   ``RetryInfo``);
3. the collections the request names (resolved exactly as the service resolves them: an empty
   ``collection`` is the default collection) must each be granted with the role the RPC needs,
   else PERMISSION_DENIED (``ERROR_REASON_PERMISSION_DENIED``). ListCollections answers only the
   collections the principal may read; a SearchMemories that names no collection searches only
   those (:data:`readable_collections` tells the servicer). A method without a rule here is
   refused: nothing runs unscoped.

The request fields are only visible after deserialization, so the interceptor wraps each unary
handler (built once per method and cached) instead of deciding in ``intercept_service``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import tomllib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_server.api.errors import to_status
from engram_server.api.guard import LogThrottle, Malformed
from engram_server.api.wrapping import WrappingInterceptor
from engram_server.config import ConfigError, Settings
from engram_server.domain.auth import (
    Authenticator,
    FailureLimiter,
    Principal,
    RateLimit,
    RateLimiter,
    Role,
    parse_principals,
    single_key_principal,
)
from engram_server.domain.errors import (
    EngramError,
    InvalidArgument,
    PermissionDenied,
    QuotaViolation,
    RateLimited,
    Unauthenticated,
)

log = logging.getLogger(__name__)

SERVICE = s.DESCRIPTOR.services_by_name["MemoryService"].full_name
#: Services every caller may use without a key.
OPEN_SERVICES = frozenset({"grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"})
#: RetryInfo delay when a principal has too many calls in flight.
IN_FLIGHT_RETRY_SECONDS = 0.1
#: Most collections one SearchMemories may name (the service's own limit).
MAX_SEARCH_COLLECTIONS = 16

Behavior = Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Awaitable[Any]]

#: During an authorized call: which collections its principal may read (None when auth is off:
#: every collection). A search that names no collection searches only these.
readable_collections: ContextVar[Callable[[str], bool] | None] = ContextVar(
    "engram_readable_collections", default=None
)


# --- which role each RPC needs, on which collections ---------------------------------------------


@dataclass(frozen=True, slots=True)
class Rule:
    role: Role
    #: request, default collection -> the collections the call touches (None: filtered response).
    scope: Callable[[Any, str], list[str] | None]
    #: request -> a stronger role for some options (RunReflection and RunConsolidation ``force``).
    escalate: Callable[[Any], Role | None] | None = None
    #: request -> rate-limit tokens the call costs (default one).
    cost: Callable[[Any], int] | None = None


def _one(request: Any, default: str) -> list[str]:
    return [request.collection or default]


def _search(request: Any, default: str) -> list[str] | None:
    """The named collections; None (filtered: only the readable ones are searched) for none."""
    names = list(dict.fromkeys(request.collections))
    if len(names) > MAX_SEARCH_COLLECTIONS:
        raise InvalidArgument.of("collections", f"at most {MAX_SEARCH_COLLECTIONS} collections per search")
    return names or None


def _named(request: Any, default: str) -> list[str]:
    if not request.name:
        raise InvalidArgument.of("name", "must not be empty")
    return [request.name]


def _listing(request: Any, default: str) -> list[str] | None:
    return None


#: The scope of a store-wide call (import, backup): only a grant on every collection ("*") has it.
EVERY_COLLECTION = "*"


def _store_wide(request: Any, default: str) -> list[str]:
    return [EVERY_COLLECTION]


def _exported(request: Any, default: str) -> list[str]:
    """The named collections; every collection when none is named."""
    return list(dict.fromkeys(request.collections)) or [EVERY_COLLECTION]


RULES: dict[str, Rule] = {
    "AddMemory": Rule(Role.WRITE, _one),
    "AddMemories": Rule(Role.WRITE, _one, cost=lambda r: len(r.memories)),
    "UpdateMemory": Rule(Role.WRITE, _one),
    "DeleteMemory": Rule(Role.WRITE, _one),
    "SearchMemories": Rule(Role.READ, _search),
    "GetMemory": Rule(Role.READ, _one),
    "ListMemories": Rule(Role.READ, _one),
    "ListCollections": Rule(Role.READ, _listing),
    "DeleteCollection": Rule(Role.ADMIN, _named),
    "RunReflection": Rule(Role.WRITE, _one, lambda r: Role.ADMIN if r.force else None),
    "ListGateDecisions": Rule(Role.READ, _one),
    "ListReflectionRuns": Rule(Role.READ, _one),
    "ExtractMemories": Rule(Role.WRITE, _one),
    "ListTrash": Rule(Role.READ, _one),
    "RestoreMemory": Rule(Role.WRITE, _one),
    # Purging memories is a writer's (who may delete may also forget for good, e.g. on a user's
    # request); dropping a trashed collection is an admin's, as deleting it was.
    "PurgeTrash": Rule(Role.WRITE, _one, lambda r: Role.ADMIN if r.purge_collection else None),
    "RestoreCollection": Rule(Role.ADMIN, _named),
    "GetContext": Rule(Role.READ, _search),
    "GetTriggers": Rule(Role.READ, _search),
    "ListSlots": Rule(Role.READ, _one),
    "UpdateSlot": Rule(Role.WRITE, _one),
    "RunConsolidation": Rule(Role.WRITE, _one, lambda r: Role.ADMIN if r.force else None),
    "ExportMemories": Rule(Role.ADMIN, _exported),
    "ImportMemories": Rule(Role.ADMIN, _store_wide),
    "BackupStore": Rule(Role.ADMIN, _store_wide),
    "ListTopics": Rule(Role.READ, _one),
    "GetTopic": Rule(Role.READ, _one),
}


# --- the interceptor -----------------------------------------------------------------------------


def api_key_from(metadata: Sequence[tuple[str, str | bytes]] | None) -> str | None:
    """The key from ``authorization: Bearer <key>`` or ``x-api-key``; None when absent or when the
    call carries several different keys."""
    found: set[str] = set()
    for key, value in metadata or ():
        if not isinstance(value, str):
            continue
        if key == "authorization":
            scheme, _, token = value.strip().partition(" ")
            found.add(token.strip() if scheme.lower() == "bearer" else "")
        elif key == "x-api-key":
            found.add(value.strip())
    if len(found) != 1:
        return None
    return found.pop() or None


def peer_host(peer: str) -> str:
    """The address part of a gRPC peer (``ipv4:10.0.0.1:5555`` -> ``ipv4:10.0.0.1``): failures are
    counted per address, not per connection."""
    if peer.startswith(("ipv4:", "ipv6:")):
        return peer.rpartition(":")[0] or peer
    return peer


class AuthInterceptor(WrappingInterceptor):
    def __init__(
        self,
        authenticator: Authenticator,
        limiter: RateLimiter,
        *,
        default_collection: str,
        failure_limit: RateLimit | None = None,
        max_in_flight: int = 0,
        slow_hash_threads: int = 2,
    ) -> None:
        super().__init__()
        self.authenticator = authenticator
        self.limiter = limiter
        self.default_collection = default_collection
        self.failures = FailureLimiter(failure_limit or RateLimit(0, 1))
        self.max_in_flight = max_in_flight
        self.in_flight: dict[str, int] = {}
        self.throttle = LogThrottle()
        #: Counters (tests and figures): failed authentications, of which refused by the limit.
        self.failed = 0
        self.refused_by_limit = 0
        self._slow_threads = slow_hash_threads
        self._slow_slots: asyncio.Semaphore | None = None
        self._pending: dict[bytes, asyncio.Future[Principal | None]] = {}

    def _wrap(self, full_method: str, handler: grpc.RpcMethodHandler | None) -> grpc.RpcMethodHandler:
        if handler is None:
            return handler  # unknown method: gRPC answers UNIMPLEMENTED, nothing runs
        service, _, method = full_method.lstrip("/").partition("/")
        if service in OPEN_SERVICES:
            return handler
        rule = RULES.get(method) if service == SERVICE else None
        if rule is not None and handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._streaming_behavior(method, rule, handler.unary_stream),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if rule is not None and handler.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(
                self._behavior(method, rule, handler.stream_unary),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_unary is None or rule is None:
            return _refusing(handler, f"{full_method} is not available to API keys")
        return grpc.unary_unary_rpc_method_handler(
            self._behavior(method, rule, handler.unary_unary),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    # --- who is calling ---------------------------------------------------------------------

    async def identify(self, metadata: Any, peer: str | Callable[[], str]) -> Principal:
        """The caller's principal. A key seen before is answered from the authenticator's caches
        (one HMAC); a peer over its failure budget is refused (with RetryInfo) before any hash
        is computed; a new key is checked — SHA-256 hashes inline, scrypt off the event loop,
        once per distinct key however many calls present it at the same time."""
        key = api_key_from(metadata)
        known = True
        if key is not None:
            known, principal = self.authenticator.cached(key)
            if principal is not None:
                return principal
        host = peer_host(peer if isinstance(peer, str) else peer())
        wait = self.failures.blocked_for(host)
        if wait > 0:
            self.failed += 1
            self.refused_by_limit += 1
            self._warn(host, "refused unchecked: too many failed authentications from this address")
            error = Unauthenticated(
                f"too many failed authentications from this address; retry in {wait:.1f}s",
                metadata={"retry_after_seconds": f"{wait:.3f}"},
            )
            error.retry_after = wait
            raise error
        principal = await self._verify(key) if key is not None and not known else None
        if principal is None:
            self.failed += 1
            self.failures.failed(host)
            self._warn(host, "no API key" if key is None else "unknown API key")
            raise Unauthenticated(
                "missing or unknown API key: send it as 'authorization: Bearer <key>' metadata"
                if key is None
                else "unknown API key"
            )
        return principal

    async def _verify(self, key: str) -> Principal | None:
        settled, principal = self.authenticator.verify_fast(key)
        if settled:
            return principal
        tag = self.authenticator.tag(key)
        pending = self._pending.get(tag)
        if pending is None:
            pending = asyncio.ensure_future(self._verify_slow(key))
            self._pending[tag] = pending
            pending.add_done_callback(lambda _done: self._pending.pop(tag, None))
        return await asyncio.shield(pending)

    async def _verify_slow(self, key: str) -> Principal | None:
        if self._slow_slots is None:
            self._slow_slots = asyncio.Semaphore(max(1, self._slow_threads))
        async with self._slow_slots:
            return await asyncio.to_thread(self.authenticator.verify_slow, key)

    def _warn(self, host: str, why: str) -> None:
        held_back = self.throttle.allow(host)
        if held_back is not None:
            log.warning(
                "authentication failed from %s: %s%s",
                host,
                why,
                f" ({held_back} more failures from this address since the last report)" if held_back else "",
            )

    # --- what it may do ---------------------------------------------------------------------

    def authorize(self, method: str, rule: Rule, request: Any, principal: Principal) -> None:
        """Rate-limit and authorize one call of ``principal``; raises the EngramError to answer."""
        delay = self.limiter.acquire(principal, rule.cost(request) if rule.cost is not None else 1)
        if delay > 0:
            limit = self.limiter.limit_for(principal)
            raise RateLimited(
                f"rate limit of principal {principal.name!r} exceeded; retry in {delay:.3f}s",
                retry_after=delay,
                violations=(
                    QuotaViolation(
                        subject=f"principal:{principal.name}",
                        description=f"{limit.rps:g} calls per second, burst {limit.burst}",
                    ),
                ),
                metadata={"principal": principal.name, "retry_after_seconds": f"{delay:.3f}"},
            )
        collections = rule.scope(request, self.default_collection)
        needed = rule.role
        if rule.escalate is not None:
            needed = max(needed, rule.escalate(request) or Role.NONE)
        for name in collections or ():
            if not principal.may(name, needed):
                raise PermissionDenied(
                    f"principal {principal.name!r} may not {method} on collection {name!r} "
                    f"(needs {needed.label})",
                    metadata={
                        "principal": principal.name,
                        "collection": name,
                        "required_role": needed.label,
                        "method": method,
                    },
                )
        if self.max_in_flight > 0 and self.in_flight.get(principal.name, 0) >= self.max_in_flight:
            raise RateLimited(
                f"principal {principal.name!r} already has {self.max_in_flight} calls in flight; "
                "retry when one finishes",
                retry_after=IN_FLIGHT_RETRY_SECONDS,
                violations=(
                    QuotaViolation(
                        subject=f"principal:{principal.name}",
                        description=f"at most {self.max_in_flight} calls in flight",
                    ),
                ),
                metadata={"principal": principal.name, "limit": "in_flight"},
            )

    def _streaming_behavior(
        self,
        method: str,
        rule: Rule,
        inner: Callable[[Any, grpc.aio.ServicerContext[Any, Any]], AsyncIterator[Any]],
    ) -> Callable[[Any, grpc.aio.ServicerContext[Any, Any]], AsyncIterator[Any]]:
        """:meth:`_behavior` for a server-streaming call (ExportMemories): checked before the
        first answer."""

        async def behavior(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
            try:
                principal = await self.identify(context.invocation_metadata(), context.peer)
                if not isinstance(request, Malformed):  # (the guard inside answers those)
                    self.authorize(method, rule, request, principal)
            except EngramError as exc:
                log.debug("refused %s: %s", method, exc.message)
                await context.abort_with_status(to_status(exc))
                raise AssertionError("unreachable") from exc
            name = principal.name
            self.in_flight[name] = self.in_flight.get(name, 0) + 1
            try:
                async for answer in inner(request, context):
                    yield answer
            finally:
                left = self.in_flight[name] - 1
                if left:
                    self.in_flight[name] = left
                else:
                    del self.in_flight[name]

        return behavior

    def _behavior(self, method: str, rule: Rule, inner: Behavior) -> Behavior:
        async def behavior(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            try:
                principal = await self.identify(context.invocation_metadata(), context.peer)
                if isinstance(request, Malformed):  # the key first; the guard inside answers
                    return await inner(request, context)
                self.authorize(method, rule, request, principal)
            except EngramError as exc:
                log.debug("refused %s: %s", method, exc.message)
                await context.abort_with_status(to_status(exc))
                raise AssertionError("unreachable") from exc  # abort_with_status always raises
            name = principal.name
            self.in_flight[name] = self.in_flight.get(name, 0) + 1
            token = readable_collections.set(lambda collection: principal.may(collection, Role.READ))
            try:
                response = await inner(request, context)
            finally:
                readable_collections.reset(token)
                left = self.in_flight[name] - 1
                if left:
                    self.in_flight[name] = left
                else:
                    del self.in_flight[name]
            if method == "ListCollections" and response is not None:
                kept = [c for c in response.collections if principal.may(c.name, Role.READ)]
                del response.collections[:]
                response.collections.extend(kept)
                trashed = [c for c in response.trashed if principal.may(c.name, Role.READ)]
                del response.trashed[:]
                response.trashed.extend(trashed)
            return response

        return behavior


def _refusing(handler: grpc.RpcMethodHandler, message: str) -> grpc.RpcMethodHandler:
    """A handler of the same shape that refuses every call (default deny)."""

    async def refuse(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        await context.abort_with_status(to_status(PermissionDenied(message)))

    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(
            refuse,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(
            refuse,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(
            refuse,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
    return grpc.stream_stream_rpc_method_handler(
        refuse,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )


# --- configuration -------------------------------------------------------------------------------


def is_loopback(host: str) -> bool:
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False  # a hostname, "", "0.0.0.0"-style wildcards: not known to be loopback


def load_auth_file(path: Path) -> list[Principal]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"ENGRAM_AUTH_FILE: cannot read {path}: {exc}") from exc
    try:
        document = json.loads(text) if path.suffix.lower() == ".json" else tomllib.loads(text)
        return parse_principals(document)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"ENGRAM_AUTH_FILE {path}: {exc}") from exc


BANNER = "*" * 78


def build_auth_interceptor(settings: Settings) -> AuthInterceptor | None:
    """The interceptor for these settings, or None when auth is off (logged loudly).

    Raises ConfigError when the server must not start: auth required but no keys, or a
    non-loopback bind with no keys and no explicit ``ENGRAM_AUTH=off``.
    """
    principals: list[Principal] = []
    if settings.auth_file is not None:
        principals.extend(load_auth_file(settings.auth_file))
    if settings.api_key:
        try:
            single = single_key_principal(settings.api_key)
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        if any(p.name == single.name for p in principals):
            raise ConfigError(f"ENGRAM_AUTH_FILE already has a principal named {single.name!r}")
        principals.append(single)
    loopback = is_loopback(settings.host)
    mode = settings.auth
    if mode == "off":
        log.warning(
            "%s\nAUTH IS OFF (ENGRAM_AUTH=off): every caller that can reach %s:%s may read, write "
            "and delete every collection.%s\n%s",
            BANNER,
            settings.host,
            settings.port,
            "" if loopback else " THIS ADDRESS IS NOT LOOPBACK.",
            BANNER,
        )
        if principals:
            log.warning("ENGRAM_AUTH=off: the configured API keys are ignored")
        return None
    if not principals:
        if mode == "on":
            raise ConfigError("ENGRAM_AUTH=on needs ENGRAM_API_KEY or ENGRAM_AUTH_FILE")
        if not loopback:
            raise ConfigError(
                f"refusing to serve on {settings.host} (not loopback) without authentication: set "
                "ENGRAM_API_KEY or ENGRAM_AUTH_FILE, or ENGRAM_AUTH=off to accept the risk"
            )
        log.warning(
            "%s\nAUTH IS OFF: no ENGRAM_API_KEY or ENGRAM_AUTH_FILE; serving unauthenticated on "
            "loopback %s only (embedded local set-up).\n%s",
            BANNER,
            settings.host,
            BANNER,
        )
        return None
    default = RateLimit(settings.rate_limit_rps, settings.rate_limit_burst)
    log.info(
        "auth on: %d principal(s) (%s); default rate limit %s",
        len(principals),
        ", ".join(p.name for p in principals),
        "unlimited" if default.unlimited else f"{default.rps:g}/s burst {default.burst}",
    )
    return AuthInterceptor(
        Authenticator(principals),
        RateLimiter(default),
        default_collection=settings.default_collection,
        failure_limit=RateLimit(settings.auth_failure_rps, settings.auth_failure_burst),
        max_in_flight=settings.max_in_flight_per_principal,
    )
