"""Script detection by words (cross-lingual offset and blind-lexical credit at search)."""

import pytest

from engram_server.domain.text import (
    cross_script,
    function_counts,
    lexically_blind,
    reads_as_question,
    reads_as_statement,
    script_of,
    script_tag,
    word_counts,
    word_scripts,
    zh_cut,
    zh_tagged,
)


def test_script_of_mixed_text_follows_its_words() -> None:
    assert script_of("Lin Wei 现在用什么编辑器写代码？") == "cjk"
    assert script_of("Lin Wei is allergic to shellfish (虾、蟹都不能吃).") == "latin"
    assert script_of("代码示例请用 Python 3.11 和 type hints，不要用 Python 2 的写法。") == "cjk"
    assert script_of("Where was order 58731 shipped?") == "latin"
    assert script_of("Café crème à Zürich") == "latin"
    assert script_of("東京の天気") == "cjk"
    assert script_of("42 — 17 %") == ""


@pytest.mark.parametrize(
    "text",
    [
        # Mostly Chinese, carrying product names and code identifiers: more Latin letters than
        # Chinese characters, but more Chinese words than Latin ones.
        "在 staging 环境把 Redis cluster 的 maxmemory-policy 改成 allkeys-lru，然后重启 sentinel。",
        "用 PostgreSQL 和 Kubernetes 部署",
        "把 payment-service 的 replicas 调到 6 个，明天上线。",
        "CI 从 Jenkins 迁到了 GitHub Actions，构建时间少了一半。",
    ],
)
def test_mostly_chinese_text_with_latin_identifiers_is_cjk(text: str) -> None:
    assert script_of(text) == "cjk"
    assert script_tag(text) == "cjk+latin"


@pytest.mark.parametrize(
    "text",
    [
        "Lin Wei's favourite dish is 红烧肉, the way his grandmother made it.",
        "The deploy to 生产环境 is scheduled for Friday afternoon after the review.",
    ],
)
def test_mostly_english_text_with_a_few_chinese_words_is_latin(text: str) -> None:
    assert script_of(text) == "latin"
    assert script_tag(text) == "latin+cjk"


@pytest.mark.parametrize(
    "text",
    [
        # Chinese grammar (上 / 的 / 要 / 里 / 和 / 了) around English nouns: Chinese, though most
        # words are Latin.
        "Grafana dashboard 上 p99 latency 的 panel 要加一条 alert rule。",
        "CI pipeline 里 eslint 和 prettier 的 config 冲突了，先 disable 掉 no-unused-vars。",
        "Kafka consumer group 的 offset 被 reset 了，lag 一直在涨。",
    ],
)
def test_code_switched_text_is_in_the_script_of_its_grammar(text: str) -> None:
    cjk, latin = word_counts(text)
    assert latin >= cjk  # by words alone it would be English (or a tie)
    assert script_of(text) == "cjk"
    assert script_tag(text) == "cjk+latin"


@pytest.mark.parametrize(
    "text",
    [
        # English sentences whose Chinese is an aside in brackets: English.
        "Lin Wei is allergic to shellfish (虾、蟹都不能吃).",
        "Lin Wei has a daughter named Xiaoyu (小雨) who is six years old.",
        "The release notes（发布说明见内网）are on the wiki.",
    ],
)
def test_an_english_sentence_with_a_chinese_aside_is_latin(text: str) -> None:
    assert script_of(text) == "latin"
    assert script_tag(text) == "latin+cjk"


def test_function_words_are_counted_outside_asides() -> None:
    assert function_counts("Lin Wei is allergic to shellfish (虾、蟹都不能吃).") == (0, 2)
    assert function_counts("把 payment-service 的 replicas 调到 6 个")[0] >= 2


def test_script_tag_of_single_script_text() -> None:
    assert script_tag("The user is allergic to peanuts.") == "latin"
    assert script_tag("用户对花生过敏。") == "cjk"
    assert script_tag("2024-10-03 / 17 %") == ""


def test_word_scripts_lists_every_script_with_a_word() -> None:
    assert word_scripts("Where did the team go hiking last autumn?") == {"latin"}
    assert word_scripts("去年秋天团队去哪里徒步了？") == {"cjk"}
    assert word_scripts("Anna 去年秋天去哪里徒步了？") == {"cjk", "latin"}
    assert word_scripts("2024-10-03 / 17 %") == frozenset()


