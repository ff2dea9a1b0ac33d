"""Where and how the client connects: target, TLS, API key, deadline and retry policy.

Every setting comes from a constructor argument or, when that is not given, from the environment:

==========================  ==================================================================
``ENGRAM_ADDR``             ``host:port`` of the server (default ``localhost:50051``). A
                            ``https://`` prefix turns TLS on, ``http://`` is stripped.
``ENGRAM_API_KEY``          sent on every call as ``authorization: Bearer <key>`` metadata.
``ENGRAM_TLS``              ``1``/``true``/``yes``/``on`` to use TLS with the system roots.
``ENGRAM_TLS_CA_FILE``      PEM file with the root certificates to trust (implies TLS).
``ENGRAM_TLS_CERT_FILE``    PEM client certificate chain, for mutual TLS (with the key file).
``ENGRAM_TLS_KEY_FILE``     PEM client private key, for mutual TLS.
``ENGRAM_TIMEOUT``          default deadline of one call in seconds, retries included (``10``).
==========================  ==================================================================
"""

from __future__ import annotations

import os
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["DEFAULT_ADDR", "DEFAULT_TIMEOUT", "ConnectionConfig", "RetryPolicy"]

DEFAULT_ADDR = "localhost:50051"
DEFAULT_TIMEOUT = 10.0
API_KEY_HEADER = "authorization"

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Automatic retry of calls that failed with UNAVAILABLE, and only those.

    Attempt ``n`` (1-based) that fails waits ``min(max_backoff, initial_backoff · multiplier^(n-1))``,
    randomised by ±``jitter`` (a fraction), or the server's ``RetryInfo`` delay if that is longer,
    before the next attempt. The call's deadline covers all attempts: no retry starts when its
    wait would pass the deadline. ``RetryPolicy(max_attempts=1)`` turns retries off.
    """

    max_attempts: int = 4
    initial_backoff: float = 0.1
    max_backoff: float = 3.0
    multiplier: float = 2.0
    jitter: float = 0.2
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if self.initial_backoff < 0 or self.max_backoff < 0 or self.multiplier < 1:
            raise ValueError("backoffs must be >= 0 and multiplier >= 1")
        if not 0 <= self.jitter < 1:
            raise ValueError("jitter must be in [0, 1)")

    def backoff(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        base = min(self.max_backoff, self.initial_backoff * self.multiplier ** (attempt - 1))
        if self.jitter:
            base *= 1 + self.rng.uniform(-self.jitter, self.jitter)
        return max(0.0, base)


def _env_flag(env: Mapping[str, str], name: str) -> bool | None:
    raw = env.get(name)
    if raw is None:
        return None
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"{name} must be a boolean (1/0, true/false); got {raw!r}")


def _read(path: str | None) -> bytes | None:
    return Path(path).expanduser().read_bytes() if path else None


@dataclass(frozen=True, slots=True)
class ConnectionConfig:
    """The resolved connection settings (see the module docstring for the environment)."""

    target: str
    api_key: str | None = field(default=None, repr=False)
    tls: bool = False
    root_certificates: bytes | None = field(default=None, repr=False)
    private_key: bytes | None = field(default=None, repr=False)
    certificate_chain: bytes | None = field(default=None, repr=False)
    timeout: float | None = DEFAULT_TIMEOUT

    @classmethod
    def resolve(
        cls,
        target: str | None = None,
        *,
        api_key: str | None = None,
        tls: bool | None = None,
        root_certificates: bytes | None = None,
        private_key: bytes | None = None,
        certificate_chain: bytes | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ConnectionConfig:
        """Arguments win; what is not given comes from ``env`` (default: ``os.environ``)."""
        env = os.environ if env is None else env
        target = target or env.get("ENGRAM_ADDR", "").strip() or DEFAULT_ADDR
        scheme_tls: bool | None = None
        if target.startswith("https://"):
            target, scheme_tls = target.removeprefix("https://"), True
        elif target.startswith("http://"):
            target, scheme_tls = target.removeprefix("http://"), False
        target = target.rstrip("/")
        if root_certificates is None:
            root_certificates = _read(env.get("ENGRAM_TLS_CA_FILE"))
        if certificate_chain is None:
            certificate_chain = _read(env.get("ENGRAM_TLS_CERT_FILE"))
        if private_key is None:
            private_key = _read(env.get("ENGRAM_TLS_KEY_FILE"))
        if (private_key is None) != (certificate_chain is None):
            raise ValueError("mutual TLS needs both a client certificate chain and its private key")
        if tls is None:
            tls = scheme_tls
        if tls is None:
            tls = _env_flag(env, "ENGRAM_TLS")
        if tls is None:
            tls = root_certificates is not None or certificate_chain is not None
        if timeout is None:
            raw_timeout = env.get("ENGRAM_TIMEOUT", "").strip()
            timeout = float(raw_timeout) if raw_timeout else DEFAULT_TIMEOUT
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        if api_key is None:
            api_key = env.get("ENGRAM_API_KEY") or None
        return cls(
            target=target,
            api_key=api_key,
            tls=tls,
            root_certificates=root_certificates,
            private_key=private_key,
            certificate_chain=certificate_chain,
            timeout=timeout,
        )

    def call_metadata(self, extra: tuple[tuple[str, str], ...] = ()) -> tuple[tuple[str, str], ...]:
        """The metadata sent with every call: the API key, then ``extra``."""
        base: tuple[tuple[str, str], ...] = ()
        if self.api_key:
            base = ((API_KEY_HEADER, f"Bearer {self.api_key}"),)
        return base + tuple(extra)
