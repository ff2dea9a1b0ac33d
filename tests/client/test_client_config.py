"""Connection settings from arguments and environment; retry policy; value conversion."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from engram_client import (
    ConnectionConfig,
    MemoryFilter,
    MemoryType,
    RetryPolicy,
    Source,
    SourceType,
    _convert,
    _plans,
)
from engram_client.proto.engram.v1 import memory_pb2

from .fake_engram import sample_memory


def test_defaults_without_environment() -> None:
    config = ConnectionConfig.resolve(env={})
    assert config.target == "localhost:50051"
    assert not config.tls and config.api_key is None and config.timeout == 10.0
    assert config.call_metadata() == ()


def test_arguments_win_over_environment() -> None:
    env = {"ENGRAM_ADDR": "env-host:1", "ENGRAM_API_KEY": "env-key", "ENGRAM_TIMEOUT": "4", "ENGRAM_TLS": "1"}
    config = ConnectionConfig.resolve("arg-host:2", api_key="arg-key", tls=False, timeout=1.5, env=env)
    assert (config.target, config.api_key, config.tls, config.timeout) == (
        "arg-host:2",
        "arg-key",
        False,
        1.5,
    )
    from_env = ConnectionConfig.resolve(env=env)
    assert (from_env.target, from_env.api_key, from_env.tls, from_env.timeout) == (
        "env-host:1",
        "env-key",
        True,
        4.0,
    )
    assert from_env.call_metadata((("x", "y"),)) == (("authorization", "Bearer env-key"), ("x", "y"))


def test_scheme_and_certificate_files_decide_tls(tmp_path: Path) -> None:
    assert ConnectionConfig.resolve("https://engram.example:443/", env={}).tls
    plain = ConnectionConfig.resolve("http://engram.example:80", env={})
    assert not plain.tls and plain.target == "engram.example:80"
    ca = tmp_path / "ca.pem"
    ca.write_bytes(b"-----BEGIN CERTIFICATE-----\n")
    config = ConnectionConfig.resolve(env={"ENGRAM_TLS_CA_FILE": str(ca)})
    assert config.tls and config.root_certificates == ca.read_bytes()
    assert not ConnectionConfig.resolve(env={"ENGRAM_TLS_CA_FILE": str(ca), "ENGRAM_TLS": "false"}).tls


def test_invalid_settings_are_refused(tmp_path: Path) -> None:
    key = tmp_path / "key.pem"
    key.write_bytes(b"k")
    with pytest.raises(ValueError, match="mutual TLS"):
        ConnectionConfig.resolve(env={"ENGRAM_TLS_KEY_FILE": str(key)})
    with pytest.raises(ValueError, match="ENGRAM_TLS"):
        ConnectionConfig.resolve(env={"ENGRAM_TLS": "maybe"})
    with pytest.raises(ValueError, match="timeout"):
        ConnectionConfig.resolve(timeout=-1, env={})


def test_backoff_is_exponential_capped_and_jittered() -> None:
    policy = RetryPolicy(initial_backoff=0.1, multiplier=2, max_backoff=0.3, jitter=0.0)
    assert [policy.backoff(n) for n in (1, 2, 3, 4)] == pytest.approx([0.1, 0.2, 0.3, 0.3])
    jittered = RetryPolicy(initial_backoff=1.0, jitter=0.2)
    delays = {jittered.backoff(1) for _ in range(50)}
    assert len(delays) > 1 and all(0.8 <= d <= 1.2 for d in delays)
    with pytest.raises(ValueError):
        RetryPolicy(max_attempts=0)


def test_memory_from_proto() -> None:
    proto = sample_memory(type=memory_pb2.MEMORY_TYPE_DIRECTIVE, tags=["a", "b"])
    proto.valid_until.FromSeconds(1_800_000_000)
    memory = _convert.memory_from_proto(proto)
    assert memory.type is MemoryType.DIRECTIVE and memory.type.value == "directive"
    assert memory.source is Source.AGENT and memory.source_type is SourceType.USER_INPUT
    assert memory.tags == ("a", "b") and memory.metadata == {"k": "v"}
    assert memory.created_at == datetime.fromtimestamp(1_700_000_000, UTC)
    assert memory.created_at.tzinfo is not None
    assert memory.valid_until == datetime.fromtimestamp(1_800_000_000, UTC)
    assert memory.last_accessed_at is None and memory.superseded_by is None


def test_unknown_enum_numbers_become_unspecified() -> None:
    proto = sample_memory()
    proto.type = 99  # type: ignore[assignment]  # a value from a newer server
    assert _convert.memory_from_proto(proto).type is MemoryType.UNSPECIFIED


def test_requests_are_built_from_keywords() -> None:
    add = _plans.add(
        "c",
        collection="work",
        type="identity",
        importance=9,
        tags=["t"],
        source="user",
        source_type=SourceType.DOCUMENT,
        metadata={"a": "b"},
        created_at=datetime(2024, 1, 1, tzinfo=UTC),
        valid_until=None,
        request_id=None,
    ).request
    assert add.type == memory_pb2.MEMORY_TYPE_IDENTITY and add.source == memory_pb2.SOURCE_USER  # type: ignore[attr-defined]
    assert add.HasField("importance") and not add.HasField("valid_until")
    search = _plans.search(
        "q",
        collections="one",
        limit=3,
        filter=MemoryFilter(
            types=["insight"], min_importance=6, created_after=datetime(2024, 1, 1, tzinfo=UTC)
        ),
        weights=None,
        diversify=True,
        mmr_lambda=0.3,
        min_relevance=0.0,
    ).request
    assert list(search.collections) == ["one"]  # type: ignore[attr-defined]
    assert list(search.filter.types) == [memory_pb2.MEMORY_TYPE_INSIGHT]  # type: ignore[attr-defined]
    assert search.HasField("mmr_lambda") and not search.HasField("weights")
    update = _plans.update(
        None,
        locate="old text",
        threshold=0.9,
        collection=None,
        content="new text",
        type=None,
        importance=None,
        tags=[],
        metadata=None,
        valid_until=None,
        dry_run=True,
    ).request
    assert update.WhichOneof("target") == "locate" and update.HasField("tags")
    assert not update.HasField("type") and not update.HasField("metadata")


def test_misuse_is_refused_before_sending() -> None:
    with pytest.raises(ValueError, match="one of"):
        _plans.add(
            "c",
            collection=None,
            type="nonsense",  # type: ignore[arg-type]
            importance=None,
            tags=(),
            source=None,
            source_type=None,
            metadata=None,
            created_at=None,
            valid_until=None,
            request_id=None,
        )
    with pytest.raises(ValueError, match="timezone-aware"):
        _plans.add(
            "c",
            collection=None,
            type=None,
            importance=None,
            tags=(),
            source=None,
            source_type=None,
            metadata=None,
            created_at=datetime(2024, 1, 1),
            valid_until=None,
            request_id=None,
        )
    with pytest.raises(ValueError, match="exactly one"):
        _plans.delete(
            "id", query="q", threshold=None, limit=None, collection=None, force=False, dry_run=False
        )
    with pytest.raises(ValueError, match="exactly one"):
        _plans.update(
            None,
            locate=None,
            threshold=None,
            collection=None,
            content="x",
            type=None,
            importance=None,
            tags=None,
            metadata=None,
            valid_until=None,
            dry_run=False,
        )
    with pytest.raises(TypeError):
        _plans.add(
            "c",
            collection=None,
            type=None,
            importance=None,
            tags="oops",
            source=None,
            source_type=None,
            metadata=None,
            created_at=None,
            valid_until=None,
            request_id=None,
        )
