"""Cleaning an LLM's topic name before it is shown (ListTopics, the context pack's Markdown)."""

from __future__ import annotations

from engram_server.domain.topics import MAX_NAME_CHARS, MAX_NAME_WORDS, clean_topic_name


def test_names_are_one_line_of_plain_text() -> None:
    assert clean_topic_name('  "Kubernetes `ops`\n on\tclusters."  ') == "Kubernetes ops on clusters"
    assert clean_topic_name("**Cooking & baking**") == "Cooking & baking"
    assert clean_topic_name("「日本旅行」。") == "日本旅行"
    assert clean_topic_name("Guitar\u0007 practice\u200b") == "Guitar practice"
    assert clean_topic_name("Python 3.12 style") == "Python 3.12 style"


def test_names_are_bounded() -> None:
    many = clean_topic_name(" ".join(f"w{i}" for i in range(40)))
    assert many == " ".join(f"w{i}" for i in range(MAX_NAME_WORDS))
    long = clean_topic_name("Supercalifragilistic " * 3 + "x" * 100)
    assert long is not None and len(long) <= MAX_NAME_CHARS
    cjk = clean_topic_name("很长的名字" * 30)
    assert cjk is not None and len(cjk) == MAX_NAME_CHARS


def test_nothing_usable_is_none() -> None:
    for raw in ("", "   ", '"..."', "``", "!!!", None, 42, ["a"]):
        assert clean_topic_name(raw) is None, raw
