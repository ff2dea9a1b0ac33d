"""The pure policy: key hashes, grants, token buckets (manual clock), the auth file, hash-key."""

from __future__ import annotations

import hmac

import pytest

from engram_server import cli
from engram_server.domain.auth import (
    Authenticator,
    FailureLimiter,
    KeyHash,
    Principal,
    RateLimit,
    RateLimiter,
    Role,
    TokenBucket,
    hash_key,
    parse_principals,
    single_key_principal,
)


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_hash_lines_verify_and_never_hold_the_key() -> None:
    for scheme in ("sha256", "scrypt"):
        line = hash_key("correct horse", scheme=scheme)
        assert "correct horse" not in line and line.startswith(scheme + ":")
        stored = KeyHash(line)
        assert stored.matches("correct horse")
        assert not stored.matches("correct horsf") and not stored.matches("")
    # A per-key salt: the same key never gives the same line twice.
    assert hash_key("k") != hash_key("k")


@pytest.mark.parametrize(
    "line",
    [
        "plaintext-key",
        "sha256:zz:00",
        "sha256::" + "00" * 32,
        "sha256:00:1234",
        "md5:00:00",
        "scrypt:3:8:1:00:" + "00" * 32,
    ],
)
def test_malformed_or_plaintext_hash_lines_are_refused(line: str) -> None:
    with pytest.raises(ValueError, match="hash-key"):
        KeyHash(line)


def test_authenticator_finds_the_owner_and_refuses_shared_keys() -> None:
    a = Principal("a", {"x": Role.READ}, keys=(KeyHash(hash_key("ka")),))
    b = Principal(
        "b", {"y": Role.WRITE}, keys=(KeyHash(hash_key("kb")), KeyHash(hash_key("kb2", scheme="scrypt")))
    )
    auth = Authenticator([a, b])
    assert auth.authenticate("ka") is a
    assert auth.authenticate("kb") is b
    assert auth.authenticate("kb2") is b and auth.authenticate("kb2") is b  # second time from the cache
    assert auth.authenticate("kc") is None
    assert auth.authenticate("") is None
    assert auth.authenticate("k" * 5000) is None
    shared = Principal("c", {}, keys=(KeyHash(hash_key("ka")),))
    assert Authenticator([a, shared]).authenticate("ka") is None  # ambiguous: nobody


def test_grants() -> None:
    p = Principal("p", {"alice": Role.WRITE, "team-*": Role.READ, "shared": Role.READ})
    assert p.role_for("alice") is Role.WRITE
    assert p.role_for("alice_reflection") is Role.WRITE  # the reflection collection follows
    assert p.role_for("team-x") is Role.READ and p.role_for("team-x_reflection") is Role.READ
    assert p.role_for("bob") is Role.NONE and p.role_for("alicex") is Role.NONE
    assert p.role_for("_reflection") is Role.NONE
    assert p.role_for("bob_reflection") is Role.NONE
    assert not p.may("shared", Role.WRITE) and p.may("shared", Role.READ)
    root = single_key_principal("k")
    assert root.role_for("anything") is Role.ADMIN
    assert Principal("q", {"*": Role.READ, "mine": Role.ADMIN}).role_for("mine") is Role.ADMIN


def test_token_bucket_with_a_manual_clock() -> None:
    clock = FakeClock()
    bucket = TokenBucket(RateLimit(rps=2, burst=3), clock)
    assert [bucket.acquire() for _ in range(3)] == [0.0, 0.0, 0.0]  # the burst
    assert bucket.acquire() == pytest.approx(0.5)  # one token per 0.5 s
    clock.t += 0.25
    assert bucket.acquire() == pytest.approx(0.25)
    clock.t += 0.25
    assert bucket.acquire() == 0.0
    clock.t += 100  # refills up to the burst, no further
    assert [bucket.acquire() for _ in range(4)][-1] > 0
    clock.t -= 50  # a clock that goes backwards gives nothing away
    assert bucket.acquire() > 0
    assert TokenBucket(RateLimit(0, 1), clock).acquire() == 0.0  # unlimited


def test_token_bucket_charges_a_batch_its_cost_capped_at_the_burst() -> None:
    clock = FakeClock()
    bucket = TokenBucket(RateLimit(rps=10, burst=20), clock)
    assert bucket.acquire(8) == 0.0  # 12 left
    assert bucket.acquire(12) == 0.0  # 0 left
    assert bucket.acquire(5) == pytest.approx(0.5)  # refused: 5 tokens take 0.5 s; nothing taken
    clock.t += 0.5
    assert bucket.acquire(5) == 0.0
    # A batch larger than the bucket costs the whole bucket: possible, once it is full.
    assert bucket.acquire(64) == pytest.approx(2.0)
    clock.t += 2.0
    assert bucket.acquire(64) == 0.0
    assert bucket.acquire(1) == pytest.approx(0.1)


