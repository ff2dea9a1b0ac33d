"""Configuration: ENGRAM_* parsing, validation, and the configuration reference staying complete."""

from pathlib import Path

import pytest

from engram_server.config import SETTINGS_DOC, ConfigError, documented_fields, load_settings

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_without_environment() -> None:
    s = load_settings({})
    assert (s.host, s.port, s.embedder_provider, s.dedup_threshold) == ("127.0.0.1", 50051, "local", 0.92)
    assert (s.weight_relevance, s.weight_recency, s.weight_importance) == (1.0, 0.05, 0.02)
    assert s.qdrant_url is None and s.data_dir == Path("data")
    # a question whose embedding is cached keeps its nearest list as long
    assert (s.nearest_lists, s.query_cache_size, s.search_cache_entries) == (4096, 4096, 256)


def test_parses_every_kind_of_value() -> None:
    s = load_settings(
        {
            "ENGRAM_PORT": "6000",
            "ENGRAM_WEIGHT_RECENCY": "0.25",
            "ENGRAM_QDRANT_HTTPS": "yes",
            "ENGRAM_DATA_DIR": "/tmp/x",
            "ENGRAM_QDRANT_URL": "http://qdrant:6333",
            "ENGRAM_EMBEDDING_DIMENSION": "",  # empty = unset
        }
    )
    assert (s.port, s.weight_recency, s.qdrant_https, s.data_dir) == (6000, 0.25, True, Path("/tmp/x"))
    assert s.qdrant_url == "http://qdrant:6333" and s.embedding_dimension is None


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("ENGRAM_PORT", "eighty"),
        ("ENGRAM_PORT", "70000"),
        ("ENGRAM_DEDUP_THRESHOLD", "1.5"),
        ("ENGRAM_NEAR_DUPLICATE_THRESHOLD", "0.95"),
        ("ENGRAM_WEIGHT_RELEVANCE", "-1"),
        ("ENGRAM_EMBEDDER_PROVIDER", "cohere"),
        ("ENGRAM_QDRANT_HTTPS", "maybe"),
        ("ENGRAM_GATE_HNSW_EF", "-1"),
        ("ENGRAM_SEARCH_CACHE_ENTRIES", "-1"),
        ("ENGRAM_NEAREST_LISTS", "-1"),
        ("ENGRAM_NEAREST_LISTS", "many"),
        ("ENGRAM_LOCAL_EMBED_WORKERS", "-1"),
    ],
)
def test_bad_values_are_clear_errors(var: str, value: str) -> None:
    with pytest.raises(ConfigError):
        load_settings({var: value})


def test_every_setting_is_documented_in_the_configuration_reference() -> None:
    reference = (ROOT / "docs" / "reference" / "config.md").read_text()
    assert {name for name, _, _ in SETTINGS_DOC} == documented_fields()
    missing = [var for _, var, _ in SETTINGS_DOC if f"`{var}`" not in reference]
    assert not missing, f"docs/reference/config.md lacks {missing} (run `make docs`)"


def test_cluster_settings_parse() -> None:
    s = load_settings(
        {
            "ENGRAM_QDRANT_SHARD_NUMBER": "6",
            "ENGRAM_QDRANT_REPLICATION_FACTOR": "2",
            "ENGRAM_QDRANT_WRITE_CONSISTENCY_FACTOR": "2",
            "ENGRAM_QDRANT_ON_DISK": "true",
            "ENGRAM_QDRANT_QUANTIZATION": "int8",
        }
    )
    assert (s.qdrant_shard_number, s.qdrant_replication_factor, s.qdrant_write_consistency_factor) == (
        6,
        2,
        2,
    )
    assert (s.qdrant_on_disk, s.qdrant_quantization) == (True, "int8")
    # write consistency alone is left to the server (its default replication factor may be higher)
    assert load_settings({"ENGRAM_QDRANT_WRITE_CONSISTENCY_FACTOR": "2"}).qdrant_write_consistency_factor == 2
    defaults = load_settings({})
    assert (defaults.qdrant_write_consistency_factor, defaults.qdrant_on_disk) == (None, False)
    assert defaults.qdrant_quantization == "none"


def test_edge_quantization_defaults_to_int8_and_can_be_turned_off() -> None:
    assert load_settings({}).edge_quantization == "int8"
    assert load_settings({"ENGRAM_EDGE_QUANTIZATION": "none"}).edge_quantization == "none"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"ENGRAM_QDRANT_SHARD_NUMBER": "0"}, "ENGRAM_QDRANT_SHARD_NUMBER must be a positive integer"),
        ({"ENGRAM_QDRANT_REPLICATION_FACTOR": "-1"}, "ENGRAM_QDRANT_REPLICATION_FACTOR must be a positive"),
        ({"ENGRAM_QDRANT_WRITE_CONSISTENCY_FACTOR": "0"}, "WRITE_CONSISTENCY_FACTOR must be a positive"),
        ({"ENGRAM_QDRANT_REPLICATION_FACTOR": "two"}, "ENGRAM_QDRANT_REPLICATION_FACTOR='two'"),
        (
            {"ENGRAM_QDRANT_REPLICATION_FACTOR": "2", "ENGRAM_QDRANT_WRITE_CONSISTENCY_FACTOR": "3"},
            r"must not exceed ENGRAM_QDRANT_REPLICATION_FACTOR \(3 > 2\)",
        ),
        ({"ENGRAM_QDRANT_QUANTIZATION": "binary"}, "ENGRAM_QDRANT_QUANTIZATION must be one of none, int8"),
        ({"ENGRAM_EDGE_QUANTIZATION": "int4"}, "ENGRAM_EDGE_QUANTIZATION must be one of int8, none"),
        ({"ENGRAM_QDRANT_ON_DISK": "sometimes"}, "ENGRAM_QDRANT_ON_DISK"),
    ],
)
def test_bad_cluster_settings_are_clear_errors(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(env)


def test_bad_cluster_settings_stop_the_cli_at_start_up(monkeypatch: pytest.MonkeyPatch) -> None:
    from engram_server import cli  # noqa: PLC0415

    monkeypatch.setenv("ENGRAM_QDRANT_REPLICATION_FACTOR", "1")
    monkeypatch.setenv("ENGRAM_QDRANT_WRITE_CONSISTENCY_FACTOR", "2")
    with pytest.raises(SystemExit, match="configuration error: ENGRAM_QDRANT_WRITE_CONSISTENCY_FACTOR"):
        cli.main(["serve"])
