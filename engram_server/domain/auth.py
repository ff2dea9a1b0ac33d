"""Who may do what: principals, hashed API keys, collection grants, and per-principal token buckets.

Pure policy — no gRPC, no files, no wall clock (time is injected). The gRPC edge
(``api/auth.py``) asks three questions of it, in this order, for every call:

1. :meth:`Authenticator.authenticate` — which principal does this key belong to?
2. :meth:`RateLimiter.acquire` — may that principal make one more call now?
3. :meth:`Principal.role_for` — which role does it hold on each collection the call touches?

Key hashing. Keys are stored as ``sha256:<salt hex>:<digest hex>`` (``sha256(salt || key)``, a
random 16-byte salt per key) or ``scrypt:<n>:<r>:<p>:<salt hex>:<digest hex>``. API keys are
machine-generated secrets (``engram hash-key --generate`` makes 256-bit ones); brute-forcing a
256-bit key through a fast hash is as hopeless as through a slow one, so SHA-256 is the default:
it costs microseconds per call and makes checking every configured key on every call cheap. The
per-key salt stops one precomputed table (or one leaked file) from matching keys across
deployments and keeps equal keys from having equal lines. ``scrypt`` is accepted for keys a human
chose (low entropy, where a slow hash matters).

Cost per call. Every key's answer is remembered in memory — matched or not, keyed by an HMAC
under a per-process secret, never the key itself, in bounded LRU caches — so a key seen before
costs one HMAC whatever the other principals are. A new key is checked against the SHA-256 hashes
first (every one of them, constant-time, no early exit); only a key none of them matches meets
the scrypt hashes, off the event loop, once. Failed authentications are limited per peer address
(:class:`FailureLimiter`) before any hashing is spent on them.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

#: Longest key accepted (longer metadata is refused before any hashing).
MAX_KEY_CHARS = 1024
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
REFLECTION_SUFFIX = "_reflection"


class Role(IntEnum):
    """Ordered: each role includes the ones below it."""

    NONE = 0
    READ = 1
    WRITE = 2
    ADMIN = 3

    @classmethod
    def parse(cls, raw: str) -> Role:
        try:
            role = cls[raw.strip().upper()]
        except KeyError:
            raise ValueError(f"unknown role {raw!r} (read, write or admin)") from None
        if role is Role.NONE:
            raise ValueError("role 'none' is not grantable; leave the collection out")
        return role

    @property
    def label(self) -> str:
        return self.name.lower()


# --- key hashes ---------------------------------------------------------------------------------


class KeyHash:
    """One stored key hash; :meth:`matches` is constant-time in the candidate."""

    def __init__(self, line: str) -> None:
        parts = line.strip().split(":")
        try:
            if parts[0] == "sha256" and len(parts) == 3:
                self.scheme = "sha256"
                self.salt, self.digest = bytes.fromhex(parts[1]), bytes.fromhex(parts[2])
                self.params: tuple[int, int, int] = (0, 0, 0)
                ok = len(self.digest) == 32
            elif parts[0] == "scrypt" and len(parts) == 6:
                self.scheme = "scrypt"
                self.params = (int(parts[1]), int(parts[2]), int(parts[3]))
                self.salt, self.digest = bytes.fromhex(parts[4]), bytes.fromhex(parts[5])
                n, r, p = self.params
                ok = n > 1 and n & (n - 1) == 0 and 0 < r <= 64 and 0 < p <= 16 and len(self.digest) >= 16
            else:
                ok = False
        except ValueError:
            ok = False
        if not ok or not self.salt:
            raise ValueError(
                "a key must be stored as a hash line 'sha256:<salt>:<digest>' or "
                "'scrypt:<n>:<r>:<p>:<salt>:<digest>' (make one with `engram hash-key`), never in plain text"
            )

    @property
    def slow(self) -> bool:
        return self.scheme == "scrypt"

    def compute(self, key: str) -> bytes:
        raw = key.encode("utf-8", "surrogatepass")
        if self.scheme == "sha256":
            return hashlib.sha256(self.salt + raw).digest()
        n, r, p = self.params
        return hashlib.scrypt(
            raw, salt=self.salt, n=n, r=r, p=p, maxmem=256 * 1024 * 1024, dklen=len(self.digest)
        )

    def matches(self, key: str) -> bool:
        return hmac.compare_digest(self.compute(key), self.digest)


def hash_key(key: str, *, scheme: str = "sha256", salt: bytes | None = None) -> str:
    """The line to store for ``key`` (what ``engram hash-key`` prints)."""
    salt = salt if salt is not None else secrets.token_bytes(16)
    raw = key.encode("utf-8", "surrogatepass")
    if scheme == "sha256":
        return f"sha256:{salt.hex()}:{hashlib.sha256(salt + raw).hexdigest()}"
    if scheme == "scrypt":
        digest = hashlib.scrypt(raw, salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, dklen=32)
        return f"scrypt:{SCRYPT_N}:{SCRYPT_R}:{SCRYPT_P}:{salt.hex()}:{digest.hex()}"
    raise ValueError(f"unknown scheme {scheme!r} (sha256 or scrypt)")


def generate_key() -> str:
    """A new random API key (256 bits)."""
    return "engram_" + secrets.token_urlsafe(32)


# --- principals and grants ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RateLimit:
    rps: float  # refill per second; 0 = unlimited
    burst: int

    @property
    def unlimited(self) -> bool:
        return self.rps <= 0


@dataclass(frozen=True)
class Principal:
    """A caller: its name, its grants ({collection, ``prefix*`` or ``*``: role}), its rate limit."""

    name: str
    grants: Mapping[str, Role]
    rate_limit: RateLimit | None = None  # None: the server default
    keys: tuple[KeyHash, ...] = field(default=(), repr=False, compare=False)

    def role_for(self, collection: str) -> Role:
        """The strongest role any grant gives on ``collection``. A grant on a collection covers its
        reflection collection (``<collection>_reflection``) too."""
        names = [collection]
        if collection.endswith(REFLECTION_SUFFIX) and len(collection) > len(REFLECTION_SUFFIX):
            names.append(collection[: -len(REFLECTION_SUFFIX)])
        best = Role.NONE
        for pattern, role in self.grants.items():
            if role <= best:
                continue
            if any(_pattern_matches(pattern, name) for name in names):
                best = role
        return best

    def may(self, collection: str, role: Role) -> bool:
        return self.role_for(collection) >= role


def _pattern_matches(pattern: str, name: str) -> bool:
    if pattern == "*":
        return True
    if pattern.endswith("*"):
        return name.startswith(pattern[:-1])
    return pattern == name


def parse_principals(document: Mapping[str, Any]) -> list[Principal]:
    """Principals from a parsed auth file (TOML or JSON)::

    [[principals]]
    name = "alice-agent"
    keys = ["sha256:…:…"]
    grants = { alice = "write", shared = "read" }
    rate_limit = { rps = 20, burst = 40 }   # optional
    """
    raw = document.get("principals")
    if not isinstance(raw, list) or not raw:
        raise ValueError("the auth file needs a non-empty 'principals' list")
    out: list[Principal] = []
    seen: set[str] = set()
    for i, entry in enumerate(raw):
        where = f"principals[{i}]"
        if not isinstance(entry, Mapping):
            raise ValueError(f"{where}: must be a table/object")
        unknown = set(entry) - {"name", "keys", "grants", "rate_limit"}
        if unknown:
            raise ValueError(f"{where}: unknown fields {sorted(unknown)}")
        name = entry.get("name")
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"{where}: 'name' must be a non-empty string")
        if name in seen:
            raise ValueError(f"{where}: duplicate principal name {name!r}")
        seen.add(name)
        keys = entry.get("keys")
        if not isinstance(keys, list) or not keys or not all(isinstance(k, str) for k in keys):
            raise ValueError(f"{where} ({name}): 'keys' must be a non-empty list of hash lines")
        try:
            hashes = tuple(KeyHash(k) for k in keys)
        except ValueError as exc:
            raise ValueError(f"{where} ({name}): {exc}") from None
        grants_raw = entry.get("grants", {})
        if not isinstance(grants_raw, Mapping):
            raise ValueError(f"{where} ({name}): 'grants' must map collection names to roles")
        grants: dict[str, Role] = {}
        for pattern, role in grants_raw.items():
            if not isinstance(pattern, str) or not pattern or not isinstance(role, str):
                raise ValueError(f"{where} ({name}): grants must map collection names to role names")
            if "*" in pattern[:-1]:
                raise ValueError(f"{where} ({name}): '*' may only end a grant pattern ({pattern!r})")
            try:
                grants[pattern] = Role.parse(role)
            except ValueError as exc:
                raise ValueError(f"{where} ({name}): {exc}") from None
        limit = entry.get("rate_limit")
        rate_limit: RateLimit | None = None
        if limit is not None:
            if not isinstance(limit, Mapping):
                raise ValueError(f"{where} ({name}): 'rate_limit' must be {{rps = …, burst = …}}")
            rps, burst = limit.get("rps", 0), limit.get("burst", 1)
            if (
                not isinstance(rps, int | float)
                or isinstance(rps, bool)
                or not math.isfinite(rps)
                or rps < 0
                or not isinstance(burst, int)
                or isinstance(burst, bool)
                or burst < 1
            ):
                raise ValueError(f"{where} ({name}): rate_limit needs rps ≥ 0 and an integer burst ≥ 1")
            rate_limit = RateLimit(float(rps), burst)
        out.append(Principal(name=name, grants=grants, rate_limit=rate_limit, keys=hashes))
    return out


def single_key_principal(key: str, name: str = "api-key") -> Principal:
    """ENGRAM_API_KEY: one admin principal on every collection. Only the hash is kept."""
    if not key.strip():
        raise ValueError("ENGRAM_API_KEY must not be blank")
    return Principal(name=name, grants={"*": Role.ADMIN}, keys=(KeyHash(hash_key(key)),))


class Authenticator:
    """Finds the principal of an API key, at a cost that does not grow with the other principals.

    * A key seen before is answered from memory: one HMAC of the key under a per-process secret
      (never the key itself is kept) looked up in two bounded LRU caches, one of keys that matched
      and one of keys that did not (``cache_size`` entries each).
    * A key not seen before is checked against the fast (SHA-256) hashes first — microseconds
      each. Only when none matches does it meet the slow (scrypt) hashes, and then once: the
      answer is cached. So the calls of SHA-256 principals never run scrypt, and a human-chosen
      scrypt key costs its hash once per process, not once per call.

    :meth:`authenticate` does all of it in the calling thread; the gRPC edge instead calls
    :meth:`cached`, :meth:`verify_fast` and, off the event loop, :meth:`verify_slow`.
    """

    def __init__(self, principals: Iterable[Principal], *, cache_size: int = 4096) -> None:
        self.principals = tuple(principals)
        self._fast = [(p, k) for p in self.principals for k in p.keys if not k.slow]
        self._slow = [(p, k) for p in self.principals for k in p.keys if k.slow]
        self._secret = secrets.token_bytes(32)
        self._hits: OrderedDict[bytes, Principal] = OrderedDict()
        self._misses: OrderedDict[bytes, None] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()
        #: Slow (scrypt) hash computations so far — what the cost tests count.
        self.slow_hashes = 0

    @property
    def has_slow_keys(self) -> bool:
        return bool(self._slow)

    def tag(self, key: str) -> bytes:
        """What the caches remember of ``key``: HMAC-SHA256 under a per-process secret."""
        return hmac.new(self._secret, key.encode("utf-8", "surrogatepass"), hashlib.sha256).digest()

    def cached(self, key: str) -> tuple[bool, Principal | None]:
        """(known, principal): known is False when ``key`` has not been checked yet."""
        if not key or len(key) > MAX_KEY_CHARS:
            return True, None
        tag = self.tag(key)
        with self._lock:
            hit = self._hits.get(tag)
            if hit is not None:
                self._hits.move_to_end(tag)
                return True, hit
            if tag in self._misses:
                self._misses.move_to_end(tag)
                return True, None
        return False, None

    def verify_fast(self, key: str) -> tuple[bool, Principal | None]:
        """Check ``key`` against the fast hashes: (settled, principal). Not settled: only the slow
        hashes can tell (see :meth:`verify_slow`). A key claimed by several principals is nobody's.
        Every fast hash is compared (constant time, no early exit)."""
        found: dict[str, Principal] = {}
        for principal, stored in self._fast:
            if stored.matches(key):
                found[principal.name] = principal
        if found or not self._slow:
            winner = next(iter(found.values())) if len(found) == 1 else None
            self.remember(key, winner)
            return True, winner
        return False, None

    def verify_slow(self, key: str) -> Principal | None:
        """Check ``key`` against the slow hashes (CPU-heavy: call off the event loop), and remember
        the answer."""
        found: dict[str, Principal] = {}
        for principal, stored in self._slow:
            with self._lock:
                self.slow_hashes += 1
            if stored.matches(key):
                found[principal.name] = principal
        winner = next(iter(found.values())) if len(found) == 1 else None
        self.remember(key, winner)
        return winner

    def remember(self, key: str, principal: Principal | None) -> None:
        tag = self.tag(key)
        with self._lock:
            table: OrderedDict[bytes, Any] = self._hits if principal is not None else self._misses
            table[tag] = principal
            table.move_to_end(tag)
            while len(table) > self._cache_size:
                table.popitem(last=False)

    def authenticate(self, key: str) -> Principal | None:
        """The principal owning ``key``, or None (unknown key, or one claimed by several principals)."""
        known, principal = self.cached(key)
        if known:
            return principal
        settled, principal = self.verify_fast(key)
        return principal if settled else self.verify_slow(key)


class FailureLimiter:
    """Failed authentications per peer address: a token bucket each (``burst`` failures, refilled
    at ``rps``), at most ``max_peers`` remembered (the least recently failing are forgotten)."""

    def __init__(
        self, limit: RateLimit, *, max_peers: int = 10_000, now: Callable[[], float] = time.monotonic
    ) -> None:
        self.limit = limit
        self.max_peers = max_peers
        self._now = now
        self._buckets: OrderedDict[str, TokenBucket] = OrderedDict()

    def blocked_for(self, peer: str) -> float:
        """Seconds before ``peer`` may fail again (0.0: it may)."""
        if self.limit.unlimited:
            return 0.0
        bucket = self._buckets.get(peer)
        if bucket is None:
            return 0.0
        return bucket.wait_for(1)

    def failed(self, peer: str) -> None:
        if self.limit.unlimited:
            return
        bucket = self._buckets.get(peer)
        if bucket is None:
            bucket = self._buckets[peer] = TokenBucket(self.limit, self._now)
            while len(self._buckets) > self.max_peers:
                self._buckets.popitem(last=False)
        self._buckets.move_to_end(peer)
        bucket.acquire(1)


# --- rate limiting ------------------------------------------------------------------------------


class TokenBucket:
    """``burst`` tokens, refilled at ``rps`` per second; a call takes its cost in tokens (one for
    most calls). A cost above ``burst`` is charged as ``burst`` (it waits for a full bucket and
    empties it), so no call is impossible under a small burst."""

    def __init__(self, limit: RateLimit, now: Callable[[], float]) -> None:
        self.limit = limit
        self._now = now
        self._tokens = float(limit.burst)
        self._stamp = now()

    def wait_for(self, cost: int = 1) -> float:
        """Seconds until ``cost`` tokens are available (0.0: now); takes nothing."""
        if self.limit.unlimited:
            return 0.0
        need = float(min(max(cost, 1), self.limit.burst))
        elapsed = max(0.0, self._now() - self._stamp)
        tokens = min(float(self.limit.burst), self._tokens + elapsed * self.limit.rps)
        return 0.0 if tokens >= need else (need - tokens) / self.limit.rps

    def acquire(self, cost: int = 1) -> float:
        """0.0 if ``cost`` tokens were taken; otherwise the seconds until they will be available
        (nothing is taken then)."""
        if self.limit.unlimited:
            return 0.0
        need = float(min(max(cost, 1), self.limit.burst))
        now = self._now()
        elapsed = max(0.0, now - self._stamp)
        self._stamp = now
        self._tokens = min(float(self.limit.burst), self._tokens + elapsed * self.limit.rps)
        if self._tokens >= need:
            self._tokens -= need
            return 0.0
        return (need - self._tokens) / self.limit.rps


class RateLimiter:
    """One token bucket per principal; a principal's own limit, else the default."""

    def __init__(self, default: RateLimit, now: Callable[[], float] = time.monotonic) -> None:
        self.default = default
        self._now = now
        self._buckets: dict[str, TokenBucket] = {}

    def limit_for(self, principal: Principal) -> RateLimit:
        return principal.rate_limit or self.default

    def acquire(self, principal: Principal, cost: int = 1) -> float:
        """0.0 when the call (costing ``cost`` tokens) may go ahead; otherwise the retry delay in
        seconds."""
        bucket = self._buckets.get(principal.name)
        if bucket is None:
            bucket = self._buckets[principal.name] = TokenBucket(self.limit_for(principal), self._now)
        return bucket.acquire(cost)