def test_rate_limiter_keeps_principals_apart() -> None:
    clock = FakeClock()
    limiter = RateLimiter(RateLimit(rps=1, burst=1), clock)
    hog = Principal("hog", {}, rate_limit=RateLimit(rps=5, burst=5))
    calm = Principal("calm", {})
    hog_ok = sum(limiter.acquire(hog) == 0.0 for _ in range(50))  # 10× its quota in one second
    assert hog_ok == 5
    assert limiter.acquire(calm) == 0.0
    clock.t += 1.0
    assert limiter.acquire(calm) == 0.0
    assert sum(limiter.acquire(hog) == 0.0 for _ in range(50)) == 5


def test_auth_file_parsing() -> None:
    doc = {
        "principals": [
            {
                "name": "alice",
                "keys": [hash_key("ka")],
                "grants": {"alice": "write", "shared": "read"},
                "rate_limit": {"rps": 20, "burst": 40},
            },
            {"name": "ops", "keys": [hash_key("ko", scheme="scrypt")], "grants": {"*": "admin"}},
        ]
    }
    alice, ops = parse_principals(doc)
    assert alice.grants == {"alice": Role.WRITE, "shared": Role.READ}
    assert alice.rate_limit == RateLimit(20.0, 40) and ops.rate_limit is None
    bad_docs = [
        {},
        {"principals": []},
        {"principals": [{"name": "a", "keys": ["plain"], "grants": {}}]},
        {"principals": [{"name": "a", "keys": [hash_key("k")], "grants": {"x": "owner"}}]},
        {"principals": [{"name": "a", "keys": [hash_key("k")], "grants": {"x": "none"}}]},
        {"principals": [{"name": "a", "keys": [hash_key("k")], "grants": {"a*b": "read"}}]},
        {"principals": [{"name": "a", "keys": [hash_key("k")], "rate_limit": {"rps": -1}}]},
        {"principals": [{"name": "a", "keys": [hash_key("k")], "rate_limit": {"rps": 1, "burst": 0}}]},
        {"principals": [{"name": "a", "keys": [hash_key("k")], "role": "admin"}]},
        {"principals": [{"name": "a", "keys": [hash_key("k")]}, {"name": "a", "keys": [hash_key("j")]}]},
        {"principals": [{"name": "", "keys": [hash_key("k")]}]},
    ]
    for doc in bad_docs:
        with pytest.raises(ValueError):
            parse_principals(doc)


def test_hash_key_command(capsys: pytest.CaptureFixture[str]) -> None:
    cli.main(["hash-key", "my secret key"])
    line = capsys.readouterr().out.strip()
    assert KeyHash(line).matches("my secret key") and "my secret key" not in line
    cli.main(["hash-key", "--generate"])
    key_line, hash_line = capsys.readouterr().out.strip().splitlines()
    key = key_line.removeprefix("key: ")
    assert len(key) > 40 and KeyHash(hash_line).matches(key)
    assert not hmac.compare_digest(key, hash_line)


def test_authenticator_caches_are_bounded_and_misses_are_remembered() -> None:
    fast = Principal("fast", {}, keys=(KeyHash(hash_key("kf")),))
    slow = Principal("slow", {}, keys=(KeyHash(hash_key("ks", scheme="scrypt")),))
    auth = Authenticator([fast, slow], cache_size=3)
    assert auth.authenticate("kf") is fast and auth.slow_hashes == 0  # found among the fast hashes
    assert auth.authenticate("ks") is slow and auth.slow_hashes == 1
    assert auth.authenticate("ks") is slow and auth.slow_hashes == 1  # remembered
    assert auth.authenticate("nope") is None and auth.slow_hashes == 2
    assert auth.authenticate("nope") is None and auth.slow_hashes == 2  # the miss is remembered too
    for i in range(10):
        auth.authenticate(f"guess-{i}")
    assert len(auth._misses) == 3 and len(auth._hits) <= 3
    assert auth.authenticate("nope") is None and auth.slow_hashes == 13  # evicted: checked again


def test_failure_limiter_counts_per_peer_and_forgets_the_oldest() -> None:
    now = [0.0]
    limiter = FailureLimiter(RateLimit(1.0, 2), max_peers=2, now=lambda: now[0])
    assert limiter.blocked_for("a") == 0.0
    limiter.failed("a")
    limiter.failed("a")
    assert limiter.blocked_for("a") == pytest.approx(1.0)
    assert limiter.blocked_for("b") == 0.0  # another address is not affected
    now[0] = 1.0
    assert limiter.blocked_for("a") == 0.0  # refilled
    limiter.failed("b")
    limiter.failed("c")
    assert len(limiter._buckets) == 2
    assert FailureLimiter(RateLimit(0, 1)).blocked_for("a") == 0.0  # rps 0: no limit