def test_cross_script_offset_follows_the_main_script_by_words() -> None:
    assert cross_script("cjk", "latin") == "latin"  # a translation: offset
    assert cross_script("latin", "cjk") == "cjk"
    assert cross_script("cjk", "cjk") == ""
    # A Chinese sentence with Latin identifiers is Chinese: no offset for a Chinese question …
    assert (
        cross_script(
            "cjk", script_tag("在 staging 环境把 Redis cluster 的 maxmemory-policy 改成 allkeys-lru。")
        )
        == ""
    )
    # … and the offset for an English one, even with a Latin token in it.
    assert cross_script("latin", script_tag("我的血型是 AB 型，献过两次血。")) == "cjk"
    # Mostly English with a Chinese word: English, both ways round.
    assert cross_script("latin", "latin+cjk") == ""
    assert cross_script("cjk", "latin+cjk") == "latin"
    assert cross_script("", "latin") == ""
    assert cross_script("cjk", "") == ""


def test_lexically_blind_by_the_main_script() -> None:
    assert lexically_blind(frozenset({"latin"}), "cjk")
    assert lexically_blind(frozenset({"latin"}), "cjk+latin")
    assert not lexically_blind(frozenset({"cjk"}), "cjk+latin")
    assert not lexically_blind(frozenset({"cjk", "latin"}), "latin")
    assert not lexically_blind(frozenset({"latin"}), "")
    assert lexically_blind(frozenset(), "latin")


@pytest.mark.parametrize(
    ("text", "statement"),
    [
        ("The staging database is backed up every night at 02:00 UTC.", True),
        ("Frank prefers concise commit messages!", True),
        ('Maria said: "the review moved to Thursday."', True),
        ("林伟每周三下午练瑜伽。", True),
        ("（用户对花生过敏。）", True),
        ("When is the staging database backed up?", False),
        ("林伟现在用什么编辑器？", False),
        ("Why? It failed.", False),
        ("staging backup schedule", False),
        ("Redis.", False),
        ("", False),
        ("User prefers dark mode in every editor", False),
        ("recent work, decisions and problems in the shop project", False),
        ("how does Maria take her coffee.", False),
        ("Backups. When do they run", False),
        ("Do not deploy to production on Fridays.", True),
        ("林伟现在用什么编辑器写代码。", False),
        ("林伟每周三下午在公司健身房练瑜伽。", True),
    ],
)
def test_reads_as_statement(text: str, statement: bool) -> None:
    assert reads_as_statement(text) is statement


@pytest.mark.parametrize(
    ("text", "question"),
    [
        ("Where does Ana live now?", True),
        ("where does Ana live now", True),
        ("谢娟现在住在哪里？", True),
        ("谢娟现在住在哪里", True),
        ("林伟喝咖啡吗", True),
        ("王经理下周去哪个城市出差。", True),
        ("Lin Wei 现在用什么编辑器", True),
        ("staging 的 Redis 用什么 maxmemory-policy？", True),
        ("Backups. When do they run", True),
        ("Does Lin Wei drink coffee?", True),
        ("Does Lin Wei drink coffee", False),  # an auxiliary opens directives too
        ("Do not deploy to production on Fridays.", False),
        ("Ana lives in Lisbon.", False),
        ("谢娟住在杭州西湖区。", False),
        ("staging backup schedule", False),
        ("", False),
        ("”）", False),
    ],
)
def test_reads_as_question(text: str, question: bool) -> None:
    assert reads_as_question(text) is question


@pytest.mark.parametrize(
    "text",
    [
        "Where does Ana live now?",
        "Ana lives in Lisbon.",
        "谢娟现在住在哪里。",
        "林伟每周三下午练瑜伽。",
        "staging backup schedule",
        "How does Maria take her coffee.",
        "Why? It failed.",
    ],
)
def test_never_both_statement_and_question(text: str) -> None:
    assert not (reads_as_statement(text) and reads_as_question(text))


@pytest.mark.parametrize(
    ("text", "words"),
    [
        # jieba's HMM glues a one-character verb onto a two-character name before 了 / 过 / 着
        ("刘洋选了红色的窗帘。", ("刘洋", "选", "了")),
        ("孙丽写了报告。", ("孙丽", "写", "了")),
        ("张伟选了蓝色的窗帘。", ("张伟", "选", "了")),
        # a name jieba cuts right, or a three-character name with no aspect particle after it
        ("张伟买了一辆车。", ("张伟", "买", "了")),
        ("王鹏飞来了。", ("王鹏飞", "来", "了")),
        ("李建成是工程师。", ("李建成", "是", "工程师")),
    ],
)
def test_a_verb_glued_onto_a_name_is_cut_off(text: str, words: tuple[str, ...]) -> None:
    assert zh_cut(text)[: len(words)] == words
    tagged = zh_tagged(text)
    assert tuple(w for w, _ in tagged)[: len(words)] == words
    assert tagged[0][1].startswith("nr")
