"""Configuration: ENGRAM_* parsing, validation, and the README table staying complete."""

from pathlib import Path

import pytest

from engram_server.config import SETTINGS_DOC, ConfigError, documented_fields, load_settings

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_without_environment() -> None:
    s = load_settings({})
    assert (s.host, s.port, s.embedder_provider, s.dedup_threshold) == ("127.0.0.1", 50051, "local", 0.92)
    assert (s.weight_relevance, s.weight_recency, s.weight_importance) == (1.0, 0.5, 0.3)
    assert s.qdrant_url is None and s.data_dir == Path("data")


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
    ],
)
def test_bad_values_are_clear_errors(var: str, value: str) -> None:
    with pytest.raises(ConfigError):
        load_settings({var: value})


def test_every_setting_is_documented_in_the_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    assert {name for name, _, _ in SETTINGS_DOC} == documented_fields()
    missing = [var for _, var, _ in SETTINGS_DOC if f"`{var}`" not in readme]
    assert not missing, f"README configuration table lacks {missing}"
