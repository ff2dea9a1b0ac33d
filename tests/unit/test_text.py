"""Script detection for cross-lingual calibration."""

from engram_server.domain.text import script_of


def test_script_of_mixed_text_follows_its_words() -> None:
    assert script_of("Lin Wei 现在用什么编辑器写代码？") == "cjk"
    assert script_of("Lin Wei is allergic to shellfish (虾、蟹都不能吃).") == "latin"
    assert script_of("代码示例请用 Python 3.11 和 type hints，不要用 Python 2 的写法。") == "cjk"
    assert script_of("Where was order 58731 shipped?") == "latin"
    assert script_of("Café crème à Zürich") == "latin"
    assert script_of("東京の天気") == "cjk"
    assert script_of("42 — 17 %") == ""


def test_word_scripts_lists_every_script_with_a_word() -> None:
    from engram_server.domain.text import word_scripts  # noqa: PLC0415

    assert word_scripts("Where did the team go hiking last autumn?") == {"latin"}
    assert word_scripts("去年秋天团队去哪里徒步了？") == {"cjk"}
    assert word_scripts("Anna 去年秋天去哪里徒步了？") == {"cjk", "latin"}
    assert word_scripts("2024-10-03 / 17 %") == frozenset()
